"""The search loop on recorded H200 evaluations: no GPU, no compiler, real numbers.

The recordings in studies/recorded/h200-smoke were measured on one H200; replaying them
measures nothing. Each test narrows the space to the configs recorded for its layer, so the
sampler reaches them within a few trials.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from cutsearch import model, tuner
from cutsearch.errors import UserError
from cutsearch.evaluator import Evaluation, ReplayEvaluator
from cutsearch.outcome import Failure
from cutsearch.problem import Layer
from cutsearch.search import SearchResult, search
from cutsearch.verdict import Verdict
from cutsearch.space import SCHEDULES, Config, Knobs, Space, invalid_reason
from tests.together import run_together

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "studies" / "recorded" / "h200-smoke"

ASR = Layer(m=4096, n=5000, k=1024)
ASR_RECORDING = RECORDED / "fc-4096x5000x1024-f16.json"
# The 128x128x128 pingpong kernels recorded for this layer: TMA or nosmem epilogue, direct or swapped.
ASR_SPACE = Space(ASR, tile_m=(128,), tile_n=(128,), tile_k=(128,), clusters=((1, 1),),
                  schedules=("pingpong/tma/persistent", "pingpong/nosmem/persistent"), stages=(0,))

ODD = Layer(m=3000, n=1001, k=999, dtype="bf16", bias=True, activation="gelu")
ODD_RECORDING = RECORDED / "fc-3000x1001x999-bf16-bias-gelu.json"
ODD_SPACE = Space(ODD, tile_m=(128,), tile_n=(64,), tile_k=(128,), clusters=((1, 1),),
                  schedules=("pingpong/tma/persistent", "pingpong/nosmem/persistent"), stages=(0,), pad=(True,))

STUDY = "recorded"


def recording(path: Path) -> dict[str, dict]:
    """The recorded evaluations of a file, by config key, as stored."""
    return {Config.from_dict(e["config"]).key: e for e in json.loads(path.read_text())["evaluations"]}


def fastest_reachable(path: Path, layer: Layer, space: Space) -> dict:
    """The recording's fastest measured config that the rules allow and `space` holds."""
    keys = {c.key for c in space}
    measured = [e for k, e in recording(path).items()
                if e.get("measurement") and k in keys and invalid_reason(layer, Config.from_dict(e["config"])) is None]
    return min(measured, key=lambda e: e["measurement"]["timing"]["median_us"])


class Counting:
    """A recorded evaluator that remembers every config it is asked to evaluate."""

    source = "recorded"

    def __init__(self, inner) -> None:
        self.inner = inner
        self.recorded_gpu = inner.recorded_gpu
        self.asked: list[str] = []

    def evaluate(self, layer, configs, events=None):
        self.asked.extend(c.key for c in configs)
        yield from self.inner.evaluate(layer, configs, events)

    def close(self) -> None:
        pass


def journal(path: Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(path)))


def run(tmp_path: Path, layer: Layer, evaluator, space: Space, *, trials: int, **kw):
    """One search call on the study kept in tmp_path; returns (result, trials of the study)."""
    storage = journal(tmp_path / "journal.log")
    kw = {"batch": 2, "sampler": "random", "seed": 0, **kw}
    result = search(layer, evaluator=evaluator, storage=storage, study_name=STUDY, trials=trials, space=space, **kw)
    return result, optuna.load_study(study_name=STUDY, storage=storage).get_trials()


def replay(path: Path, layer: Layer) -> Counting:
    return Counting(ReplayEvaluator.load(path, layer))


def counted(trials) -> list[optuna.trial.FrozenTrial]:
    """Trials that use the budget: finished, neither refused by a rule nor killed with their run."""
    return [t for t in trials if t.state.is_finished() and not t.user_attrs.get("rule_invalid")
            and (t.user_attrs.get("failure") or {}).get("kind") != "interrupted"]


def test_recorded_trials_are_told_their_recorded_times(tmp_path):
    result, trials = run(tmp_path, ASR, replay(ASR_RECORDING, ASR), ASR_SPACE, trials=2)
    recorded = recording(ASR_RECORDING)
    told = counted(trials)
    assert len(told) == result.trials == 2
    assert {t.user_attrs["config"] for t in told} == {"128x128x128_c1x1_pingpong_tma_s0_persistent",
                                                      "128x128x128_c1x1_pingpong_tma_s0_persistent_swap"}
    for t in told:
        measured = recorded[t.user_attrs["config"]]["measurement"]
        assert t.state == TrialState.COMPLETE
        assert t.value == measured["timing"]["median_us"]
        assert t.user_attrs["cublas_us"] == measured["baseline"]["median_us"]
        assert t.user_attrs["source"] == "recorded"
        assert Knobs(**t.user_attrs["evaluation"]["measurement"]["knobs"]) == Knobs(**measured["knobs"])


@pytest.mark.parametrize("layer, path, space, best_key, cublas_wins", [
    (ASR, ASR_RECORDING, ASR_SPACE, "128x128x128_c1x1_pingpong_tma_s0_persistent", True),
    (ODD, ODD_RECORDING, ODD_SPACE, "128x64x128_c1x1_pingpong_tma_s0_persistent_pad", False),
], ids=["asr-cublas-wins", "odd-bias-gelu-cutlass-wins"])
def test_recorded_search_finds_the_recordings_fastest_kernel(tmp_path, layer, path, space, best_key, cublas_wins):
    result, _ = run(tmp_path, layer, replay(path, layer), space, trials=2)
    expected = fastest_reachable(path, layer, space)
    assert result.best.config.key == best_key == Config.from_dict(expected["config"]).key
    assert result.best.median_us == expected["measurement"]["timing"]["median_us"]
    assert result.cublas_us == expected["measurement"]["baseline"]["median_us"]
    assert result.speedup == pytest.approx(result.cublas_us / result.best.median_us)
    assert result.source == "recorded"
    summary = tuner.summary(result, command="test")
    assert (summary["best_us"], summary["cublas_us"], summary["speedup"]) == (
        result.best.median_us, result.cublas_us, result.speedup)
    assert summary["cublas_wins"] is cublas_wins
    assert summary["note"] == "replayed from recorded NVIDIA H200 measurements, not measured in this run"


def test_odd_layer_recording_beats_cublas_by_its_recorded_margin(tmp_path):
    result, _ = run(tmp_path, ODD, replay(ODD_RECORDING, ODD), ODD_SPACE, trials=2)
    # Recorded on the H200: 46.4 us against cuBLAS's 90.4 us, bias and GELU fused.
    assert result.best.median_us == pytest.approx(46.384, abs=1e-3)
    assert result.cublas_us == pytest.approx(90.352, abs=1e-3)
    assert result.speedup == pytest.approx(1.948, abs=1e-3)


def test_rule_invalid_proposals_are_recorded_with_reasons_and_cost_no_budget(tmp_path):
    evaluator = replay(ASR_RECORDING, ASR)
    result, trials = run(tmp_path, ASR, evaluator, ASR_SPACE, trials=4)
    refused = [t for t in trials if t.user_attrs.get("rule_invalid")]
    assert refused, "the seeded sampler proposes the nosmem configs the rules refuse"
    for t in refused:
        config = Config.from_dict(t.user_attrs["evaluation"]["config"])
        assert t.state == TrialState.PRUNED  # so TPE ranks the region last
        assert t.user_attrs["failure"]["kind"] == "invalid"
        assert t.user_attrs["failure"]["message"] == invalid_reason(ASR, config)
        assert config.epilogue_schedule == "nosmem"
    assert len(counted(trials)) == result.trials == 4
    assert result.failures == {}
    assert all(invalid_reason(ASR, Config.from_dict(recording(ASR_RECORDING)[k]["config"])) is None
               for k in evaluator.asked), "no refused config reaches the evaluator"


def test_known_configs_replay_their_result_without_reevaluation(tmp_path):
    evaluator = replay(ASR_RECORDING, ASR)
    result, trials = run(tmp_path, ASR, evaluator, ASR_SPACE, trials=6)
    assert collections.Counter(evaluator.asked) == {"128x128x128_c1x1_pingpong_tma_s0_persistent": 1,
                                                    "128x128x128_c1x1_pingpong_tma_s0_persistent_swap": 1}
    told = counted(trials)
    assert len(told) == result.trials == 6
    assert result.new_trials == 2
    first = {t.user_attrs["config"]: t.value for t in told if not t.user_attrs["evaluation"].get("replayed_from_study")}
    replayed = [t for t in told if t.user_attrs["evaluation"].get("replayed_from_study")]
    assert len(first) == 2 and len(replayed) == 4
    assert all(t.value == first[t.user_attrs["config"]] for t in replayed)


def test_configs_missing_from_the_recording_fail_as_invalid_and_count(tmp_path):
    # The swapped, padded TMA kernel was never measured for this layer.
    result, trials = run(tmp_path, ODD, replay(ODD_RECORDING, ODD), Space(
        ODD, tile_m=(128,), tile_n=(64,), tile_k=(128,), clusters=((1, 1),), schedules=("pingpong/tma/persistent",),
        stages=(0,), pad=(True,)), trials=2)
    assert result.failures == {"invalid": 1}
    (failed,) = [t for t in counted(trials) if t.state == TrialState.FAIL]
    assert failed.user_attrs["config"] == "128x64x128_c1x1_pingpong_tma_s0_persistent_swap_pad"
    assert failed.user_attrs["failure"]["message"] == "not in the recording: this config was not measured"
    assert result.best.config.key == "128x64x128_c1x1_pingpong_tma_s0_persistent_pad"


class RecordedCompileError:
    """The recording of the odd layer, where one config fails to build.

    The failure is the compile error recorded on the H200 for a nosmem kernel of this layer
    (which the rules now refuse before compiling), attached to the swapped TMA kernel.
    """

    source = "recorded"

    def __init__(self) -> None:
        self.inner = ReplayEvaluator.load(ODD_RECORDING, ODD)
        recorded = recording(ODD_RECORDING)["128x64x128_c1x1_pingpong_nosmem_s0_persistent_pad"]
        self.failure = Failure.from_dict(recorded["failure"])
        self.asked: list[str] = []

    def evaluate(self, layer, configs, events=None):
        self.asked.extend(c.key for c in configs)
        for config in configs:
            if config.swap_ab:
                yield Evaluation(config=config, outcome=self.failure, source=self.source)
            else:
                yield from self.inner.evaluate(layer, [config], events)

    def close(self) -> None:
        pass


def test_compile_errors_are_recorded_with_their_log_and_replayed_not_rebuilt(tmp_path):
    space = Space(ODD, tile_m=(128,), tile_n=(64,), tile_k=(128,), clusters=((1, 1),),
                  schedules=("pingpong/tma/persistent",), stages=(0,), pad=(True,))
    evaluator = RecordedCompileError()
    result, trials = run(tmp_path, ODD, evaluator, space, trials=2)
    assert result.failures == {"compile_error": 1}
    (failed,) = [t for t in counted(trials) if t.state == TrialState.FAIL]
    failure = failed.user_attrs["failure"]
    assert failure["kind"] == "compile_error"
    assert "static assertion failed" in failure["message"]
    assert failure["log"] == evaluator.failure.log[-20000:] and len(failure["log"]) > 1000
    # A later run meets the failed config again: it replays the failure, it does not rebuild it.
    again = RecordedCompileError()
    result, trials = run(tmp_path, ODD, again, space, trials=4)
    assert again.asked == []
    assert result.failures == {"compile_error": 2}


def test_resuming_with_a_larger_budget_continues_the_study(tmp_path):
    first = replay(ASR_RECORDING, ASR)
    _, before = run(tmp_path, ASR, first, ASR_SPACE, trials=1, warm=0)
    assert len(counted(before)) == 1
    second = replay(ASR_RECORDING, ASR)
    result, after = run(tmp_path, ASR, second, ASR_SPACE, trials=3, warm=0)
    assert len(counted(after)) == result.trials == 3
    # Earlier trials are intact, new ones are numbered after them.
    old = {t.number: (t.state, t.value, t.params, t.user_attrs.get("config")) for t in before}
    assert {t.number: (t.state, t.value, t.params, t.user_attrs.get("config")) for t in after if t.number in old} == old
    new = [t for t in after if t.number not in old]
    assert new and min(t.number for t in new) > max(old)
    assert sorted(t.number for t in after) == list(range(len(after)))
    # The config the first run evaluated is known: only the other one is evaluated now.
    assert set(first.asked).isdisjoint(second.asked)
    assert result.new_trials == len(second.asked) == 1


def test_a_study_made_with_explicit_stages_resumes_under_the_default_space(tmp_path):
    """Studies made before the default space dropped explicit stages keep their choices."""
    from cutsearch.evaluator import ModelEvaluator
    from cutsearch.space import STAGES

    layer = Layer(m=512, n=1024, k=2048)
    narrow = dict(tile_m=(128,), tile_n=(64, 128), tile_k=(64,), clusters=((1, 1),),
                  schedules=("pingpong/tma/persistent",))
    _, before = run(tmp_path, layer, ModelEvaluator(), Space(layer, stages=STAGES, **narrow), trials=6, warm=0)
    assert {t.params["stages"] for t in before} - {0}, "the first run tried explicit stages"
    for sampler in ("tpe", "model"):
        goal = len(counted(before)) + 2
        result, before = run(tmp_path, layer, ModelEvaluator(), Space(layer, **narrow), trials=goal, warm=0,
                             sampler=sampler)
        assert result.trials == len(counted(before)) == goal


def test_a_study_made_before_the_staged_epilogue_resumes_with_its_own_choices(tmp_path):
    """A newer space offers more schedules (and tile depths, clusters): a study made with fewer
    keeps those it was made with, since Optuna refuses a changed categorical."""
    from cutsearch.evaluator import ModelEvaluator
    from cutsearch.space import SCHEDULES

    layer = Layer(m=512, n=1001, k=1024)
    old = tuple(s for s in SCHEDULES if "staged" not in s)
    narrow = dict(tile_m=(128,), tile_n=(64, 128), clusters=((1, 1), (2, 1)))
    _, before = run(tmp_path, layer, ModelEvaluator(), Space(layer, schedules=old, tile_k=(64,), **narrow),
                    trials=4, warm=0)
    for sampler in ("tpe", "random"):
        goal = len(counted(before)) + 2
        result, before = run(tmp_path, layer, ModelEvaluator(), Space(layer, tile_k=(64, 128), **narrow),
                             trials=goal, warm=0, sampler=sampler)
        assert result.trials == len(counted(before)) == goal
    assert all("staged" not in t.params["schedule"] and t.params["tile_k"] == 64 for t in before)


def test_a_study_made_before_padding_was_offered_resumes_with_its_own_choices(tmp_path):
    """16x16x5000 had no padding choice before split-K copied an aligned x to its pitch; a study
    made then resumes under the default space, which offers it, instead of Optuna's refusal."""
    from cutsearch.evaluator import ModelEvaluator

    layer = Layer(m=16, n=16, k=5000, bias=True)
    assert Space(layer).dimensions()["pad"] == (False, True)
    narrow = dict(tile_m=(64,), tile_n=(16, 32), clusters=((1, 1),))
    _, before = run(tmp_path, layer, ModelEvaluator(), Space(layer, pad=(False,), swap_ab=(True,), **narrow),
                    trials=3, warm=0)
    goal = len(counted(before)) + 2
    result, before = run(tmp_path, layer, ModelEvaluator(), Space(layer, **narrow), trials=goal, warm=0)
    assert result.trials == len(counted(before)) == goal
    assert all(t.params["pad"] is False and t.params["swap_ab"] is True for t in before)


def test_equally_fast_trials_make_the_earlier_one_best_whatever_order_they_finish_in(tmp_path):
    """Timings come in steps, so two kernels can tie. The best persisted during the search (the
    exported kernel) must be the one the study reports at its end."""
    import dataclasses

    from cutsearch.outcome import Measurement

    inner = ReplayEvaluator.load(ASR_RECORDING, ASR)

    class TiedAndReversed:
        source = "recorded"

        def evaluate(self, layer, configs, events=None):
            for ev in reversed(list(inner.evaluate(layer, configs, events))):
                if isinstance(ev.outcome, Measurement):
                    tied = dataclasses.replace(ev.outcome.timing, median_us=50.0)
                    ev = dataclasses.replace(ev, outcome=dataclasses.replace(ev.outcome, timing=tied))
                yield ev

        def close(self) -> None:
            pass

    persisted = []
    result, trials = run(tmp_path, ASR, TiedAndReversed(), ASR_SPACE, trials=2, warm=0,
                         on_best=lambda best, _study: persisted.append(best.number))
    measured = sorted(t.number for t in trials if t.value is not None)
    assert len(measured) == 2, "two measured trials, told in reverse order"
    assert result.best.number == measured[0] == persisted[-1]


def test_resuming_with_the_same_budget_evaluates_nothing(tmp_path):
    done, before = run(tmp_path, ASR, replay(ASR_RECORDING, ASR), ASR_SPACE, trials=2)
    evaluator = replay(ASR_RECORDING, ASR)
    result, after = run(tmp_path, ASR, evaluator, ASR_SPACE, trials=2)
    assert result.new_trials == 0 and result.new_compiles == 0
    assert evaluator.asked == []
    assert len(after) == len(before), "not even a proposal is asked"
    assert result.trials == done.trials == 2
    assert result.best.number == done.best.number and result.best.median_us == done.best.median_us


def test_a_study_refuses_to_resume_for_another_layer(tmp_path):
    run(tmp_path, ASR, replay(ASR_RECORDING, ASR), ASR_SPACE, trials=1)
    other = Layer(m=4096, n=5000, k=1024, dtype="bf16")
    with pytest.raises(UserError, match="choose another --study name"):
        run(tmp_path, other, Counting(ReplayEvaluator({})), Space(other), trials=2)


def test_a_recording_of_another_layer_is_refused():
    with pytest.raises(UserError, match="is for layer"):
        ReplayEvaluator.load(ASR_RECORDING, ODD)


# --- a replayed search killed mid-batch, then resumed ------------------------------------------

KILLED_TRIALS = 6


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cutsearch", "search", "--m", "4096", "--n", "5000", "--k", "1024",
            "--evaluator", "replay", "--recording", str(ASR_RECORDING), "--trials", str(KILLED_TRIALS),
            "--sampler", "random", "--study", "killed", *args]


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def _read(path: Path) -> list[optuna.trial.FrozenTrial] | None:
    try:
        return optuna.load_study(study_name="killed", storage=journal(path)).get_trials()
    except KeyError:  # the study is not created yet
        return None


def _stop_mid_batch(proc: subprocess.Popen, path: Path) -> list[optuna.trial.FrozenTrial]:
    """Freeze the search at a moment when it has told some trials and is evaluating others."""
    lock = Path(f"{path}.lock")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the search finished before it could be killed"
        time.sleep(0.2)
        if not path.is_file():
            continue
        os.kill(proc.pid, signal.SIGSTOP)
        trials = _read(path)
        # Not while it writes the journal: a lock left by a killed writer stalls the next run 30 s.
        if trials and not lock.exists() and counted(trials) and any(t.state == TrialState.RUNNING for t in trials):
            return trials
        os.kill(proc.pid, signal.SIGCONT)
    raise AssertionError("the search never had told and running trials at once")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_killed_recorded_search_resumes_to_its_budget(tmp_path, private_dirs, how):
    """kill -9 leaves trials RUNNING, for the next run to reap; SIGTERM (`timeout`, a scheduler)
    lets the run fail them itself. Either way the next run evaluates what was in flight."""
    studies = private_dirs[0]
    path = studies / "killed" / "journal.log"
    with open(tmp_path / "killed.out", "w") as out:
        proc = subprocess.Popen(_cli(), env=_env(CUTSEARCH_REPLAY_DELAY_S="1.0"), stdout=out, stderr=subprocess.STDOUT)
        try:
            at_kill = _stop_mid_batch(proc, path)
            proc.send_signal(how)
            os.kill(proc.pid, signal.SIGCONT)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert proc.returncode == (-signal.SIGKILL if how == signal.SIGKILL else 128 + signal.SIGTERM)
    running = {t.number for t in at_kill if t.state == TrialState.RUNNING}
    finished = {t.number: (t.state, t.value, t.user_attrs.get("config")) for t in at_kill if t.state.is_finished()}
    assert 0 < len(counted(at_kill)) < KILLED_TRIALS and running
    if how == signal.SIGTERM:  # the run fails the trials it claimed; one asked but not yet claimed waits to be reaped
        stopped = {t.number: t for t in _read(path)}
        assert {stopped[n].state for n in running} <= {TrialState.FAIL, TrialState.RUNNING}
        assert all(stopped[n].user_attrs["failure"]["message"] == "its run stopped before it finished"
                   for n in running if stopped[n].state == TrialState.FAIL)

    rerun = subprocess.run(_cli(), env=_env(), capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    if how == signal.SIGKILL:
        assert f"reaped {len(running)} trial(s) left RUNNING by a killed run" in rerun.stderr

    final = _read(path)
    assert not [t for t in final if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert len(counted(final)) == KILLED_TRIALS
    by_number = {t.number: t for t in final}
    assert {n: (by_number[n].state, by_number[n].value, by_number[n].user_attrs.get("config"))
            for n in finished} == finished, "trials told before the kill are intact"
    for n in running:
        assert by_number[n].state == TrialState.FAIL
        assert by_number[n].user_attrs["failure"]["kind"] == "interrupted"
    # What the killed run was evaluating is queued again and evaluated, not left to the sampler.
    assert f"{len(running)} config(s) an interrupted run left unfinished queued again" in rerun.stderr
    evaluated = {Space.config_from_params(t.params).key for t in counted(final)}
    for n in running:
        assert Space.config_from_params(by_number[n].params).key in evaluated, f"trial {n}'s config was dropped"
    results = json.loads((studies / "results" / "killed.json").read_text())
    assert results["source"] == "recorded" and results["study"] == "killed"


# --- tune(): the results file -------------------------------------------------------------------

def test_tune_with_the_model_writes_the_results_json_as_predictions(private_dirs):
    studies = private_dirs[0]
    result = tuner.tune(Layer(m=64, n=64, k=64), trials=5, evaluator="model", study="planned",
                        command="cutsearch search --m 64 --n 64 --k 64 --evaluator model --trials 5")
    data = json.loads((studies / "results" / "planned.json").read_text())
    assert data["layer"] == {"M": 64, "N": 64, "K": 64, "dtype": "f16", "bias": False, "activation": "none"}
    for key in ("gpu", "best_us", "cublas_us", "speedup", "trials", "wall_s", "command"):
        assert key in data, key
    assert data["gpu"] is None
    assert data["best_us"] == result.best.median_us > 0
    assert data["cublas_us"] is None and data["speedup"] is None  # a model predicts no cuBLAS time
    assert data["trials"] == result.trials == 5
    assert data["wall_s"] >= 0
    assert data["command"] == "cutsearch search --m 64 --n 64 --k 64 --evaluator model --trials 5"
    assert data["source"] == "predicted"
    assert "predictions" in data["note"]
    assert not (studies / "planned" / "best").exists(), "a prediction has no kernel to keep"


EXHAUSTIVE = ROOT / "studies" / "recorded" / "h200x2-2026-11-30-exhaustive"


def test_tpe_refuses_the_models_hopeless_tail_before_building_it(tmp_path):
    """On a recording of a whole space: pruned proposals cost no build and no budget."""
    path = EXHAUSTIVE / "exhaustive-mlp_down-f16.json"
    layer = Layer.from_dict(json.loads(path.read_text())["layer"])
    hopeless = model.hopeless(layer, list(Space(layer)))
    evaluator = replay(path, layer)
    result, trials = run(tmp_path, layer, evaluator, Space(layer), trials=64, batch=32, sampler="tpe")
    assert result.trials == len(counted(trials)) == 64
    assert not set(evaluator.asked) & hopeless
    pruned = [t for t in trials if (t.user_attrs.get("failure") or {}).get("message", "").startswith("pruned")]
    assert pruned and all(t.state == TrialState.PRUNED and t.user_attrs["config"] in hopeless for t in pruned)


def test_without_pruning_tpe_may_build_the_hopeless_tail(tmp_path):
    path = EXHAUSTIVE / "exhaustive-mlp_down-f16.json"
    layer = Layer.from_dict(json.loads(path.read_text())["layer"])
    evaluator = replay(path, layer)
    run(tmp_path, layer, evaluator, Space(layer), trials=64, batch=32, sampler="tpe", prune=False)
    assert set(evaluator.asked) & model.hopeless(layer, list(Space(layer)))


SPLIT_RECORDING = ROOT / "studies" / "recorded" / "h200-2026-11-30-split-k" / "model-top24-decode-f16.json"


def test_a_split_k_search_replays_its_recorded_h200_study(tmp_path, monkeypatch):
    """The decode study run with split-K in the space (recorded on an H200): every config it
    measured, asked again through the search, comes back with its recorded time and knobs."""
    layer = Layer(m=16, n=4096, k=4096, bias=True)
    recorded = recording(SPLIT_RECORDING)
    # The space as it was recorded: split-K with its reduction kernel, before the fixup epilogue
    # and the ws schedule. The model has changed since, so the recorded configs lead its ranking.
    space = Space(layer, split_k=(False, True),
                  schedules=tuple(s for s in SCHEDULES if "/fixup/" not in s and not s.startswith("ws/")))
    ranked = model.rank

    def recorded_first(layer, configs, coeff=model.DEFAULT):
        return sorted(ranked(layer, configs, coeff), key=lambda tc: tc[1].key not in recorded)

    monkeypatch.setattr(model, "rank", recorded_first)
    assert all(invalid_reason(layer, Config.from_dict(e["config"])) is None for e in recorded.values())
    result, trials = run(tmp_path, layer, replay(SPLIT_RECORDING, layer), space, trials=len(recorded),
                         sampler="model", batch=len(recorded))
    told = {t.user_attrs["config"]: t for t in counted(trials)}
    assert set(told) == set(recorded) and sum(k.endswith("_splitk") for k in told) == 22
    for key, trial in told.items():
        assert trial.value == recorded[key]["measurement"]["timing"]["median_us"]
    best = min(recorded.values(), key=lambda e: e["measurement"]["timing"]["median_us"])
    assert result.best.config == Config.from_dict(best["config"]) and result.best.config.split_k
    assert result.best.evaluation["measurement"]["knobs"]["splits"] == 2


def test_a_new_study_starts_from_priors_only_where_they_are_choices_of_its_space():
    """A winner from a wider space (a cluster of four, a 256-deep k-tile) cannot be enqueued
    into the default space: Optuna would not know its value. Such a prior is skipped."""
    from cutsearch.search import first_configs

    layer = Layer(m=256, n=1024, k=1024, bias=True)
    plain = Config(tile_m=64, tile_n=32, tile_k=128, kernel_schedule="pingpong", epilogue_schedule="tma",
                   swap_ab=True)
    wide = [Config(tile_m=64, tile_n=32, tile_k=128, cluster_m=4, kernel_schedule="pingpong",
                   epilogue_schedule="tma", swap_ab=True),
            Config(tile_m=64, tile_n=32, tile_k=256, kernel_schedule="pingpong", epilogue_schedule="tma")]
    assert all(invalid_reason(layer, c) is None for c in wide)
    top = first_configs(layer, Space(layer), 8, priors=(*wide, plain))
    assert top[0] == plain and not set(wide) & set(top)
    dims = Space(layer).dimensions()
    assert all(Space.params_from_config(c)[d] in dims[d] for c in top for d in dims)


def test_a_nosmem_prior_is_followed_by_its_direct_twin():
    """A winner found before the direct epilogue stores y's unaligned rows with nosmem; its twin
    with the direct epilogue is measured with it. Other priors get none."""
    from cutsearch.search import first_configs

    layer = Layer(m=3000, n=1001, k=999, bias=True)
    prior = Config(tile_m=128, tile_n=192, tile_k=64, cluster_n=2, kernel_schedule="cooperative",
                   epilogue_schedule="nosmem", swap_ab=True, pad=True)
    padded = dataclasses.replace(prior, epilogue_schedule="tma")
    assert invalid_reason(layer, prior) is None and invalid_reason(layer, padded) is None
    top = first_configs(layer, Space(layer), 8, priors=(prior, padded))
    assert top[:3] == [prior, dataclasses.replace(prior, epilogue_schedule="direct"), padded]
    # A space without the direct epilogue gets no twin.
    plain = Space(layer, schedules=tuple(s for s in SCHEDULES if "/direct/" not in s))
    assert first_configs(layer, plain, 8, priors=(prior, padded))[:2] == [prior, padded]


def test_each_prior_is_followed_by_its_grid_twin_where_one_wave_covers_the_output():
    """A winner found before the ws schedule is a persistent kernel; its twin on one wave of
    tiles is measured with it. Where the tiles need more than one wave there is no twin."""
    from cutsearch.search import first_configs

    prior = Config(tile_m=64, tile_n=32, tile_k=128, cluster_n=2, kernel_schedule="pingpong", epilogue_schedule="tma",
                   swap_ab=True)
    twin = dataclasses.replace(prior, kernel_schedule="ws", tile_scheduler="grid")
    small = Layer(m=256, n=1024, k=1024, bias=True)  # 64 tiles
    assert first_configs(small, Space(small), 8, priors=(prior,))[:2] == [prior, twin]
    big = Layer(m=4096, n=1024, k=1024, bias=True)  # 2048 tiles
    top = first_configs(big, Space(big), 8, priors=(prior,))
    assert top[0] == prior and all(c.kernel_schedule != "ws" for c in top)
    # A space without the ws schedule gets no twin either.
    plain = Space(small, schedules=tuple(s for s in SCHEDULES if not s.startswith("ws/")))
    assert all(c.kernel_schedule != "ws" for c in first_configs(small, plain, 8, priors=(prior,)))


def test_a_search_stopped_by_an_exception_leaves_no_trial_running_in_a_process_that_lives_on(tmp_path):
    """Ctrl-C in a notebook: the same process searches again and still reaches its budget."""
    inner = ReplayEvaluator.load(ASR_RECORDING, ASR)

    class Interrupted:
        source = "recorded"

        def evaluate(self, layer, configs, events=None):
            raise KeyboardInterrupt
            yield  # a generator, as every evaluator is

        def close(self) -> None:
            pass

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, ASR, Interrupted(), ASR_SPACE, trials=2)
    _, trials = run(tmp_path, ASR, inner, ASR_SPACE, trials=2)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert len(counted(trials)) == 2


def test_a_config_asked_twice_in_one_batch_is_measured_once_and_counted_once(tmp_path):
    """Its second trial repeats the first's evaluation: one cuBLAS timing in the verdict's median."""
    result, trials = run(tmp_path, ASR, replay(ASR_RECORDING, ASR), ASR_SPACE, trials=8, batch=8)
    told = counted(trials)
    keys = [t.user_attrs["config"] for t in told]
    assert len(told) == 8 and len(set(keys)) < len(keys), "the tiny space makes the batch repeat configs"
    measured_once = collections.Counter(k for k, t in zip(keys, told)
                                        if not t.user_attrs["evaluation"].get("replayed_from_study"))
    assert set(measured_once.values()) == {1} and set(measured_once) == set(keys)
    assert result.new_trials == len(set(keys))


def _record_runs(journal: str, count: int, go) -> None:
    store = journal_storage(journal)
    result = SearchResult(study_name=STUDY, layer=ASR, verdict=Verdict(best=None, cublas_us=None, basis="none"),
                          trials=0, new_trials=0, new_compiles=0, failures={}, wall_s=1.0, source="recorded")
    go.wait()
    for i in range(count):
        tuner._record_run(store, STUDY, result, f"run {os.getpid()} {i}")


def journal_storage(path: str) -> JournalStorage:
    return JournalStorage(JournalFileBackend(path))


def test_workers_that_finish_together_keep_each_others_runs_in_the_history(tmp_path):
    journal = str(tmp_path / "journal.log")
    optuna.create_study(study_name=STUDY, storage=journal_storage(journal))
    assert run_together(_record_runs, [(journal, 25), (journal, 25)]) == [0, 0]
    runs = optuna.load_study(study_name=STUDY, storage=journal_storage(journal)).user_attrs["runs"]
    assert len(runs) == 50


def test_a_resumed_search_or_a_joining_worker_shows_the_studys_best_from_the_start(tmp_path):
    first, _ = run(tmp_path, ASR, replay(ASR_RECORDING, ASR), ASR_SPACE, trials=2)
    heard = []
    run(tmp_path, ASR, replay(ASR_RECORDING, ASR), ASR_SPACE, trials=3,
        events=lambda name, data: heard.append((name, data)))
    bests = [data for name, data in heard if name == "best"]
    assert bests and bests[0]["median_us"] == first.best.median_us
    assert bests[0]["cublas_us"] == first.cublas_us


def test_a_time_limit_stops_new_batches_and_finishes_the_one_in_flight(tmp_path):
    """The limit is checked between batches: the batch it passes in is told whole, and no other starts."""
    slow = Counting(ReplayEvaluator(ReplayEvaluator.load(ASR_RECORDING, ASR).recording, delay_s=0.3))
    heard = []
    _, trials = run(tmp_path, ASR, slow, ASR_SPACE, trials=4, timeout_s=0.1,
                    events=lambda name, data: heard.append((name, data)))
    assert len(slow.asked) == 2 and len(counted(trials)) == 2
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    (stop,) = [data for name, data in heard if name == "timeout"]
    assert stop["limit_s"] == 0.1 and stop["elapsed_s"] >= 0.6


def test_an_interrupted_config_is_queued_again_until_its_retries_run_out(tmp_path):
    from cutsearch import search as search_mod, storage as storage_mod

    study = optuna.create_study(study_name="retry", storage=storage_mod.open_storage(tmp_path / "journal.log"))
    dists = search_mod.distributions(ASR_SPACE)
    lost, measured = list(ASR_SPACE)[:2]
    for config in (lost, measured, measured):
        study.enqueue_trial(Space.params_from_config(config))
    for _ in range(2):
        study.ask(dists)  # asked, never claimed: the asking process died
    done = study.ask(dists)  # `measured` again, evaluated by a later run before the reaping
    assert Space.config_from_params(done.params).key == measured.key
    study.tell(done, 1.0)
    requeued = []
    for _ in range(search_mod.RETRIES + 2):
        storage_mod.reap_stale(study)
        requeued.append(search_mod._requeue(study))
        waiting = [t for t in study.get_trials() if t.state == TrialState.WAITING]
        if waiting:
            assert [Space.config_from_params(t.system_attrs["fixed_params"]).key for t in waiting] == [lost.key]
            study.ask(dists)  # the retry is asked, and its run is killed too
    assert requeued == [[lost.key]] * search_mod.RETRIES + [[], []]


def test_a_stopped_runs_configs_are_queued_again_unless_refused_or_in_flight(tmp_path):
    """A run stopped by Ctrl-C or SIGTERM fails its own trials as interrupted: nothing is reaped,
    and still their configs are queued again, but not one the space refused since, nor one that
    a live run is evaluating."""
    from cutsearch import search as search_mod, storage as storage_mod

    study = optuna.create_study(study_name="stopped", storage=storage_mod.open_storage(tmp_path / "journal.log"))
    space = Space(ASR)
    dists = search_mod.distributions(space)
    lost, refused, running = itertools.islice(space, 3)
    for config in (lost, refused, running):
        study.enqueue_trial(Space.params_from_config(config))
        trial = study.ask(dists)
        study._storage.set_trial_user_attr(trial._trial_id, "failure", {"kind": "interrupted", "message": "", "log": ""})
        study.tell(trial, state=TrialState.FAIL)
    study.enqueue_trial(Space.params_from_config(refused))
    again = study.ask(dists)
    study._storage.set_trial_user_attr(again._trial_id, "rule_invalid", True)  # a later run's space refused it
    study.tell(again, state=TrialState.PRUNED)
    study.enqueue_trial(Space.params_from_config(running))
    live = study.ask(dists)
    storage_mod.Heartbeat(study).claim(live)  # claimed by this live process: never reaped
    assert storage_mod.reap_stale(study) == []
    assert search_mod._requeue(study) == [lost.key]
    assert search_mod._requeue(study) == [], "a config already waiting is not queued twice"
