"""The dashboard serves a recorded H200 study, its best kernel, and a search still writing to it."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

import optuna
import pytest

from cutsearch import persist
from cutsearch.dashboard import is_loopback, publish_best, serve
from cutsearch.errors import UserError
from cutsearch.storage import open_storage
from tests.browser import SCREENSHOTS, chromium, needs_chromium

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "studies" / "recorded" / "h200-smoke" / "journals"
STUDY = "fc-4096x5000x1024-f16"
# The recording: 16 trials, of which 4 were measured (trial 2 fastest); 12 were enqueued, never run.
MEASURED = {0: 107.29599744081497, 1: 78.65600287914276, 2: 70.8640031516552, 3: 71.16799801588058}
KERNEL = "// the best kernel's source\n"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def study_dir(root: Path) -> Path:
    """A study laid out as a search leaves it: journal, artifacts, and best kernel of trial 2."""
    target = root / STUDY
    (target / "artifacts").mkdir(parents=True)
    shutil.copy(RECORDED / f"{STUDY}.log", target / "journal.log")
    persist.write_dir(target / "best", {"kernel.cu": KERNEL}, {"trial": 2})
    return target


def launch(*args: str) -> tuple[subprocess.Popen, str]:
    """`cutsearch dashboard ARGS` on a free port, once it answers; and its loopback URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cutsearch", "dashboard", *args, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the dashboard exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            get(base + "/api/meta")
            return proc, base
        except OSError:
            if time.monotonic() > deadline:
                stop(proc)
                pytest.fail("the dashboard did not answer within 60 s")
            time.sleep(0.2)


def stop(proc: subprocess.Popen) -> str:
    """Ctrl-C, as a user stops it; returns what it wrote on stderr."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=10)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    root = tmp_path_factory.mktemp("studies")
    study_dir(root)
    proc, base = launch(STUDY, "--studies-dir", str(root))
    try:
        studies = json.loads(get(base + "/api/studies"))["study_summaries"]
        yield types.SimpleNamespace(base=base, root=root, proc=proc,
                                    study_id={s["study_name"]: s["study_id"] for s in studies}[STUDY])
    finally:
        stop(proc)


def detail(dashboard) -> dict:
    return json.loads(get(f"{dashboard.base}/api/studies/{dashboard.study_id}"))


def test_dashboard_lists_the_recorded_study(dashboard):
    studies = json.loads(get(dashboard.base + "/api/studies"))["study_summaries"]
    assert [s["study_name"] for s in studies] == [STUDY]
    attrs = {a["key"]: json.loads(a["value"]) for a in studies[0]["user_attrs"]}
    assert attrs["layer"] == {"M": 4096, "N": 5000, "K": 1024, "dtype": "f16", "bias": False, "activation": "none"}
    assert attrs["floor_us"] == pytest.approx(53.0924557)


def test_dashboard_serves_the_recorded_trials(dashboard):
    study = detail(dashboard)
    recorded = [t for t in study["trials"] if t["number"] < 16]
    assert [t["number"] for t in recorded] == list(range(16))
    complete = {t["number"]: t["values"][0] for t in recorded if t["state"] == "Complete"}
    assert complete == pytest.approx(MEASURED)
    assert sum(t["state"] == "Waiting" for t in recorded) == 12
    assert study["best_trials"][0]["number"] == 2
    speedups = {t["number"]: json.loads(next(a["value"] for a in t["user_attrs"] if a["key"] == "speedup"))
                for t in recorded if t["state"] == "Complete"}
    assert speedups[2] == pytest.approx(0.93949, abs=1e-4)


def test_best_kernel_files_are_artifacts_of_the_best_trial(dashboard):
    best = detail(dashboard)["best_trials"][0]
    files = {a["filename"]: a for a in best["artifacts"]}
    assert set(files) == {"kernel.cu", "meta.json"}
    url = f"{dashboard.base}/artifacts/{dashboard.study_id}/{best['trial_id']}"
    assert get(f"{url}/{files['kernel.cu']['artifact_id']}").decode() == KERNEL
    assert json.loads(get(f"{url}/{files['meta.json']['artifact_id']}"))["trial"] == 2


def test_dashboard_follows_a_search_writing_the_same_journal(dashboard):
    before = detail(dashboard)["trials"]
    writer = optuna.load_study(study_name=STUDY, storage=open_storage(dashboard.root / STUDY / "journal.log"))
    template = writer.trials[2]
    writer.add_trial(optuna.trial.create_trial(params=template.params, distributions=template.distributions,
                                               value=90.5, user_attrs={"median_us": 90.5}))
    deadline = time.monotonic() + 20  # the dashboard caches a study's trials for a few seconds
    while len(after := detail(dashboard)["trials"]) == len(before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(after) == len(before) + 1
    assert after[-1]["state"] == "Complete" and after[-1]["values"] == [90.5]


@needs_chromium
def test_chromium_renders_the_dashboard_plots(dashboard, tmp_path):
    shot = SCREENSHOTS / "dashboard.png"
    dom = chromium(f"{dashboard.base}/dashboard/studies/{dashboard.study_id}", shot, tmp_path / "profile",
                   height=1400)
    assert STUDY in dom
    assert dom.count('class="main-svg"') >= 2  # plotly drew the history and the importances
    assert shot.stat().st_size > 20_000


def test_ctrl_c_stops_the_dashboard_cleanly(tmp_path):
    study_dir(tmp_path)
    proc, base = launch(STUDY, "--studies-dir", str(tmp_path))
    err = stop(proc)
    assert proc.returncode == 0, err
    assert f"{base}/dashboard" in err
    assert "Traceback" not in err and "warning" not in err


def test_serving_beyond_loopback_warns_that_anyone_can_write(tmp_path):
    journal = tmp_path / "journal.log"
    shutil.copy(RECORDED / f"{STUDY}.log", journal)
    proc, base = launch("--storage", str(journal), "--host", "0.0.0.0", "--allow-remote")
    try:
        assert json.loads(get(base + "/api/studies"))["study_summaries"][0]["study_name"] == STUDY
    finally:
        err = " ".join(stop(proc).split())  # rich wraps long lines
    assert "warning: serving on 0.0.0.0" in err
    assert "no authentication" in err and "delete studies" in err


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_a_non_loopback_host_needs_allow_remote(host):
    with pytest.raises(UserError, match="--allow-remote"):
        serve("no-such-journal.log", artifacts=None, host=host, port=0)


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                           ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                           ("::", False), ("192.0.2.7", False)])
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_the_cli_refuses_a_remote_host_in_one_line(tmp_path):
    journal = tmp_path / "journal.log"
    shutil.copy(RECORDED / f"{STUDY}.log", journal)
    run = subprocess.run([sys.executable, "-m", "cutsearch", "dashboard", "--storage", str(journal),
                          "--host", "0.0.0.0", "--port", str(free_port())],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "--allow-remote" in lines[0], run.stderr


def test_serving_a_missing_journal_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no study journal"):
        serve(str(tmp_path / "missing" / "journal.log"), artifacts=None, port=0)
    assert not (tmp_path / "missing").exists()


def test_best_kernel_is_published_once(tmp_path):
    target = study_dir(tmp_path)
    storage = open_storage(target / "journal.log")
    publish = dict(best_dir=target / "best", artifacts=target / "artifacts")
    assert publish_best(storage, STUDY, **publish) == ["kernel.cu", "meta.json"]
    assert publish_best(storage, STUDY, **publish) == []
    assert publish_best(str(target / "journal.log"), STUDY, **publish) == []  # a fresh reader sees them too
    assert len(list((target / "artifacts").iterdir())) == 2


def test_a_best_kernel_being_replaced_is_not_published(tmp_path):
    target = study_dir(tmp_path)
    (target / "best" / "kernel.cu").write_text("// half written")
    assert publish_best(str(target / "journal.log"), STUDY, best_dir=target / "best",
                        artifacts=target / "artifacts") == []


def test_a_best_kernel_of_an_unknown_trial_is_not_published(tmp_path):
    target = study_dir(tmp_path)
    persist.write_dir(target / "best", {"kernel.cu": KERNEL}, {"trial": 99})
    assert publish_best(str(target / "journal.log"), STUDY, best_dir=target / "best",
                        artifacts=target / "artifacts") == []
