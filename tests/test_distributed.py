"""Many workers, one study: `cutsearch worker` processes share a storage and stop exactly.

What "exact" means: each worker counts, under the study's budget lock (a PostgreSQL advisory
lock, or flock on a journal file), the trials told plus the trials in flight in every process
before each ask, so together they stop at the target however the batches interleave. Counted
trials are finished ones other than proposals refused by a space rule (or because another
worker was evaluating the same config) and trials reaped from killed runs.

What "no duplicates" means: a config is evaluated by one worker only. The sampler may propose a
config again; if its result is known, the trial replays it (marked `replayed_from_study` in its
evaluation) and nothing is measured again; if another worker is still evaluating it, the
proposal is refused and costs no budget.

The PostgreSQL case needs $CUTSEARCH_TEST_POSTGRES (an SQLAlchemy URL; .ci/run starts a server
on loopback); the journal-file case runs everywhere.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from cutsearch.storage import OWNER, open_storage

ROOT = Path(__file__).resolve().parent.parent
TARGET = 16
LAYER = ["--m", "512", "--n", "1024", "--k", "1024"]


def cutsearch(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cutsearch", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    return out


@pytest.fixture(params=["journal", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage(request, tmp_path):
    """(storage URL for the CLI or None for the default journal, URL to open it here)."""
    if request.param == "journal":
        yield None
        return
    url = os.environ.get("CUTSEARCH_TEST_POSTGRES")
    if not url:
        pytest.skip("set CUTSEARCH_TEST_POSTGRES to a PostgreSQL URL (.ci/run does)")
    yield url


def counts(trial: optuna.trial.FrozenTrial) -> bool:
    return (trial.state.is_finished() and not trial.user_attrs.get("rule_invalid")
            and (trial.user_attrs.get("failure") or {}).get("kind") != "interrupted")


# Recorded H200 measurements of every config of small_batch's default space (before the ws schedule).
RECORDED = ROOT / "studies" / "recorded" / "h200x2-2026-11-30-exhaustive" / "exhaustive-small_batch-f16.json"
RECORDED_LAYER = ["--m", "256", "--n", "1024", "--k", "1024", "--bias"]


def test_two_workers_reach_the_target_exactly_without_evaluating_a_config_twice(storage, tmp_path):
    study = f"dist-{uuid.uuid4().hex[:10]}"
    # Each replayed config takes 0.25 s, so one worker alone would need about 4 s: the other,
    # started with it, takes part however slowly the machine starts Python. With predictions,
    # which take no time, one worker could finish alone.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUTSEARCH_REPLAY_DELAY_S": "0.25"}
    where = ["--storage", storage] if storage else []
    replay = ["--evaluator", "replay", "--recording", str(RECORDED)]
    # The study, with its layer, from one search; the workers read the layer from it.
    finish(cutsearch("search", *RECORDED_LAYER, *replay, "--trials", "1", "--study", study, *where, env=env))
    workers = [cutsearch("worker", "--study", study, *where, *replay, "--trials", str(TARGET), "--batch", "2",
                         env=env) for _ in range(2)]
    for w in workers:
        finish(w)

    url = storage or str(Path(env["CUTSEARCH_STUDIES"]) / study / "journal.log")
    store = open_storage(url)
    try:
        trials = optuna.load_study(study_name=study, storage=store).get_trials(deepcopy=False)
        counted = [t for t in trials if counts(t)]

        assert len(counted) == TARGET
        assert not [t.number for t in trials if t.state == TrialState.RUNNING]
        # Both workers took part (each started well before the other could finish alone).
        by_pid = collections.Counter(t.system_attrs.get(OWNER, "").rpartition(":")[2] for t in counted)
        assert all(by_pid[str(w.pid)] > 0 for w in workers), by_pid
        # No result lost: every counted trial holds its evaluation, and a completed one its value.
        for t in counted:
            ev = t.user_attrs["evaluation"]
            if t.state == TrialState.COMPLETE:
                assert t.value == ev["measurement"]["timing"]["median_us"]
            else:
                assert t.state == TrialState.FAIL and ev.get("failure")
        # No config evaluated twice: repeats are replays, or one batch's copies of one proposal.
        evaluated_by = collections.defaultdict(set)
        for t in counted:
            if not t.user_attrs["evaluation"].get("replayed_from_study"):
                evaluated_by[t.user_attrs["config"]].add(t.system_attrs.get(OWNER))
        assert all(len(who) == 1 for who in evaluated_by.values()), evaluated_by

        # A worker that joins a finished study adds nothing.
        finish(cutsearch("worker", "--study", study, *where, *replay, "--trials", str(TARGET), env=env))
        again = optuna.load_study(study_name=study, storage=store).get_trials(deepcopy=False)
        assert sum(map(counts, again)) == TARGET
    finally:
        if storage:
            optuna.delete_study(study_name=study, storage=store)


def test_a_worker_started_before_the_search_waits_for_its_study(tmp_path):
    """Workers are often started together with the search that creates the study."""
    study = f"wait-{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = cutsearch("worker", "--study", study, "--evaluator", "model", "--trials", "8", "--batch", "2",
                       "--wait", "120s", env=env)
    time.sleep(3)  # the worker is polling for a study that does not exist yet
    assert worker.poll() is None, worker.communicate()
    finish(cutsearch("search", *LAYER, "--evaluator", "model", "--trials", "4", "--study", study, env=env))
    finish(worker)
    journal = Path(env["CUTSEARCH_STUDIES"]) / study / "journal.log"
    trials = optuna.load_study(study_name=study, storage=open_storage(str(journal))).get_trials(deepcopy=False)
    assert sum(map(counts, trials)) == 8


@pytest.mark.nvcc
def test_a_host_with_another_gpu_cannot_join_a_study(storage, monkeypatch):
    """Times of an H100 and an H200 must never be ranked together: the study's first GPU names
    it. The real tuner, GpuEvaluator and nvcc, with the fake worker claiming each GPU."""
    import cutsearch.codegen as codegen
    from cutsearch import tuner
    from cutsearch.errors import UserError
    from cutsearch.evaluator import GpuEvaluator
    from cutsearch.pool import WorkerProcess
    from cutsearch.problem import Layer
    from cutsearch.cache import default_cache_dir
    from cutsearch.console import print_study
    from rich.console import Console
    from tests import fakes

    monkeypatch.setattr(codegen, "render", lambda layer, config: fakes.fault_source("correct", tag=config.key))
    study = f"gpus-{uuid.uuid4().hex[:10]}"

    def tune_on(gpu_name: str, trials: int):
        monkeypatch.setenv(fakes.GPU_NAME_ENV, gpu_name)  # read by the spawned fake worker
        ev = GpuEvaluator(cache_dir=default_cache_dir(), jobs=2, worker=WorkerProcess(serve=fakes.serve))
        try:
            return tuner.tune(Layer(m=64, n=64, k=64), trials=trials, study=study, storage=storage,
                              evaluator=ev, batch=2, command="test")
        finally:
            ev.close()

    url = storage or str(Path(os.environ["CUTSEARCH_STUDIES"]) / study / "journal.log")
    try:
        assert tune_on("NVIDIA H200 (fake)", 2).trials == 2
        with pytest.raises(UserError, match=r"is measured on NVIDIA H200 \(fake\), and this GPU is "
                                            r"NVIDIA H100 80GB HBM3 \(fake\)"):
            tune_on("NVIDIA H100 80GB HBM3 (fake)", 4)
        held = optuna.load_study(study_name=study, storage=open_storage(url))
        assert sum(map(counts, held.get_trials(deepcopy=False))) == 2  # the H100 added nothing
        assert held.user_attrs["gpu"] == "NVIDIA H200 (fake)"
        again = tune_on("NVIDIA H200 (fake)", 4)
        assert again.trials == 4 and again.gpu == "NVIDIA H200 (fake)"  # the same GPU model resumes it
        assert tuner.summary(again)["gpu"] == "NVIDIA H200 (fake)"  # as the CLI prints it, with no toolchain
        console = Console(record=True, width=200)
        print_study(console, study, storage=url)
        lines = console.export_text().splitlines()
        assert any("measured on" in line and "NVIDIA H200 (fake)" in line for line in lines)
    finally:
        if storage:
            optuna.delete_study(study_name=study, storage=open_storage(url))
