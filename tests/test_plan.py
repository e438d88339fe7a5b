"""Profile -> plan -> apply without a GPU: the Amdahl arithmetic, the planner on a recorded
profile fixture, the suite file it writes, export matching, and the CLI's one-line errors.

tests/data/acoustic-profile.fixture.json is hand-written from plausible H200 figures for
studies/models/acoustic.py at --input-shape 8,512,80: a fixture, not a measurement.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cutsearch import persist
from cutsearch.errors import UserError
from cutsearch.plan import (CUTSEARCH, CallTiming, Profile, Row, Shape, aggregate, amdahl, compare, gain, match, plan,
                            read_exports, saving, suite_toml)
from cutsearch.problem import load_layers
from cutsearch.profiler import InputSpec, model_name

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "acoustic-profile.fixture.json"
FC1 = Shape(4096, 4096, 1024, "f16", True)
FC2 = Shape(4096, 1024, 4096, "f16", True)
OUT = Shape(4096, 5000, 1024, "f16", True)
INPUT = Shape(4096, 1024, 80, "f16", True)
HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture
def acoustic() -> Profile:
    return Profile.load(FIXTURE)


def _profile(rows, forward_us=1000.0, **kw) -> Profile:
    return Profile(name="m", forward={"median_us": forward_us, "p20_us": forward_us, "p80_us": forward_us, "reps": 3},
                   rows=tuple(rows), **kw)


# -- arithmetic --------------------------------------------------------------------------------------

def test_amdahl_is_the_gain_of_the_time_saved():
    # Half the pass in a layer running at twice its floor: a quarter of the pass can go.
    assert amdahl(0.5, 10.0, 20.0) == pytest.approx(1 / 0.75)
    assert saving(total_us=500.0, calls=1, floor_us=250.0, forward_us=1000.0) == pytest.approx(0.25)
    assert gain(0.25) == pytest.approx(amdahl(0.5, 10.0, 20.0))


def test_a_call_already_under_its_floor_has_nothing_to_gain():
    assert amdahl(0.3, 12.0, 10.0) == 1.0
    assert saving(total_us=10.0, calls=1, floor_us=12.0, forward_us=100.0) == 0.0


def test_a_shape_cutsearch_cannot_search_has_no_floor_and_no_saving():
    f32 = Shape(64, 64, 64, "f32", False)
    assert f32.floor_us() is None
    assert _profile([Row("a", f32, 1, 500.0)]).saving(Row("a", f32, 1, 500.0)) == 0.0


def test_aggregate_takes_each_calls_median_and_sums_the_calls_of_one_module():
    shape = Shape(128, 256, 256, "f16", False)
    rows = aggregate([
        CallTiming("proj", shape, (10.0, 11.0, 30.0)),  # median 11: one slow repetition does not count
        CallTiming("proj", shape, (9.0, 9.0, 9.0)),  # the same module, called again in the same pass
        CallTiming("head", Shape(128, 10, 256, "f16", True), (2.0, 2.0, 2.0)),
    ])
    by_name = {r.name: r for r in rows}
    assert by_name["proj"].calls == 2 and by_name["proj"].total_us == pytest.approx(20.0)
    assert by_name["proj"].per_call_us == pytest.approx(10.0)
    assert by_name["head"].calls == 1


def test_the_fixture_profile_adds_up(acoustic):
    assert acoustic.linear_share == pytest.approx(522.6 / 658.2)
    assert sum(acoustic.share(r) for r in acoustic.rows) <= 1.0
    fc1 = next(r for r in acoustic.rows if r.name == "blocks.0.fc1")
    assert acoustic.efficiency(fc1) == pytest.approx(FC1.layer().floor_us / 57.0)
    assert acoustic.saving(fc1) == pytest.approx((57.0 - FC1.layer().floor_us) / 658.2)


def test_profile_json_round_trips_with_its_derived_fields(acoustic, tmp_path):
    persist.write_json(tmp_path / "p.json", acoustic.to_dict())
    again = Profile.load(tmp_path / "p.json")
    assert set(again.rows) == set(acoustic.rows)
    assert again.forward_us == acoustic.forward_us
    written = json.loads((tmp_path / "p.json").read_text())
    first = written["layers"][0]
    assert first["name"] == "output", "rows are ranked by what they could save"
    assert first["best_gain"] == pytest.approx(1 / (1 - first["saving"]), rel=1e-4)
    assert first["efficiency"] == pytest.approx(first["floor_us"] / first["per_call_us"], rel=1e-3)


@pytest.mark.parametrize("content", ["[]", "{}", '{"format": "cutsearch-profile/1", "layers": []}', "not json"])
def test_a_file_that_is_not_a_profile_is_refused_in_one_line(tmp_path, content):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(UserError):
        Profile.load(path)


# -- planning ----------------------------------------------------------------------------------------

def test_plan_searches_each_shape_once_with_the_savings_of_its_layers_summed(acoustic):
    p = plan(acoustic, 0.01)
    assert [t.shape for t in p.targets] == [FC1, FC2, OUT]
    fc1 = p.targets[0]
    assert fc1.names == ("blocks.0.fc1", "blocks.1.fc1", "blocks.2.fc1", "blocks.3.fc1")
    assert fc1.calls == 4
    assert fc1.saving == pytest.approx((57.0 + 56.4 + 56.8 + 57.2 - 4 * FC1.layer().floor_us) / 658.2)
    assert p.bound == pytest.approx(1 / (1 - sum(t.saving for t in p.targets)))


def test_plan_skips_a_layer_under_the_threshold_and_says_why(acoustic):
    p = plan(acoustic, 0.01)
    (skip,) = p.skipped
    assert skip.names == ("input",) and skip.what == INPUT.label
    assert "0.65% of the forward pass" in skip.reason and "1% threshold" in skip.reason


def test_the_threshold_applies_to_a_shapes_summed_saving_not_to_each_layer(acoustic):
    p = plan(acoustic, 0.03)
    each_fc1 = [acoustic.saving(r) for r in acoustic.rows if r.shape == FC1]
    assert max(each_fc1) < 0.03, "no single fc1 would pass"
    assert [t.shape for t in p.targets] == [FC1, FC2]
    assert {s.what for s in p.skipped} == {OUT.label, INPUT.label}


def test_a_high_threshold_proposes_nothing(acoustic):
    p = plan(acoustic, 0.5)
    assert p.targets == () and len(p.skipped) == 4


def test_plan_leaves_out_f32_layers_applied_layers_and_layers_at_their_floor():
    at_floor = Shape(4096, 4096, 4096, "f16", False)
    rows = [Row("f32", Shape(4096, 4096, 1024, "f32", False), 1, 300.0),
            Row("done", FC1, 1, 45.0, kind=CUTSEARCH, export="exports/x", export_speedup=1.2),
            Row("l2", at_floor, 1, 0.9 * at_floor.layer().floor_us)]
    p = plan(_profile(rows), 0.0)
    assert p.targets == ()
    reasons = {s.names[0]: s.reason for s in p.skipped}
    assert reasons["f32"].startswith("f32: cutsearch searches f16 and bf16")
    assert reasons["done"] == "already runs a cutsearch kernel"
    assert "nothing to gain" in reasons["l2"]


@pytest.mark.parametrize("threshold", [-0.1, 1.0, 5])
def test_a_threshold_outside_0_to_1_is_refused(acoustic, threshold):
    with pytest.raises(UserError, match="fraction of the forward pass"):
        plan(acoustic, threshold)


def test_the_suite_file_loads_as_the_planned_layers(acoustic, tmp_path):
    p = plan(acoustic, 0.01)
    path = tmp_path / "suite.toml"
    path.write_text(suite_toml(p, source=FIXTURE.name))
    layers = load_layers(path)
    assert list(layers) == [t.slug for t in p.targets]
    assert [(x.m, x.n, x.k, x.dtype, x.bias, x.activation) for x in layers.values()] == [
        (s.m, s.n, s.k, s.dtype, s.bias, "none") for s in (FC1, FC2, OUT)]
    assert "input" in path.read_text(), "the layers left out are listed, with the reason"


# -- exports -----------------------------------------------------------------------------------------

def _export(directory: Path, shape: Shape, activation: str = "none", speedup: float = 1.1) -> Path:
    layer = {**shape.to_dict(), "activation": activation}
    return persist.write_dir(directory, {"README.md": "fake export for tests\n"},
                             {"exported_by": "cutsearch", "abi": 1, "layer": layer, "speedup": speedup})


def test_exports_are_found_by_the_shape_they_were_searched_for(tmp_path):
    a = _export(tmp_path / "exports" / "fc1", FC1)
    b = _export(tmp_path / "exports" / "out", OUT)
    _export(tmp_path / "exports" / "fused", FC2, activation="gelu")
    found, notes = read_exports([tmp_path / "exports"])
    assert found == {FC1: a, OUT: b}
    assert len(notes) == 1 and "fuses gelu" in notes[0]
    assert read_exports([a])[0] == {FC1: a}


def test_two_exports_for_one_shape_or_a_missing_directory_are_refused(tmp_path):
    _export(tmp_path / "one", FC1)
    _export(tmp_path / "two", FC1)
    with pytest.raises(UserError, match="two exports for"):
        read_exports([tmp_path / "one", tmp_path / "two"])
    with pytest.raises(UserError, match="does not exist"):
        read_exports([tmp_path / "missing"])
    with pytest.raises(UserError, match="fuses gelu"):
        read_exports([_export(tmp_path / "fused", FC2, activation="gelu")])


def test_a_linear_is_replaced_only_if_it_sees_one_shape_and_that_shape_has_an_export():
    other = Shape(1, 4096, 1024, "f16", True)
    seen = {"a.fc1": {FC1}, "b.fc1": {FC1}, "decode": {FC1, other}, "fc2": {FC2}}
    chosen, skipped = match(seen, {FC1: Path("exports/fc1")})
    assert chosen == {"a.fc1": Path("exports/fc1"), "b.fc1": Path("exports/fc1")}
    assert list(skipped) == ["decode"] and "called with 2 shapes" in skipped["decode"]


def test_any_m_lets_a_call_take_the_export_of_its_n_and_k_with_the_nearest_m():
    searched_big = FC1._replace(m=FC1.m * 2)
    searched_small = FC1._replace(m=FC1.m // 8)
    other_k = FC1._replace(m=FC1.m, k=FC1.k * 2)
    exports = {searched_big: Path("exports/big"), searched_small: Path("exports/small"), other_k: Path("exports/k")}
    assert match({"fc1": {FC1}}, exports) == ({}, {})
    chosen, _ = match({"fc1": {FC1}}, exports, any_m=True)
    assert chosen == {"fc1": Path("exports/big")}


def test_comparison_predicts_from_each_exports_searched_speedup(acoustic):
    applied = [dataclasses.replace(r, kind=CUTSEARCH, total_us=r.total_us / 1.25, export="exports/fc1",
                                   export_speedup=1.2) if r.shape == FC1 else r for r in acoustic.rows]
    after = dataclasses.replace(acoustic, rows=tuple(applied),
                                forward={**acoustic.forward, "median_us": acoustic.forward_us - 40.0})
    c = compare(acoustic, after)
    fc1_total = sum(r.total_us for r in acoustic.rows if r.shape == FC1)
    assert c.measured == pytest.approx(658.2 / 618.2)
    assert c.predicted == pytest.approx(1 / (1 - fc1_total * (1 - 1 / 1.2) / 658.2))
    assert c.bound == pytest.approx(1 / (1 - sum(acoustic.saving(r) for r in acoustic.rows if r.shape == FC1)))
    assert len(c.replaced) == 4 and c.replaced[0].after_us < c.replaced[0].before_us
    assert c.to_dict()["measured_speedup"] == pytest.approx(c.measured, rel=1e-3)


# -- specs -------------------------------------------------------------------------------------------

def test_input_specs_read_shapes_and_optional_dtypes():
    assert InputSpec.parse("8,512,80") == InputSpec((8, 512, 80), None)
    assert InputSpec.parse("8, 512:i64") == InputSpec((8, 512), "int64")
    assert str(InputSpec.parse("8,512:i64")) == "8,512:i64"


@pytest.mark.parametrize("text", ["", "8x512", "8,,2", "8,0,80", "8,512:int7", "-1,2", "8,512:"])
def test_an_unreadable_input_spec_is_refused(text):
    with pytest.raises(UserError, match="input"):
        InputSpec.parse(text)


def test_profile_files_are_named_after_the_models_module_or_file():
    assert model_name("studies/models/acoustic.py:build") == "acoustic"
    assert model_name("mypkg.models.asr:build") == "asr"
    with pytest.raises(UserError, match="MODULE:FACTORY"):
        model_name("acoustic")


# -- the command line --------------------------------------------------------------------------------

def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "cutsearch", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": path})


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_plan_command_writes_the_suite_where_studies_live(tmp_path, private_dirs):
    studies, _ = private_dirs
    proc = _cli("plan", str(FIXTURE), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    suite = studies / "acoustic-suite.toml"
    assert list(load_layers(suite)) == [Shape.layer(s).slug for s in (FC1, FC2, OUT)]
    assert "skipped 4096x1024x80 f16 +bias (input)" in proc.stdout
    assert "cutsearch search --m 4096 --n 4096 --k 1024 --dtype f16 --bias" in proc.stdout


def test_plan_command_on_a_missing_profile_is_one_line(tmp_path):
    _one_line_error(_cli("plan", "nope.json", cwd=tmp_path), "profile nope.json does not exist")


@pytest.fixture
def models(tmp_path) -> Path:
    (tmp_path / "models.py").write_text(  # torch imported inside: the import errors are testable without it
        "NOT_A_FACTORY = 3\n"
        "def dict_factory():\n    return {'fc': 1}\n"
        "def no_linear():\n    import torch\n    return torch.nn.Sequential(torch.nn.ReLU())\n"
        "def mlp():\n    import torch\n"
        "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))\n"
        "def broken():\n    raise ValueError('no config for this size')\n")
    (tmp_path / "needs_dep.py").write_text("import not_a_real_dependency\n")
    return tmp_path


@pytest.mark.parametrize("spec, needles", [
    ("nonexistent:build", ["cannot import nonexistent", "no module named 'nonexistent'"]),
    ("missing.py:build", ["model file missing.py does not exist"]),
    ("needs_dep.py:build", ["importing needs_dep.py failed", "not_a_real_dependency"]),
    ("models.py:absent", ["models.py has no 'absent'"]),
    ("models.py:NOT_A_FACTORY", ["is a int, not a function"]),
    ("models", ["MODULE:FACTORY"]),
])
def test_a_model_that_cannot_be_loaded_is_one_line_and_exit_2(models, spec, needles):
    _one_line_error(_cli("profile", spec, "--input-shape", "2,16", cwd=models), *needles)


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch (CPU is enough)")
@pytest.mark.parametrize("spec, needles", [
    ("models.py:dict_factory", ["returned a dict, not a torch.nn.Module"]),
    ("models.py:no_linear", ["no nn.Linear layer"]),
    ("models.py:broken", ["models.py:broken() failed: ValueError: no config for this size (models.py:"]),
    ("models:mlp", []),  # importable as a module from the working directory; stops at the GPU check
])
def test_a_factory_that_does_not_give_a_model_is_one_line_and_exit_2(models, spec, needles):
    if not needles and _cuda_here():
        pytest.skip("this machine has a GPU: the model would run")
    _one_line_error(_cli("profile", spec, "--input-shape", "2,16", cwd=models), *(needles or ["no CUDA GPU"]))


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch (CPU is enough)")
def test_profiling_without_cuda_is_one_line_and_exit_2(models):
    if _cuda_here():
        pytest.skip("this machine has a GPU")
    _one_line_error(_cli("profile", "models.py:mlp", "--input-shape", "2,16", cwd=models),
                    "no CUDA GPU is visible to torch")


@pytest.mark.parametrize("args, needle", [
    (["--input-shape", "2,x"], "cannot read input shape '2,x'"),
    ([], "give the model's input as --input-shape"),
    (["--input-shape", "2,16", "--dtype", "f32"], "--dtype f32"),
    (["--input-shape", "2,16", "--name", "../x"], "--name '../x' must be letters"),
])
def test_bad_profile_options_are_one_line(models, args, needle):
    _one_line_error(_cli("profile", "models.py:mlp", *args, cwd=models), needle)


@pytest.mark.parametrize("args, needle", [
    ([], "give the exported kernels as --exports DIR"),
    (["--exports", "nowhere"], "export directory nowhere does not exist"),
    (["--exports", "models.py"], "models.py is a file: give the directory `cutsearch export` wrote"),
])
def test_apply_without_usable_exports_is_one_line(models, args, needle):
    _one_line_error(_cli("apply", "models.py:mlp", "--input-shape", "2,16", *args, cwd=models), needle)


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch (CPU is enough)")
def test_a_forward_pass_that_raises_on_the_inputs_is_one_user_error():
    import torch

    from cutsearch.profiler import forward

    model = torch.nn.Sequential(torch.nn.Linear(16, 32))
    with pytest.raises(UserError) as caught:
        forward(model, (torch.randn(2, 8),))
    message = str(caught.value)
    assert message.startswith("the forward pass failed with --input-shape 2,8: RuntimeError:")
    assert "\n" not in message


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch (CPU is enough)")
def test_profile_bookkeeping_on_a_fake_clock(monkeypatch):
    """Every Linear call is seen, with its M, N, K; a module called twice counts two calls;
    one never called is listed. The clock is fake: this checks bookkeeping, not timing."""
    import time
    import types

    import torch

    from cutsearch import profiler

    class Event:
        def __init__(self, enable_timing=False):
            self.t = 0.0

        def record(self, stream=None):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(name="fake", major=9, minor=0))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.unused = torch.nn.Linear(8, 16), torch.nn.Linear(2, 2)
            self.shared = torch.nn.Linear(16, 16, bias=False)

        def forward(self, x):
            return self.shared(torch.relu(self.shared(self.up(x))))

    prof = profiler.profile(Net(), (torch.randn(3, 5, 8),), name="net", warmup=1, reps=3)
    rows = {r.name: r for r in prof.rows}
    assert rows["up"].shape == Shape(15, 16, 8, "f32", True) and rows["up"].calls == 1
    assert rows["shared"].shape == Shape(15, 16, 16, "f32", False) and rows["shared"].calls == 2
    assert prof.not_called == ("unused",)
    assert prof.forward["reps"] == 3 and prof.latency["reps"] == 3
    assert 0 < prof.linear_share <= 1


@functools.cache
def _cuda_here() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                           capture_output=True, timeout=300)
    return probe.returncode == 0
