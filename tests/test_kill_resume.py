"""kill -9 at any moment loses nothing: resume finishes the study and builds nothing twice.

The search runs in a child (`python -m tests.fakes drive`): the real tuner, GpuEvaluator,
Compiler (real nvcc through a wrapper that logs every build) and WorkerProcess, with the tiny
fault kernel in place of CUTLASS's and a fake worker in place of the GPU. The child and all
its processes (nvcc, the worker) are SIGKILLed while compiling, while measuring, inside the
best directory's replacement, and at random moments; then it is run to the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from cutsearch import persist
from cutsearch.cache import MANIFEST
from cutsearch.compiler import Toolchain
from cutsearch.verdict import contenders, judge, records
from tests.fakes import EPOCH_ENV, MARKERS_ENV, MEASURE_S_ENV, PERSIST_PAUSED

pytestmark = pytest.mark.nvcc

ROOT = Path(__file__).resolve().parent.parent
STUDY = "killed"
TRIALS = 8
WAIT_S = 120.0

NVCC_WRAPPER = """#!/bin/sh
# Logs the sha256 of each kernel it builds, then hands over to the real nvcc.
for arg in "$@"; do
  if [ "$arg" = kernel.cu ]; then sha256sum kernel.cu | cut -d' ' -f1 >> "{log}"; fi
done
exec "{nvcc}" "$@"
"""

LOCK = ".best.lock"  # persist.locked: outlives the directory it locks, by design


class Run:
    """The study's files, and a driver that can be started and killed."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.studies, self.cache, self.markers = tmp / "studies", tmp / "cache", tmp / "markers"
        self.markers.mkdir()
        self.nvcc_log = tmp / "nvcc.log"
        self.nvcc_log.touch()
        wrapper = tmp / "bin" / "nvcc"
        wrapper.parent.mkdir()
        wrapper.write_text(NVCC_WRAPPER.format(log=self.nvcc_log, nvcc=Toolchain.find("probe").nvcc))
        wrapper.chmod(0o755)
        self.env = {**os.environ, "CUTSEARCH_STUDIES": str(self.studies), "CUTSEARCH_CACHE": str(self.cache),
                    "CUTSEARCH_NVCC": str(wrapper), MARKERS_ENV: str(self.markers), MEASURE_S_ENV: "1.0",
                    EPOCH_ENV: str(time.time()), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.runs = 0
        self.proc: subprocess.Popen | None = None

    def start(self, *extra: str, trials: int = TRIALS) -> subprocess.Popen:
        self.runs += 1
        self.log = self.tmp / f"run{self.runs}.log"
        cmd = [sys.executable, "-m", "tests.fakes", "drive", "--study", STUDY, "--trials", str(trials),
               "--batch", "2", *extra]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self.proc

    def kill_when(self, ready, what: str) -> None:
        """SIGKILL the driver's whole process group once `ready()` holds."""
        deadline = time.monotonic() + WAIT_S
        while not ready():
            if self.proc.poll() is not None:
                pytest.fail(f"the run ended (exit {self.proc.returncode}) before {what}:\n{self.log.read_text()}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"no {what} within {WAIT_S:.0f} s:\n{self.log.read_text()}")
            time.sleep(0.02)
        self.kill()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it had already finished, with all its children
            pass
        self.proc.wait()

    def finish(self) -> None:
        try:
            assert self.proc.wait(timeout=300) == 0, self.log.read_text()
        finally:
            if self.proc.poll() is None:
                self.kill()

    # ---- what is on disk ----

    def study(self) -> optuna.Study:
        storage = JournalStorage(JournalFileBackend(str(self.studies / STUDY / "journal.log")))
        return optuna.load_study(study_name=STUDY, storage=storage)

    def trials(self) -> list[optuna.trial.FrozenTrial]:
        if not (self.studies / STUDY / "journal.log").exists():
            return []
        try:
            return self.study().get_trials(deepcopy=False)
        except KeyError:
            return []

    def staging(self) -> list[Path]:
        return list(self.cache.glob(".build-*")) if self.cache.is_dir() else []

    def entries(self) -> dict[str, dict]:
        """Committed cache entries: key -> manifest, with the sha256 of their source."""
        out = {}
        for manifest in self.cache.glob(f"*/*/{MANIFEST}"):
            data = json.loads(manifest.read_text())
            data["source_sha256"] = hashlib.sha256((manifest.parent / "kernel.cu").read_bytes()).hexdigest()
            out[manifest.parent.name] = data
        return out

    def builds(self) -> list[str]:
        return self.nvcc_log.read_text().split()

    def measurements(self) -> int:
        return len(list(self.markers.glob("measure-*")))

    @property
    def best_dir(self) -> Path:
        return self.studies / STUDY / "best"

    @property
    def results(self) -> Path:
        return self.studies / "results" / f"{STUDY}.json"


def settled(trials) -> dict[int, tuple]:
    return {t.number: (t.state, t.value, t.user_attrs.get("config"), (t.user_attrs.get("failure") or {}).get("kind"))
            for t in trials if t.state.is_finished()}


def counted(trials) -> int:
    """Trials that used the budget: finished, not refused by a space rule, not interrupted."""
    return sum(1 for t in trials if t.state.is_finished() and not t.user_attrs.get("rule_invalid")
               and (t.user_attrs.get("failure") or {}).get("kind") != "interrupted")


def check_outputs_whole(run: Run) -> None:
    """Whatever a kill left, the best directory and the results JSON are never half-written."""
    if run.best_dir.exists():
        persist.verify_dir(run.best_dir)
    if run.results.exists():
        json.loads(run.results.read_text())


def test_sigkill_while_compiling_measuring_and_persisting_loses_nothing(tmp_path):
    run = Run(tmp_path)
    snapshots = []  # (what, settled trials, committed entries, builds logged so far)

    def snapshot(what: str) -> None:
        check_outputs_whole(run)
        snapshots.append((what, settled(run.trials()), run.entries(), len(run.builds())))

    # 1. While nvcc builds the first batch.
    run.start()
    builds = len(run.builds())
    run.kill_when(lambda: run.staging() and len(run.builds()) > builds, "a build in progress")
    snapshot("compiling")

    # 2. While the worker measures the second kernel of this run (the first one is told).
    run.start()
    measured = run.measurements()
    run.kill_when(lambda: run.measurements() >= measured + 2, "a second measurement")
    snapshot("measuring")
    assert snapshots[-1][1], "the run killed while measuring had told no trial"

    # 3. Between write_dir's renames: the old best moved aside, the new best not yet in place.
    #    (Replacement 1 is the resumed study's best; replacement 2 is this run's first new best.)
    run.start("--pause-in-persist", "2")
    run.kill_when(lambda: (run.markers / PERSIST_PAUSED).exists(), "the best directory's replacement")
    (run.markers / PERSIST_PAUSED).unlink()
    assert not run.best_dir.exists() and list(run.best_dir.parent.glob(".best.old-*"))
    snapshot("persisting")
    # A resume with nothing left to run puts the study's best in place, as its race judges it:
    # the race's contenders include what the killed run had told.
    run.start(trials=1)
    run.finish()
    study = run.study()
    assert study.user_attrs["race"]["trials"] == [c.number for c in contenders(records(study))]
    assert persist.verify_dir(run.best_dir)["trial"] == judge(records(study), study.user_attrs["race"]).best.number
    assert not [p.name for p in run.best_dir.parent.glob(".best*") if p.name != LOCK]

    # 4. At random moments.
    rng = random.Random(1234)
    for _ in range(2):
        run.start()
        delay = rng.uniform(1.0, 6.0)
        started = time.monotonic()
        run.kill_when(lambda: time.monotonic() - started > delay or run.proc.poll() is not None, "the delay")
        snapshot(f"random {delay:.1f} s")

    # 5. To the end.
    run.start()
    run.finish()
    final = run.trials()
    check_outputs_whole(run)

    # No settled trial lost or changed.
    end = settled(final)
    for what, before, _, _ in snapshots:
        for number, record in before.items():
            assert end.get(number) == record, f"trial {number} settled before the kill {what} changed"
    # Nothing left RUNNING: the killed runs' trials were reaped as interrupted.
    assert not [t.number for t in final if t.state == TrialState.RUNNING]
    interrupted = [t for t in final if (t.user_attrs.get("failure") or {}).get("kind") == "interrupted"]
    assert interrupted and all(t.state == TrialState.FAIL for t in interrupted)
    # Exactly the target: interrupted trials and refused proposals do not use the budget.
    assert counted(final) == TRIALS

    # No kernel built twice: nothing committed before a kill is built after it.
    builds_final = run.builds()
    for what, _, entries, logged in snapshots:
        committed = {e["source_sha256"] for e in entries.values()}
        rebuilt = committed & set(builds_final[logged:])
        assert not rebuilt, f"kernels committed before the kill {what} were built again"
    # A source is built once, plus once for each kill that caught its build unfinished.
    interrupted_builds = sum(
        len(set(builds_final[:logged]) - {e["source_sha256"] for e in entries.values()})
        for _, _, entries, logged in snapshots)
    assert len(builds_final) <= len(set(builds_final)) + interrupted_builds
    entries = run.entries()
    for t in final:
        key = (t.user_attrs.get("evaluation") or {}).get("kernel_key")
        if key is not None:
            assert entries[key]["ok"], key
    # A killed build leaves at most its private staging directory (swept after an hour).
    assert len(run.staging()) <= interrupted_builds

    # The best directory and the results describe the study's best trial, as its race judges it.
    study = run.study()
    study_best = judge(records(study), study.user_attrs["race"]).best
    assert study.user_attrs["race"]["trials"] == [c.number for c in contenders(records(study))]
    meta = persist.verify_dir(run.best_dir)
    assert meta["trial"] == study_best.number
    assert not [p.name for p in run.best_dir.parent.glob(".best*") if p.name != LOCK]
    results = json.loads(run.results.read_text())
    assert results["best"]["trial"] == study_best.number


# ---- the rename-based writers on their own, killed at random points --------------------------------

WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from cutsearch import persist

    kind, target = sys.argv[1], Path(sys.argv[2])
    version = 0
    while True:
        version += 1
        blob = bytes([version % 256]) * (8 << 20)
        if kind == "json":
            persist.write_json(target, {"version": version, "payload": "x" * (4 << 20)})
        else:
            persist.write_dir(target, {"blob.bin": blob}, {"version": version})
        print(version, flush=True)
""")


@pytest.mark.parametrize("kind", ["json", "dir"])
def test_rename_based_writers_leave_a_whole_version_whenever_they_are_killed(tmp_path, kind):
    target = tmp_path / ("results.json" if kind == "json" else "best")
    rng = random.Random(kind)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    checked = 0
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, kind, str(target)], env=env, stdout=subprocess.PIPE,
                                start_new_session=True)
        time.sleep(rng.uniform(0.3, 1.5))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        checked += target.exists()
        if kind == "json":
            if target.exists():
                data = json.loads(target.read_text())
                assert data["payload"] == "x" * (4 << 20)
        else:
            persist.recover_dir(target)
            if target.exists():
                meta = persist.verify_dir(target)
                assert (target / "blob.bin").read_bytes() == bytes([meta["version"] % 256]) * (8 << 20)
            assert not [p.name for p in tmp_path.glob(".best.*") if p.name != LOCK]
    assert checked, "no writer finished a version before it was killed: nothing was checked"


# ---- reaping what killed runs left RUNNING -----------------------------------------------------------

def test_reaping_fails_the_trials_of_dead_processes_and_spares_the_living(tmp_path):
    from cutsearch import storage as storage_mod

    study = optuna.create_study(study_name="reap", storage=storage_mod.open_storage(tmp_path / "journal.log"))
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        host = storage_mod.owner_id().rpartition(":")[0]
        owners = {"living": f"{host}:{alive.pid}", "dead": f"{host}:{dead.pid}", "self": storage_mod.owner_id(),
                  "unclaimed": None}
        trials = {}
        for name, owner in owners.items():
            trial = study.ask()
            if owner is not None:
                study._storage.set_trial_system_attr(trial._trial_id, storage_mod.OWNER, owner)
            trials[name] = trial.number
        reaped = storage_mod.reap_stale(study)
    finally:
        alive.kill()
        alive.wait()
    # A trial asked but never claimed was asked by a process that died between the two steps
    # (the search does both under the budget lock, which the reaper holds too).
    assert sorted(reaped) == sorted([trials["dead"], trials["unclaimed"]])
    states = {t.number: t for t in study.get_trials()}
    for name in ("dead", "unclaimed"):
        assert states[trials[name]].state == TrialState.FAIL
        assert states[trials[name]].user_attrs["failure"]["kind"] == "interrupted"
    assert states[trials["living"]].state == TrialState.RUNNING
    assert states[trials["self"]].state == TrialState.RUNNING
