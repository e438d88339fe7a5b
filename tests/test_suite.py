"""`cutsearch suite`: one record per layer and dtype, with the keys the benchmark file promises."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from cutsearch.errors import UserError
from cutsearch.suite import geomean, record
from cutsearch.search import SearchResult
from cutsearch.storage import open_storage
from cutsearch.verdict import TrialRecord, Verdict, judge, records
from cutsearch.problem import Layer, select_layers
from cutsearch.space import Config

KEYS = {"name", "M", "N", "K", "dtype", "bias", "cublas_us", "cutsearch_us", "speedup", "floor_us", "config",
        "transforms"}


def _result(speedup: float | None) -> SearchResult:
    layer = Layer(m=16, n=4096, k=4096, bias=True)
    config = Config(tile_m=64, tile_n=16, tile_k=128, kernel_schedule="pingpong", epilogue_schedule="tma", swap_ab=True)
    best = None
    if speedup is not None:
        meas = {"timing": {"median_us": 20.0 / speedup}, "knobs": {"raster": 1}, "baseline": {"median_us": 20.0}}
        best = TrialRecord(number=3, config=config, median_us=20.0 / speedup, cublas_us=20.0, failure_kind=None,
                           evaluation={"measurement": meas})
    verdict = Verdict(best=best, cublas_us=20.0 if best else None, basis="the trials")
    return SearchResult(study_name="s", layer=layer, verdict=verdict, trials=8,
                        new_trials=8, new_compiles=8, failures={}, wall_s=1.0, source="measured")


def test_a_winning_layer_records_its_kernel_and_transforms():
    r = record("decode-f16", _result(1.25))
    assert KEYS <= r.keys()
    assert r["speedup"] == 1.25 and r["cutsearch_us"] == 16.0 and not r["fallback"]
    assert r["transforms"]["swap_ab"] is True and r["config"]["tile_n"] == 16


def test_a_layer_cublas_wins_counts_as_one_with_the_kernel_time_kept():
    r = record("decode-f16", _result(0.8))
    assert r["speedup"] == 1.0 and r["fallback"] and r["cutsearch_us"] == r["cublas_us"] == 20.0
    assert r["kernel_us"] == 25.0 and "cuBLAS" in r["note"]


def test_the_floor_with_an_empty_kernel_bounds_the_speedup_any_kernel_could_reach():
    result = _result(1.25)
    result.best.evaluation["measurement"]["floors"] = {"empty kernel": {"median_us": 4.0}}
    r = record("decode-f16", result)
    assert r["empty_kernel_us"] == 4.0
    assert r["floor_with_launch_us"] == r["floor_us"] + 4.0
    assert r["speedup_bound"] == 20.0 / (r["floor_us"] + 4.0)


def test_a_record_without_floors_claims_no_bound():
    assert "speedup_bound" not in record("decode-f16", _result(1.25))


def test_geomean_of_speedups():
    assert abs(geomean([1.0, 4.0]) - 2.0) < 1e-12
    assert geomean([]) is None


def test_suite_command_with_the_model_evaluator_writes_one_record_per_layer_and_dtype(tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text('[tiny]\nM = 64\nN = 64\nK = 64\ndtypes = ["f16", "bf16"]\nbias = true\n'
                     '[odd]\nM = 30\nN = 17\nK = 9\n')
    proc = subprocess.run([sys.executable, "-m", "cutsearch", "suite", str(suite), "--trials", "3", "--evaluator",
                           "model", "--studies-dir", str(tmp_path / "studies")], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    (path,) = (tmp_path / "studies" / "results").glob("suite-model-evaluator-*.json")
    body = json.loads(path.read_text())
    assert [r["name"] for r in body["records"]] == ["tiny-f16", "tiny-bf16", "odd"]
    for r in body["records"]:
        assert KEYS <= r.keys()
        assert r["source"] == "predicted"
        # The model's pick is kept for planning, and nothing claims a speedup it cannot know.
        assert r["kernel_us"] > 0 and r["config"] and r["transforms"]["knobs"] is not None
        assert r["speedup"] is None and r["cublas_us"] is None and r["fallback"]
        assert f"the cost model's pick ({r['kernel_us']:.1f} µs predicted)" in r["note"]
    assert body["geomean_speedup"] is None
    assert "no speedup: the model predicts kernels, not cuBLAS" in proc.stdout.replace("\n", " ")
    assert "suite on model-evaluator" in proc.stdout and f"wrote {path}" in proc.stdout.replace("\n", "")


def test_a_killed_suite_loses_no_finished_layer_and_the_same_command_completes_it(tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text("[a]\nM = 64\nN = 64\nK = 64\n[b]\nM = 128\nN = 256\nK = 512\n"
                     "[c]\nM = 300\nN = 1001\nK = 999\n")
    results = tmp_path / "studies" / "results"
    command = [sys.executable, "-m", "cutsearch", "suite", str(suite), "--trials", "40", "--evaluator", "model",
               "--studies-dir", str(tmp_path / "studies")]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (results / "suite-a.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # in layer b: a dies with its study finished, b mid-search
    proc.wait()
    assert (results / "suite-a.json").exists() and not list(results.glob("suite-model-evaluator-*.json"))
    first = json.loads((results / "suite-a.json").read_text())
    assert first["trials"] == 40 and first["new_trials"] > 0

    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    (path,) = results.glob("suite-model-evaluator-*.json")
    assert [r["name"] for r in json.loads(path.read_text())["records"]] == ["a", "b", "c"]
    resumed = json.loads((results / "suite-a.json").read_text())
    assert resumed["trials"] == 40 and resumed["new_trials"] == 0  # nothing of a measured twice
    assert json.loads((results / "suite-c.json").read_text())["trials"] == 40


def test_only_selects_layers_in_its_order_and_a_table_name_all_its_dtypes(tmp_path):
    layers = {"tiny-f16": 1, "tiny-bf16": 2, "odd": 3, "tiny-x": 4}
    assert list(select_layers(layers, None, tmp_path)) == list(layers)
    assert list(select_layers(layers, "odd, tiny", tmp_path)) == ["odd", "tiny-f16", "tiny-bf16"]
    assert list(select_layers(layers, "tiny-bf16,odd", tmp_path)) == ["tiny-bf16", "odd"]
    with pytest.raises(UserError, match=r"no layer named tin, x in .* \(it has tiny, odd, tiny-x; one dtype as tiny-f16\)"):
        select_layers(layers, "tin,odd,x", tmp_path)


def test_suite_names_a_missing_layer_in_one_line(tmp_path):
    suite = Path(tmp_path / "suite.toml")
    suite.write_text("[tiny]\nM = 64\nN = 64\nK = 64\n")
    proc = subprocess.run([sys.executable, "-m", "cutsearch", "suite", str(suite), "--only", "nope", "--evaluator",
                           "model"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no layer named nope" in proc.stderr


def _judged_again(committed: dict, journals: Path, tmp_path: Path) -> tuple[dict, Verdict]:
    """A committed suite record rebuilt from its study's recorded journal, with nothing measured."""
    journal = tmp_path / f"{committed['study']}.journal.log"
    journal.write_bytes(gzip.decompress((journals / f"{journal.name}.gz").read_bytes()))
    study = optuna.load_study(study_name=committed["study"], storage=open_storage(str(journal)))
    assert study.user_attrs.get("race"), committed["name"]  # every search of these runs ended in a race
    verdict = judge(records(study), study.user_attrs["race"])
    layer = Layer.from_dict(study.user_attrs["layer"], name=committed["name"])
    again = record(committed["name"], SearchResult(
        study_name=committed["study"], layer=layer, verdict=verdict, trials=committed["trials"], new_trials=0,
        new_compiles=0, failures={}, wall_s=committed["wall_s"], source="measured"))
    return again, verdict


_JUDGED_KEYS = ("cutsearch_us", "cublas_us", "speedup", "kernel_us", "fallback", "config", "verdict")


def test_the_committed_h200_suite_file_is_what_its_recorded_journals_judge(tmp_path):
    """Recorded H200 data: every record of the 2026-12-02 suite file follows from the study
    journals of that run, judged again here (race included) with nothing measured. The file
    predates the rule that a kernel must beat cuBLAS in every round of the race: judged by it,
    square_8k's two kernels, faster by the race's median in 4 and 3 of 5 rounds, are ties."""
    root = Path(__file__).resolve().parent.parent
    suite = json.loads((root / "studies" / "results" / "suite-nvidia-h200-2026-12-02.json").read_text())
    journals = root / "studies" / "recorded" / "h200-2026-12-02-suite-v12" / "journals"
    assert len(suite["records"]) == 18
    ties = set()
    for committed in suite["records"]:
        again, verdict = _judged_again(committed, journals, tmp_path)
        if verdict.tie:
            ties.add(committed["name"])
            assert not committed["fallback"] and committed["speedup"] > 1.0
            assert again["fallback"] and again["speedup"] == 1.0 and again["cutsearch_us"] == again["cublas_us"]
            assert "a tie" in again["note"]
            assert (again["kernel_us"], again["config"]) == (committed["kernel_us"], committed["config"])
            continue
        for key in _JUDGED_KEYS:
            assert again[key] == committed[key], (committed["name"], key, again[key], committed[key])
    assert ties == {"square_8k-f16", "square_8k-bf16"}
    assert suite["geomean_speedup"] == geomean([r["speedup"] for r in suite["records"]])


def test_the_2026_12_03_suite_file_is_what_its_recorded_journals_judge(tmp_path):
    """Recorded H200 data: the suite file the README's table is built from, one run of all 18 pairs
    on the code that judges it here. Every record follows from its study's journal, with no tie to
    reinterpret, and so do the geometric means the README reports."""
    root = Path(__file__).resolve().parent.parent
    suite = json.loads((root / "studies" / "results" / "suite-nvidia-h200-2026-12-03.json").read_text())
    recording = root / "studies" / "recorded" / "h200-2026-12-03-suite-v14"
    assert json.loads((recording / "suite-nvidia-h200-2026-12-03.json").read_text()) == suite
    assert len(suite["records"]) == 18
    for committed in suite["records"]:
        again, _ = _judged_again(committed, recording / "journals", tmp_path)
        for key in _JUDGED_KEYS:
            assert again[key] == committed[key], (committed["name"], key, again[key], committed[key])
    speedups = {r["name"]: r["speedup"] for r in suite["records"]}
    public = [s for name, s in speedups.items() if not name.startswith(("m1-", "gelu_mlp-"))]
    assert suite["geomean_speedup"] == geomean(list(speedups.values()))
    assert (round(geomean(public), 3), round(suite["geomean_speedup"], 3)) == (1.256, 1.231)
    assert min(speedups.values()) == 1.0


def test_the_2026_12_03_summaries_are_what_their_recorded_journals_judge(tmp_path):
    """Recorded H200 data: the public 14 pairs searched again on 2026-12-03, in two commands (the
    first cut by its limits, so no one suite file). Each layer's summary follows from its study's
    journal, judged again here, and so does the geometric mean its README reports."""
    recording = Path(__file__).resolve().parent.parent / "studies" / "recorded" / "h200-2026-12-03-suite-v13"
    counted = []
    for summary_path in sorted(recording.glob("suite-*-*16.json")):
        summary = json.loads(summary_path.read_text())
        journal = tmp_path / f"{summary['study']}.journal.log"
        journal.write_bytes(gzip.decompress((recording / "journals" / f"{journal.name}.gz").read_bytes()))
        study = optuna.load_study(study_name=summary["study"], storage=open_storage(str(journal)))
        verdict = judge(records(study), study.user_attrs["race"])
        assert verdict.best.median_us == summary["best_us"] and verdict.cublas_us == summary["cublas_us"]
        assert verdict.best.config.to_dict() == summary["best"]["config"]
        assert verdict.kernel_ships == (summary["ships"] == "the best kernel"), summary["study"]
        counted.append(verdict.speedup if verdict.kernel_ships else 1.0)
    assert len(counted) == 14
    assert round(geomean(counted), 3) == 1.254


def test_the_suite_history_script_reads_every_recorded_run():
    """Recorded H200 data: the README's run-to-run ranges come from this script's output."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "studies" / "scripts" / "suite_history.py"), "small_batch-f16",
                          "asr_out-bf16"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "ratio 1.057-1.184x over 6 runs" in out and "ratio 1.085-1.128x over 6 runs" in out
    latest = {r["name"]: r for r in json.loads(
        (root / "studies" / "results" / "suite-nvidia-h200-2026-12-03.json").read_text())["records"]}["small_batch-f16"]
    assert f"{'fourteenth':<11} {latest['cublas_us']:8.2f} {latest['kernel_us']:8.2f}" in out


def test_the_round_order_script_reproduces_its_result_and_use_export_balances_the_order():
    """Recorded H200 data: FINDINGS' figures on the order of use_export.py's rounds come from this
    script; use_export.py now times a number of rounds in which each call goes first equally often."""
    import ast

    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "studies" / "scripts" / "round_order.py")],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    summary = json.loads(out)
    recorded = json.loads((root / "studies" / "results" / "round-order-recorded.json").read_text())["summary"]
    assert summary == recorded
    assert summary["faster_when_first"] == 38 and round(summary["reported_over_balanced_median"], 3) == 1.005
    tree = ast.parse((root / "studies" / "scripts" / "use_export.py").read_text())
    rounds = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                  and [t.id for t in node.targets] == ["ROUNDS"])
    assert rounds % 2 == 0 and rounds % 3 == 0  # the export and F.linear, and torch.mm where timed
