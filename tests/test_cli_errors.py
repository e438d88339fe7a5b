"""Bad input and a bad environment: one clear line on stderr, a non-zero exit, nothing corrupted.

Every case runs the real command line in a child process (no traceback may reach the user),
except those that need a machine state a test cannot make for real (a full disk, a GPU that is
not a Hopper), which drive the library in-process and check the error it raises.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from optuna.storages.journal import JournalFileSymlinkLock

from cutsearch import storage
from cutsearch.cache import Cache
from cutsearch.compiler import Compiler, Toolchain
from cutsearch.errors import EnvironmentProblem, UserError
from tests.fakes import fault_source

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "studies" / "recorded" / "h200-smoke" / "fc-16x4096x4096-f16.json"
LAYER = ["--m", "16", "--n", "4096", "--k", "4096"]
REPLAY = ["--evaluator", "replay", "--recording", str(RECORDING)]


def cutsearch(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "cutsearch", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or ROOT, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """The single line on stderr, after checking there is nothing else and no traceback."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def nothing_written(studies: Path) -> bool:
    return not studies.exists() or not [p for p in studies.rglob("*") if p.is_file()]


@pytest.fixture
def studies(private_dirs) -> Path:
    return private_dirs[0]


def fake_nvcc(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake-bin" / "nvcc"
    script.parent.mkdir(exist_ok=True)
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


NVCC_13 = 'case "$1" in --version) echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0;; esac\n'


# ---- the layer ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "fragments"), [
    (["--m", "0", "--n", "64", "--k", "64"], ["M must be positive, got 0"]),
    (["--m", "64", "--n", "-8", "--k", "64"], ["N must be positive, got -8"]),
    (["--m", "64", "--n", "64", "--k", "0"], ["K must be positive"]),
    (["--m", "64", "--n", "1.5", "--k", "64"], ["'--n'", "integer"]),
    (["--m", "abc", "--n", "64", "--k", "64"], ["'--m'", "integer"]),
    (["--m", "64", "--n", "64", "--k", "3000000000"], ["K=3000000000 is beyond int32"]),
    (["--m", "2000000", "--n", "2000000", "--k", "16"], ["(7,450.7 GiB)", "(64 GiB)"]),
    (["--m", "64", "--n", "64", "--k", "64", "--dtype", "f32"], ["unsupported dtype 'f32'", "f16, bf16"]),
    (["--m", "64", "--n", "64", "--k", "64", "--activation", "tanh"], ["unsupported activation 'tanh'"]),
    (["--m", "64", "--n", "64"], ["--m M --n N --k K"]),
    (["--m", "64", "--n", "64", "--k", "64", "--timeout", "soon"], ["cannot read duration 'soon'"]),
    (["--m", "64", "--n", "64", "--k", "64", "--jobs", "0"], ["--jobs must be positive"]),
    (["--m", "64", "--n", "64", "--k", "64", "--batch", "-1"], ["--batch must be positive"]),
    (["--m", "64", "--n", "64", "--k", "64", "--study", "../escape"], ["study name '../escape'"]),
    (["--m", "64", "--n", "64", "--k", "64", "--input", "strided"], ["unsupported input layout 'strided'"]),
    (["--m", "64", "--n", "64", "--k", "64", "--output", "packed"], ["unsupported output layout 'packed'"]),
    (["--m", "64", "--n", "64", "--k", "64", "--all-stages", "true"], ["'true' is no layer file", "take no value"]),
    (["--m", "64", "--n", "64", "--k", "64", "--study", ""], ["study name ''"]),
    (["--m", "64", "--n", "64", "--k", "64", "--storage", ""], ["--storage is empty"]),
], ids=["M-zero", "N-negative", "K-zero", "N-not-integer", "M-not-a-number", "K-beyond-int32",
        "beyond-memory", "dtype", "activation", "K-missing", "duration", "jobs", "batch", "study-name", "input",
        "output", "flag-with-a-value", "empty-study", "empty-storage"])
def test_bad_layer_or_option_is_one_line_and_writes_nothing(studies, args, fragments):
    one_line_error(cutsearch("search", *args, *REPLAY), *fragments)
    assert nothing_written(studies)


@pytest.mark.parametrize("option", [["--trials", "0"], ["--seed", "-1"], ["--split-k", "--jobs", "0"]],
                         ids=["trials", "seed", "split-k-jobs"])
def test_a_bad_option_is_the_only_line_even_where_a_notice_would_precede_the_search(studies, option):
    """The model evaluator's and --split-k's notices come after the options are checked."""
    one_line_error(cutsearch("search", "--m", "64", "--n", "64", "--k", "64", "--evaluator", "model", *option),
                   "must be")
    assert nothing_written(studies)


@pytest.mark.parametrize(("content", "fragments"), [
    (None, ["does not exist"]),
    ("directory", ["cannot read layer file"]),
    ("[layer\nM = 1", ["is not valid TOML"]),
    ("[layer]\nM = 64\nN = 64\n", ["layer is missing 'K'"]),
    ("[fc1]\nM = 64\nN = 64\nK = 64\ndtypes = true\n", ["dtypes must be a list"]),
    ("[layer]\nM = 64\nN = 64\nK = 64\ndtype = \"int8\"\n", ["unsupported dtype 'int8'"]),
    ("[layer]\nM = 64\nN = 64\nK = 64\nbias = \"yes\"\n", ["bias must be true or false"]),
    ("[layer]\nM = 64\nN = 64\nK = 64\nstride = 2\n", ["unknown layer key(s): stride"]),
], ids=["missing", "directory", "not-toml", "no-K", "dtypes-not-a-list", "dtype", "bias", "unknown-key"])
def test_bad_layer_file_is_one_line_and_writes_nothing(studies, tmp_path, content, fragments):
    path = tmp_path / "layer.toml"
    if content == "directory":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    one_line_error(cutsearch("search", str(path), *REPLAY), *fragments)
    assert nothing_written(studies)


def test_zero_trials_is_one_line_and_writes_nothing(studies):
    one_line_error(cutsearch("search", *LAYER, *REPLAY, "--trials", "0"), "--trials must be positive")
    assert nothing_written(studies)


# ---- the toolkit -------------------------------------------------------------------------------------

def test_no_nvcc_anywhere_is_one_line(tmp_path):
    path = "/usr/bin:/bin"
    if shutil.which("nvcc", path=path):
        pytest.skip("nvcc is installed in /usr/bin or /bin")
    env = {"PATH": path, "CUDA_HOME": str(tmp_path / "no-cuda"), "CUDA_PATH": str(tmp_path / "no-cuda"),
           "CUTSEARCH_NVCC": ""}
    one_line_error(cutsearch("search", *LAYER, "--evaluator", "gpu", env=env), "nvcc not found",
                   "CUDA toolkit (12.0 or newer)")


def test_nvcc_path_that_does_not_exist_is_one_line(tmp_path):
    missing = str(tmp_path / "nowhere" / "nvcc")
    one_line_error(cutsearch("search", *LAYER, "--evaluator", "gpu", env={"CUTSEARCH_NVCC": missing}),
                   f"cannot run {missing}")


@pytest.mark.parametrize(("version", "fragments"), [
    ('echo "Cuda compilation tools, release 11.8, V11.8.89"\n', ["nvcc 11.8 is too old", "CUDA 12.0 or newer"]),
    ('echo "something else entirely"\n', ["cannot read the version of"]),
], ids=["too-old", "unreadable"])
def test_unusable_nvcc_is_one_line(tmp_path, version, fragments):
    nvcc = fake_nvcc(tmp_path, version)
    one_line_error(cutsearch("search", *LAYER, "--evaluator", "gpu", env={"CUTSEARCH_NVCC": str(nvcc)}),
                   *fragments)


# ---- the GPU -----------------------------------------------------------------------------------------

def _cuda_visible() -> bool:
    probe = "import sys\ntry:\n import torch\nexcept ImportError:\n sys.exit(1)\nsys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=300).returncode == 0


def test_no_gpu_is_one_line_from_the_worker(tmp_path):
    if _cuda_visible():
        pytest.skip("a CUDA GPU is visible here")
    nvcc = fake_nvcc(tmp_path, NVCC_13)  # a toolkit that passes, so the GPU is what is missing
    line = one_line_error(cutsearch("search", *LAYER, "--evaluator", "gpu", env={"CUTSEARCH_NVCC": str(nvcc)}),
                          "cannot use GPU 0:")
    assert "no CUDA GPU" in line or "torch is not installed" in line


class _Ampere:
    """A worker whose GPU is an A100."""

    def call(self, request, timeout_s):
        from cutsearch.worker import DeviceInfo

        return DeviceInfo(name="NVIDIA A100-SXM4-80GB", capability=(8, 0), sm_count=108, l2_bytes=40 << 20,
                          memory_bytes=80 << 30, driver="13.0", torch="2.11")

    def close(self):
        pass


def test_gpu_that_is_not_a_hopper_is_one_clear_error(tmp_path):
    from cutsearch import tuner
    from cutsearch.evaluator import GpuEvaluator
    from cutsearch.problem import Layer

    toolchain = Toolchain(nvcc="nvcc", nvcc_version="13.0", cutlass_version="4.2.0")
    evaluator = GpuEvaluator(cache_dir=tmp_path / "kernels", worker=_Ampere(), toolchain=toolchain)
    with pytest.raises(EnvironmentProblem) as raised:
        tuner.tune(Layer(m=64, n=64, k=64), trials=2, evaluator=evaluator)
    message = str(raised.value)
    assert "A100" in message and "sm_80" in message and "Hopper" in message and "\n" not in message


# ---- the storage -------------------------------------------------------------------------------------

def test_unreachable_storage_is_one_line_without_the_password(studies):
    line = one_line_error(cutsearch("search", *LAYER, *REPLAY, "--storage",
                                    "postgresql://nobody:secret@127.0.0.1:1/x"), "cannot open storage")
    assert "secret" not in line


@pytest.mark.parametrize("url", ["postgres//nobody@127.0.0.1/x", "postgresql:/nobody@127.0.0.1/x",
                                 "sqlite:/x.db"], ids=["no-colon", "one-slash", "sqlite"])
def test_a_database_url_without_its_double_slash_is_one_line_and_creates_no_file(studies, tmp_path, url):
    here = tmp_path / "here"
    here.mkdir()
    one_line_error(cutsearch("search", *LAYER, *REPLAY, "--storage", url, cwd=here),
                   "looks like a database URL without '://'")
    assert list(here.iterdir()) == []


def test_unreachable_storage_for_a_worker_is_one_line():
    one_line_error(cutsearch("worker", "--study", "s", "--storage", "postgresql://nobody@127.0.0.1:1/x",
                             "--evaluator", "model"), "cannot open storage")


def test_worker_for_a_study_that_does_not_exist_is_one_line_and_writes_nothing(studies):
    one_line_error(cutsearch("worker", "--study", "nosuch", "--evaluator", "model"), "no study named 'nosuch'")
    assert nothing_written(studies)


def test_every_command_that_reads_a_study_names_what_the_storage_holds_instead(studies, tmp_path):
    """One lookup (storage.load_study) behind record, show, report and a joining worker."""
    journal = studies / "held" / "journal.log"
    searched = cutsearch("search", *LAYER, *REPLAY, "--study", "held", "--trials", "1")
    assert searched.returncode == 0, searched.stderr
    for args in (["record", "nosuch", "--out", str(tmp_path / "r.json")], ["show", "nosuch"],
                 ["report", "nosuch", "--out", str(tmp_path / "r.html")],
                 ["worker", "--study", "nosuch", "--evaluator", "model"]):
        one_line_error(cutsearch(*args, "--storage", str(journal)), "no study named 'nosuch'", "(it holds: held)")
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("garbage", [b"\x00\xff\xfe garbage \x80\n\x81\n", b"hello\nworld\n{\"op_code\": 99}\n",
                                     b"not a journal, no newline"], ids=["binary", "text", "torn-garbage"])
def test_corrupted_study_file_is_one_line_and_left_as_it_was(studies, garbage):
    journal = studies / "broken" / "journal.log"
    journal.parent.mkdir(parents=True)
    journal.write_bytes(garbage)
    one_line_error(cutsearch("search", *LAYER, *REPLAY, "--study", "broken"), "is corrupted", str(journal))
    assert journal.read_bytes() == garbage


def test_gzipped_journal_is_one_line_that_says_to_gunzip_it(studies, tmp_path):
    assert cutsearch("search", *LAYER, *REPLAY, "--study", "z", "--trials", "1").returncode == 0
    packed = tmp_path / "z.journal.log.gz"
    packed.write_bytes(gzip.compress((studies / "z" / "journal.log").read_bytes()))
    before = packed.read_bytes()
    one_line_error(cutsearch("show", "z", "--storage", str(packed)), "is gzip-compressed", "gunzip -k")
    assert packed.read_bytes() == before


def test_journal_cut_short_by_a_crash_resumes_and_stays_readable(studies):
    assert cutsearch("search", *LAYER, *REPLAY, "--study", "cut", "--trials", "2").returncode == 0
    journal = studies / "cut" / "journal.log"
    journal.write_bytes(journal.read_bytes()[:-40])  # the last record without its end
    resumed = cutsearch("search", *LAYER, *REPLAY, "--study", "cut", "--trials", "4")
    assert resumed.returncode == 0, resumed.stderr
    again = cutsearch("search", *LAYER, *REPLAY, "--study", "cut", "--trials", "5")
    assert again.returncode == 0, again.stderr
    assert journal.read_bytes().endswith(b"\n")


def test_a_file_that_is_no_journal_is_one_line_and_gets_nothing_appended(studies, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello world\n")
    one_line_error(cutsearch("search", *LAYER, *REPLAY, "--storage", str(notes)), "no Optuna journal")
    assert notes.read_text() == "hello world\n"
    one_line_error(cutsearch("search", *LAYER, *REPLAY, "--storage", "/dev/null"), "is not a regular file")


def test_a_reader_waiting_for_the_lock_leaves_an_append_that_finished_meanwhile(tmp_path):
    journal = tmp_path / "journal.log"
    record = b'{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [1]}\n'
    journal.write_bytes(record + record[:20])  # a live append, half written
    lock = JournalFileSymlinkLock(str(journal))
    lock.acquire()
    raised = []

    def read() -> None:
        try:
            storage._cut_torn_tail(journal)
        except Exception as exc:  # noqa: BLE001 - the test asserts there is none
            raised.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.5)  # the reader saw the torn tail and waits for the writer's lock
    with open(journal, "ab") as f:
        f.write(record[20:])
    lock.release()
    reader.join(30)
    assert raised == [] and journal.read_bytes() == record * 2


def test_study_directory_that_cannot_be_written_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    one_line_error(cutsearch("search", *LAYER, *REPLAY, "--studies-dir", str(blocker / "studies")),
                   "cannot write the study directory")
    assert blocker.read_text() == "not a directory"


def test_journal_storage_that_cannot_be_written_is_one_line(studies, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    line = one_line_error(cutsearch("search", *LAYER, *REPLAY, "--storage", str(blocker / "j" / "journal.log")),
                          "cannot write the journal's directory")
    assert str(blocker / "j") in line and blocker.read_text() == "not a directory"


# ---- a full disk while compiling (in-process: no test may fill a real disk) --------------------------

def _no_staging(root: Path) -> bool:
    return not list(root.glob(".build-*"))


def test_nvcc_reporting_a_full_disk_is_an_environment_problem_not_a_compile_error(tmp_path, monkeypatch):
    nvcc = fake_nvcc(tmp_path, NVCC_13 + 'echo "kernel.cu: fatal error: No space left on device" >&2\nexit 1\n')
    monkeypatch.setenv("CUTSEARCH_NVCC", str(nvcc))
    compiler = Compiler(Cache(tmp_path / "kernels"), Toolchain.find("4.2.0"), jobs=1)
    with pytest.raises(EnvironmentProblem, match="is full: free space and resume"):
        compiler.compile(fault_source("correct", tag="enospc"))
    # Nothing remembered: once there is space again, the kernel is built, not failed from cache.
    assert compiler.lookup(fault_source("correct", tag="enospc")) is None
    assert _no_staging(tmp_path / "kernels")


@pytest.mark.parametrize("where", ["staging", "commit"])
def test_a_full_disk_in_the_cache_is_an_environment_problem_and_leaves_no_staging(tmp_path, monkeypatch, where):
    nvcc = fake_nvcc(tmp_path, NVCC_13 + 'while [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; shift; done\nexit 0\n')
    monkeypatch.setenv("CUTSEARCH_NVCC", str(nvcc))
    root = tmp_path / "kernels"
    compiler = Compiler(Cache(root), Toolchain.find("4.2.0"), jobs=1)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Cache, where, full)
    with pytest.raises(EnvironmentProblem, match="is full: free space and resume") as raised:
        compiler.compile(fault_source("correct", tag=f"enospc-{where}"))
    assert str(root) in str(raised.value)
    assert _no_staging(root)
    assert not [p for p in root.glob("*/*") if p.is_dir()] if root.exists() else True


# ---- export into a directory that is not ours --------------------------------------------------------

def test_export_into_a_foreign_directory_is_refused_and_leaves_it_alone(studies, tmp_path):
    from cutsearch.export import export
    from cutsearch.workspace import Workspace

    assert cutsearch("search", *LAYER, *REPLAY, "--study", "exported", "--trials", "1").returncode == 0
    foreign = tmp_path / "someone-elses"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("years of work")
    before = hashlib.sha256((foreign / "thesis.tex").read_bytes()).hexdigest()
    for force in (False, True):
        with pytest.raises(UserError, match=str(foreign)):
            export("exported", out=foreign, workspace=Workspace(studies), force=force)
    one_line_error(cutsearch("export", "exported", "--out", str(foreign), "--force"), str(foreign))
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]
    assert hashlib.sha256((foreign / "thesis.tex").read_bytes()).hexdigest() == before


@pytest.mark.parametrize(("args", "fragment"), [
    (["--kernels", "4", "--naive", "8"], "need 0 < --naive <= --kernels"),
    (["--batch", "0"], "--batch and --jobs must be positive"),
    (["--m", "0"], "M must be positive"),
])
def test_bad_throughput_benchmark_options_are_one_line(tmp_path, args, fragment):
    one_line_error(cutsearch("throughput", *args, "--out", str(tmp_path / "t.json")), fragment)
    assert not (tmp_path / "t.json").exists()


# ---- found by a hunt for user mistakes that gave a traceback, the wrong exit code or a wrong layer --

@pytest.mark.parametrize(("args", "fragment"), [
    (["--seed", "-1"], "--seed must be in [0, 2**32)"),
    (["--seed", "4294967296"], "--seed must be in [0, 2**32)"),
    (["--warm", "-1"], "--warm must be 0 or more"),
    (["--trials", "0"], "--trials must be positive"),
    (["--sampler", "nope"], "unknown sampler 'nope': choose one of tpe, random, model"),
], ids=["negative-seed", "seed-too-large", "negative-warm", "no-trials", "sampler"])
def test_a_bad_option_is_one_line_before_anything_is_written(studies, args, fragment):
    one_line_error(cutsearch("search", *LAYER, *REPLAY, *args), fragment)
    assert nothing_written(studies)


@pytest.mark.parametrize("content", ["", "not json", "{}", "[]", '{"layer": {"M": 16}, "evaluations": []}',
                                     '{"layer": {"M": 16, "N": 4096, "K": 4096}, "evaluations": [{}]}'],
                         ids=["empty", "text", "no-keys", "a-list", "bad-layer", "bad-evaluation"])
def test_a_recording_that_cannot_be_replayed_is_one_line(studies, tmp_path, content):
    recording = tmp_path / "recording.json"
    recording.write_text(content)
    one_line_error(cutsearch("search", *LAYER, "--evaluator", "replay", "--recording", str(recording)),
                   str(recording))
    one_line_error(cutsearch("search", *LAYER, "--evaluator", "replay", "--recording", str(tmp_path)),
                   "cannot read recording", "Is a directory")


def test_a_study_is_never_resumed_with_times_of_another_kind(studies):
    assert cutsearch("search", *LAYER, "--evaluator", "model", "--trials", "2").returncode == 0
    one_line_error(cutsearch("search", *LAYER, *REPLAY, "--trials", "4"),
                   "holds predicted times, and this run's would be recorded")


def test_a_study_that_cutsearch_did_not_make_is_not_taken_over(studies):
    import optuna

    journal = studies / "foreign" / "journal.log"
    journal.parent.mkdir(parents=True)
    study = optuna.create_study(study_name="foreign", storage=storage.open_storage(journal))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    one_line_error(cutsearch("search", *LAYER, *REPLAY, "--study", "foreign"), "was not made by cutsearch")
    after = optuna.load_study(study_name="foreign", storage=storage.open_storage(journal))
    assert len(after.trials) == 2 and after.user_attrs == study.user_attrs == {}


@pytest.mark.parametrize(("options", "fragment"), [
    (["--activation", "relu"], "drop --activation"),
    (["--dtype", "bf16", "--output", "transposed"], "drop --dtype, --output"),
    (["--evaluator", "model", "--recording", str(RECORDING)], "--recording is replayed by --evaluator replay"),
], ids=["activation", "dtype-and-layout", "recording-unused"])
def test_an_option_the_search_would_ignore_is_one_line(studies, tmp_path, options, fragment):
    layer = tmp_path / "layer.toml"
    layer.write_text("[layer]\nM = 16\nN = 64\nK = 64\n")
    one_line_error(cutsearch("search", str(layer), *options), fragment)
    assert nothing_written(studies)


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda e: e["measurement"]["timing"].update(median_us="fast"), "Timing.median_us = 'fast', not a float"),
    (lambda e: e["measurement"]["timing"].update(median_us=None), "Timing.median_us = None, not a float"),
    (lambda e: e["config"].update(tile_m="big"), "Config.tile_m = 'big', not an int"),
], ids=["median-text", "median-null", "tile-text"])
def test_a_recording_with_a_value_of_the_wrong_type_is_one_line_for_every_reader(studies, tmp_path, change,
                                                                                   fragment):
    data = json.loads(RECORDING.read_text())
    change(next(e for e in data["evaluations"] if e.get("measurement")))
    recording = tmp_path / "typed.json"
    recording.write_text(json.dumps(data))
    for args in (["calibrate", str(recording), "--out", str(tmp_path / "c.json")],
                 ["efficiency", str(recording), "--out", str(tmp_path / "e.json")],
                 ["search", *LAYER, "--evaluator", "replay", "--recording", str(recording)]):
        one_line_error(cutsearch(*args), str(recording), fragment)


def test_a_recording_whose_layer_is_no_table_is_one_line(studies, tmp_path):
    data = {**json.loads(RECORDING.read_text()), "layer": "oops"}
    recording = tmp_path / "layer.json"
    recording.write_text(json.dumps(data))
    one_line_error(cutsearch("calibrate", str(recording), "--out", str(tmp_path / "c.json")),
                   "a layer must be a table")


def test_a_journal_with_a_bad_record_inside_is_one_line_for_a_new_study_too(studies, tmp_path):
    assert cutsearch("search", *LAYER, *REPLAY, "--study", "r", "--trials", "2").returncode == 0
    journal = studies / "r" / "journal.log"
    lines = journal.read_bytes().splitlines(keepends=True)
    broken = tmp_path / "broken.log"
    broken.write_bytes(lines[0] + b"garbage{\n" + b"".join(lines[1:]))
    before = broken.read_bytes()
    for args in (["search", *LAYER, *REPLAY, "--study", "another", "--storage", str(broken)],
                 ["worker", "--study", "r", "--storage", str(broken), "--evaluator", "model"],
                 ["show", "r", "--storage", str(broken)]):
        one_line_error(cutsearch(*args), "is corrupted or unreadable")
    assert broken.read_bytes() == before  # no record appended to it


@pytest.mark.parametrize("out", ["", ".", "/"], ids=["empty", "here", "root"])
def test_a_report_to_a_directory_is_one_line(studies, out):
    assert cutsearch("search", *LAYER, *REPLAY, "--study", "r", "--trials", "1").returncode == 0
    one_line_error(cutsearch("report", "r", "--out", out), "cannot write the report", "is a directory")


@pytest.mark.parametrize("meta", ["[]", "null", "5", '{"files": 5}'], ids=["list", "null", "number", "files"])
def test_an_export_with_a_malformed_meta_json_is_one_line(studies, tmp_path, meta):
    from cutsearch import persist

    (tmp_path / "exported").mkdir()
    (tmp_path / "exported" / "meta.json").write_text(meta)
    with pytest.raises(UserError, match="is not a cutsearch meta.json"):
        persist.verify_dir(tmp_path / "exported")


def test_an_output_named_by_its_directory_names_the_path_given_not_a_temporary_one(studies, tmp_path):
    (tmp_path / "adir").mkdir()
    from cutsearch import persist

    with pytest.raises(IsADirectoryError) as raised:
        persist.write_text(tmp_path / "adir", "x")
    assert raised.value.filename == str(tmp_path / "adir")
    with pytest.raises(FileNotFoundError) as raised:  # /proc takes no new directory
        persist.write_text(Path("/proc/no-such-dir/x.json"), "x")
    assert raised.value.filename == "/proc/no-such-dir/x.json"
    line = one_line_error(cutsearch("calibrate", str(RECORDING), "--out", str(tmp_path / "adir")))
    assert line == f"error: --out {tmp_path / 'adir'} is a directory: name the file to write"


def test_a_suite_table_that_cannot_name_a_study_is_refused_before_any_search(studies, tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text('[first]\nM = 16\nN = 64\nK = 64\n["bad name"]\nM = 16\nN = 64\nK = 64\n')
    one_line_error(cutsearch("suite", str(suite), "--evaluator", "model", "--trials", "1"),
                   "suite table 'bad name' cannot name a study")
    assert nothing_written(studies)


def test_a_suite_table_whose_study_holds_another_layer_says_to_rename_the_table(studies, tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text("[a]\nM = 16\nN = 64\nK = 64\n")
    assert cutsearch("suite", str(suite), "--evaluator", "model", "--trials", "1").returncode == 0
    suite.write_text("[a]\nM = 16\nN = 128\nK = 64\n")
    proc = cutsearch("suite", str(suite), "--evaluator", "model", "--trials", "1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # after the suite's "layer 1/1: a"
    assert line.startswith("error: ") and "so rename table 'a', or give another --studies-dir" in line
    assert "--study name" not in line  # a suite has no --study option


@pytest.mark.parametrize(("args", "fragment"), [
    (["--metric", "foo"], "unknown metric 'foo'"),
    (["--out", "."], "--out . is a directory: name the file to write"),
], ids=["metric", "out-directory"])
def test_heuristics_options_are_checked_before_anything_runs(args, fragment):
    one_line_error(cutsearch("heuristics", str(RECORDING), *args), fragment)


def test_version_and_short_help():
    version = cutsearch("--version")
    assert version.returncode == 0 and version.stdout.startswith("cutsearch ")
    assert cutsearch("search", "-h").returncode == 0


@pytest.mark.parametrize(("table", "fragment"), [
    ('[a]\nM = 64\nN = 64\nK = 64\nactvation = "relu"\n', "unknown layer key(s): actvation"),
    ('[a]\nM = 64\nN = 64\nK = 64\nBias = true\n', "unknown layer key(s): Bias"),
    ('[a]\nM = 64\nN = 64\nK = 64\ndtypes = ["f16", "bf16"]\n["a-f16"]\nM = 8\nN = 8\nK = 8\n', "defined twice"),
    ('[a]\nM = 64\nN = 64\nK = 64\ndtypes = []\n', "dtypes must be a list"),
    ('[a]\nM = 64\nN = 64\n', "layer 'a'"),
], ids=["typo", "capital", "collision", "no-dtypes", "which-layer"])
def test_a_suite_file_that_would_search_another_layer_than_meant_is_one_line(studies, tmp_path, table, fragment):
    suite = tmp_path / "suite.toml"
    suite.write_text(table)
    one_line_error(cutsearch("suite", str(suite), "--evaluator", "model"), fragment)


def test_a_suite_file_keeps_its_measured_notes_beside_each_layer(studies, tmp_path):
    """As in a shapes file: floor_us and per-dtype baselines are notes, not layer keys."""
    suite = tmp_path / "suite.toml"
    suite.write_text('[a]\nm = 16\nn = 64\nk = 64\nfloor_us = 1.0\nf16 = { linear = 8.5 }\n')
    proc = cutsearch("suite", str(suite), "--evaluator", "model", "--trials", "1")
    assert proc.returncode == 0, proc.stderr
    [result] = (studies / "results").glob("suite-model-evaluator-*.json")
    records = json.loads(result.read_text())["records"]
    assert [(r["name"], r["M"], r["N"], r["K"], r["dtype"]) for r in records] == [("a", 16, 64, 64, "f16")]


@pytest.mark.parametrize("args", [["--only", ","], ["--jobs", "0"], ["--batch", "-1"], ["--gpu", "-1"],
                                  ["--evaluator", "replay"]],
                         ids=["only-commas", "no-jobs", "negative-batch", "negative-gpu", "replay"])
def test_suite_options_are_checked_as_search_checks_them(studies, tmp_path, args):
    suite = tmp_path / "suite.toml"
    suite.write_text("[a]\nM = 16\nN = 64\nK = 64\n")
    one_line_error(cutsearch("suite", str(suite), "--evaluator", "model", *args))


@pytest.mark.parametrize("out", ["a-directory", "a-file/below"], ids=["directory", "under-a-file"])
def test_an_output_path_that_cannot_be_written_is_one_line(studies, tmp_path, out):
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "a-file").write_text("mine")
    assert cutsearch("search", *LAYER, *REPLAY, "--study", "r", "--trials", "1").returncode == 0
    one_line_error(cutsearch("record", "r", "--out", str(tmp_path / out)))
    assert (tmp_path / "a-file").read_text() == "mine"


def test_no_arguments_print_the_help_and_no_empty_error():
    proc = cutsearch()
    assert proc.returncode == 2 and "Usage" in proc.stdout + proc.stderr
    assert "error:" not in proc.stderr


def test_ctrl_c_exits_130_and_says_how_to_resume(studies):
    proc = subprocess.Popen([sys.executable, "-m", "cutsearch", "search", "--m", "8", "--n", "8", "--k", "8",
                             "--evaluator", "model", "--sampler", "random", "--trials", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    journal = studies / "fc-8x8x8-f16" / "journal.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not journal.exists() or journal.stat().st_size < 20000):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted: finished trials are saved" in stderr


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_sigterm_stops_the_builds_too_and_says_how_to_resume(studies, tmp_path):
    """`timeout` and job schedulers send SIGTERM: nvcc, in a session of its own, must not outlive it."""
    pids = tmp_path / "nvcc.pids"
    nvcc = fake_nvcc(tmp_path, NVCC_13 + f'echo $$ >> "{pids}"\nsleep 600 &\necho $! >> "{pids}"\nwait\n')
    suite = tmp_path / "suite.toml"
    suite.write_text("[a]\nM = 16\nN = 4096\nK = 4096\n")
    proc = subprocess.Popen([sys.executable, "-m", "cutsearch", "build", str(suite), "--top", "2", "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "CUTSEARCH_NVCC": str(nvcc)})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and (
            not pids.exists() or len(pids.read_text().split()) < 4):  # both builds, each with its child
        time.sleep(0.1)
    started = [int(pid) for pid in pids.read_text().split()] if pids.exists() else []
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=60)
        assert len(started) == 4, stderr
        assert proc.returncode == 128 + signal.SIGTERM, stderr
        assert "Traceback" not in stderr and "terminated by SIGTERM: the kernels built so far are cached" in stderr
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in started):
            time.sleep(0.1)
        assert not [pid for pid in started if _alive(pid)], "a build outlived the command"
    finally:
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_reader_of_a_missing_sqlite_database_creates_none(studies, tmp_path):
    database = tmp_path / "missing.db"
    one_line_error(cutsearch("show", "s", "--storage", f"sqlite:///{database}"), "does not exist")
    assert not database.exists()
