"""`cutsearch search` from the shell: the happy path on the cost model, then a resume."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "cutsearch", "search", "--m", "64", "--n", "64", "--k", "64",
           "--evaluator", "model", "--trials", "5"]


def cutsearch_search(cwd: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "120"}  # one table layout wherever it runs
    return subprocess.run(COMMAND, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_search_on_the_model_prints_the_summary_as_predictions_and_writes_results(tmp_path, private_dirs):
    studies, cwd = private_dirs[0], tmp_path / "elsewhere"
    cwd.mkdir()
    run = cutsearch_search(cwd)
    assert run.returncode == 0, run.stderr
    results = json.loads((studies / "results" / "fc-64x64x64-f16.json").read_text())
    # A config the sampler proposes again is told its earlier result: a trial, but not a new one.
    assert results["trials"] == 5 and 1 <= results["new_trials"] <= 5
    assert results["source"] == "predicted"
    assert results["command"] == "cutsearch search --m 64 --n 64 --k 64 --evaluator model --trials 5"
    assert "fc-64x64x64-f16: 64x64x64 f16" in run.stdout
    assert f"best kernel       │ {results['best_us']:.1f} µs" in run.stdout
    assert f"5 ({results['new_trials']} new, 0 compiled in this run)" in run.stdout
    assert "model predictions, not measurements" in run.stdout
    assert "every time below is a model prediction, not a measurement" in run.stderr
    # Into a pipe, as into a log file, a line per batch and per trial says how far the search got.
    trials = [line for line in run.stderr.splitlines() if re.match(r"trial \d+ \d+x\d+x\d+_c\dx\d_\w+: ", line)]
    assert len(trials) == results["trials"] and re.search(r"^batch of \d+: 0 of 5 trials done$", run.stderr, re.M)
    assert f"best {results['best_us']:.1f} µs" in trials[-1]
    assert (studies / "fc-64x64x64-f16" / "journal.log").is_file()
    assert list(cwd.iterdir()) == [], "the studies live where $CUTSEARCH_STUDIES says, not in the working directory"


def test_search_run_again_resumes_with_nothing_new(tmp_path, private_dirs):
    studies = private_dirs[0]
    first = cutsearch_search(tmp_path)
    assert first.returncode == 0, first.stderr
    before = json.loads((studies / "results" / "fc-64x64x64-f16.json").read_text())
    again = cutsearch_search(tmp_path)
    assert again.returncode == 0, again.stderr
    after = json.loads((studies / "results" / "fc-64x64x64-f16.json").read_text())
    assert "5 (0 new, 0 compiled in this run)" in again.stdout
    assert (after["trials"], after["new_trials"]) == (5, 0)
    assert after["best_us"] == before["best_us"] and after["best"]["trial"] == before["best"]["trial"]


def test_the_default_space_leaves_stages_to_the_builder_and_all_stages_searches_them(private_dirs):
    """Each study's trials record the stage and split-K choices they were sampled from."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from cutsearch.space import STAGES

    studies = private_dirs[0]
    for flags, study in (([], "builder"), (["--all-stages"], "explicit"), (["--split-k"], "split")):
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        run = subprocess.run(COMMAND + ["--study", study, *flags], env={**os.environ, "PYTHONPATH": path},
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
    choices = {}
    for study in ("builder", "explicit", "split"):
        storage = JournalStorage(JournalFileBackend(str(studies / study / "journal.log")))
        trials = optuna.load_study(study_name=study, storage=storage).get_trials()
        choices[study] = {(tuple(t.distributions["stages"].choices), tuple(t.distributions["split_k"].choices))
                          for t in trials if "stages" in t.distributions}
    assert choices == {"builder": {((0,), (False,))}, "explicit": {(STAGES, (False,))},
                       "split": {((0,), (False, True))}}


def test_split_k_on_a_layer_it_cannot_help_says_so(tmp_path, private_dirs):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "cutsearch", "search", "--m", "4096", "--n", "4096", "--k", "4096",
               "--evaluator", "model", "--trials", "2", "--study", "big", "--split-k"]
    run = subprocess.run(command, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "--split-k: not searched for this layer" in run.stderr


def test_a_time_limit_is_told_and_starts_no_batch_after_it_passes(private_dirs):
    """Passed before the first batch or during it (its timing is the machine's): no second batch."""
    studies = private_dirs[0]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    run = subprocess.run([*COMMAND[:-1], "50", "--batch", "2", "--timeout", "0.001s"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": path, "COLUMNS": "120"}, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "time limit of 0.001 s passed" in run.stdout + run.stderr
    assert json.loads((studies / "results" / "fc-64x64x64-f16.json").read_text())["trials"] in (0, 2)


def test_the_progress_written_to_a_file_is_a_line_per_step():
    """Into a file, rich draws its bar once, at the end: a log of a killed run would say nothing."""
    import io

    from rich.console import Console

    from cutsearch.console import ProgressView

    log = io.StringIO()
    with ProgressView(Console(file=log, width=60), trials=4) as view:
        view.event("batch", {"size": 2, "done": 0, "total": 4})
        view.event("compiling", {"count": 2})
        view.event("compiled", {"ok": True, "cached": False})
        view.event("measured", {"ok": True})
        view.event("best", {"median_us": 12.5, "cublas_us": 25.0})
        view.event("trial", {"number": 0, "config": "64x16x128_c1x1_ws_tma_s0_grid_swap", "median_us": 12.5,
                             "failure": None})
        view.event("trial", {"number": 3, "config": "128x16x64_c2x1_ws_tma_s0_grid", "median_us": None,
                             "failure": "compile_error"})
        view.event("reaped", {"trials": [], "requeued": ["a", "b"]})
        log_so_far = log.getvalue()
    assert log_so_far.splitlines() == [
        "batch of 2: 0 of 4 trials done",
        "2 kernel(s) to build or take from the cache",
        "trial 0 64x16x128_c1x1_ws_tma_s0_grid_swap: 12.50 µs; compiled 1 (+0 cached) · measured 1 · failed 0 · "
        "best 12.5 µs (cuBLAS 25.0 µs, 2.00x)",
        "trial 3 128x16x64_c2x1_ws_tma_s0_grid: failed (compile_error); compiled 1 (+0 cached) · measured 1 · "
        "failed 1 · best 12.5 µs (cuBLAS 25.0 µs, 2.00x)",
        "2 config(s) an interrupted run left unfinished queued again",
    ], "one unwrapped line each, before the run ends"
    log = io.StringIO()
    with ProgressView(Console(file=log, width=200), trials=4) as view:
        view.event("race disturbed", {"reason": "cuBLAS's rounds took 14.0-60.0 µs, 4.3x apart", "again": True})
        view.event("race disturbed", {"reason": "trial 5's rounds took 9.0-20.0 µs, 2.2x apart", "again": False})
        log_so_far = log.getvalue()
    assert log_so_far.splitlines() == [
        "the race was disturbed (cuBLAS's rounds took 14.0-60.0 µs, 4.3x apart): racing again",
        "the race was disturbed (trial 5's rounds took 9.0-20.0 µs, 2.2x apart): judging by the trials"]


def test_a_layer_no_kernel_of_the_space_can_compute_is_not_searched_and_every_view_says_why(tmp_path, private_dirs):
    """A space the caller restricted (the library's `tune(space=...)`): y's unaligned rows, no
    padding, and only the TMA epilogue and CUTLASS's nosmem one, which fuses no activation. The
    search asks for no trial, its progress, results, `show` and report say why, and the export
    calls cuBLAS."""
    from cutsearch import Layer, Space, tune
    from cutsearch.report import build_report
    from cutsearch.workspace import Workspace

    studies = private_dirs[0]
    layer = Layer(m=226, n=1001, k=1024, bias=True, activation="relu")
    space = Space(layer, pad=(False,), schedules=("pingpong/tma/persistent", "pingpong/nosmem/persistent"))
    events = []
    result = tune(layer, trials=8, study="restricted", evaluator="model", space=space,
                  events=lambda name, data: events.append((name, data)))
    why = "the fused activation (epilogue visitor tree) needs the TMA epilogue"
    assert why in result.unserved and [d["reason"] for n, d in events if n == "unserved"] == [result.unserved]
    assert not [n for n, _ in events if n == "trial"]
    results = json.loads((studies / "results" / "restricted.json").read_text())
    assert why in results["unserved"]
    assert (results["trials"], results["best"], results["ships"], results["verdict"]) == (0, None, "cuBLAS", None)
    said = "no kernel of the space searched can compute this layer"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    show = subprocess.run([sys.executable, "-m", "cutsearch", "show", "restricted"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path, "COLUMNS": "300"}, timeout=300)
    assert show.returncode == 0 and said in show.stdout and why in show.stdout, show.stdout + show.stderr
    storage = Workspace().storage_url("restricted", None)
    report = build_report("restricted", storage=storage, out=tmp_path / "report.html").read_text()
    assert said in report and "No kernel to ship in restricted" in report
    # The whole space of the same layer holds kernels (direct and staged store y's rows with the activation).
    assert Space(layer).unserved() is None


def test_a_space_for_another_layer_is_a_user_error(private_dirs):
    from cutsearch import Layer, Space, UserError, tune

    layer = Layer(m=226, n=1001, k=1024)
    with pytest.raises(UserError, match="another layer"):
        tune(layer, trials=1, evaluator="model", space=Space(Layer(m=226, n=1001, k=1000)))
    with pytest.raises(UserError, match="give a space its own stages"):
        tune(layer, trials=1, evaluator="model", space=Space(layer), all_stages=True)