"""Export and load, without a GPU: a study whose best kernel was really compiled by nvcc.

The kernel is the small test kernel of tests/fault (it exports the real C ABI and builds in
seconds); the GPU worker is the fake of tests/fakes.py. Everything else is the real pipeline:
tuner, Compiler, persisted best, export, hash and arch checks, and a C++ program linked
against the exported library.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import optuna
import pytest

import cutsearch
from cutsearch import codegen
from cutsearch.errors import UserError
from cutsearch.evaluator import GpuEvaluator
from cutsearch.export import HEADER, LIBRARY, _fallback_export, _write, export
from cutsearch.pool import WorkerProcess
from cutsearch.space import Config, transforms
from cutsearch.storage import open_storage
from cutsearch.workspace import Workspace
from tests import fakes

pytestmark = pytest.mark.nvcc

LAYER = cutsearch.Layer(m=64, n=64, k=64)


def _study(root: Path, name: str, *, speedup_high: bool, monkeypatch, layer: cutsearch.Layer = LAYER) -> Workspace:
    """A study of `layer` whose kernels are built for real and measured by the fake worker."""
    monkeypatch.setattr(codegen, "render", lambda layer, config: fakes.fault_source("correct", tag=config.key))
    # The fake times a kernel at max(1, 1000 - (now - epoch)) µs against 50 µs for cuBLAS. A fast
    # study starts at the 1 µs floor: times still falling made a race's kernel stray past
    # verdict.ASTRAY from its trial (1.4 against 1.9 µs), and the race no longer decided.
    monkeypatch.setenv(fakes.EPOCH_ENV, str(time.time() - (1000 if speedup_high else 0)))
    ws = Workspace(root)
    evaluator = GpuEvaluator(cache_dir=root / "kernels", jobs=2, worker=WorkerProcess(serve=fakes.serve))
    try:
        cutsearch.tune(layer, trials=2, study=name, evaluator=evaluator, batch=2, workspace=ws, command="pytest")
    finally:
        evaluator.close()
    return ws


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("studies")
    try:
        ws = _study(root, "fast", speedup_high=True, monkeypatch=mp)
        target = export("fast", out=root / "export", workspace=ws)
    finally:
        mp.undo()
    return ws, target


def test_export_writes_a_self_contained_directory_with_every_hash(exported):
    _, target = exported
    meta = json.loads((target / "meta.json").read_text())
    assert meta["backend"] == "cutlass" and meta["exported_by"] == "cutsearch"
    assert set(meta["files"]) == {"kernel.cu", LIBRARY, HEADER, "CMakeLists.txt", "example.cpp", "README.md"}
    assert meta["layer"] == LAYER.to_dict()
    assert meta["transforms"] == transforms(LAYER, Config.from_dict(meta["config"]), meta["knobs"])
    assert (meta["transforms"]["pad_n"], meta["transforms"]["pad_k"]) == (64, 64)  # 64 is aligned: nothing padded
    assert meta["speedup"] > 1 and meta["timing_us"]["median_us"] < meta["cublas_us"]
    assert meta["arch"] == "sm_90a"
    assert "int cs_create(" in (target / HEADER).read_text()


def test_load_checks_the_architecture_before_loading(exported):
    _, target = exported
    with pytest.raises(UserError, match="built for sm_90a"):
        cutsearch.load(target, capability=(8, 0))
    layer = cutsearch.load(target, capability=(9, 0))  # loads the library: no GPU needed for that
    assert layer.backend == "cutlass" and (layer.m, layer.n, layer.k) == (64, 64, 64)


@pytest.mark.parametrize("damage", ["tamper", "delete"])
def test_a_tampered_or_missing_file_is_refused_before_anything_is_loaded(exported, tmp_path, damage):
    _, target = exported
    copy = tmp_path / "copy"
    shutil.copytree(target, copy)
    lib = copy / LIBRARY
    if damage == "tamper":
        data = bytearray(lib.read_bytes())
        data[len(data) // 2] ^= 0xFF
        lib.write_bytes(bytes(data))
        match = "sha256"
    else:
        lib.unlink()
        match = "missing"
    with pytest.raises(UserError, match=match):
        cutsearch.load(copy, capability=(9, 0))


def test_the_cpp_example_compiles_and_links_against_the_exported_library(exported, tmp_path):
    _, target = exported
    exe = tmp_path / "example"
    # nvcc as the driver: it knows the toolkit's include and library paths, and links cudart.
    proc = subprocess.run(["nvcc", "-std=c++17", str(target / "example.cpp"), f"-I{target}", f"-L{target}",
                           "-lcutsearch_fc", "-o", str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # It runs the layer on a GPU; without one, it stops at the first CUDA call and prints why, in
    # one line (the library here is the test's fake kernel, whose cs_create needs no GPU).
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LD_LIBRARY_PATH": str(target)})
    if ran.returncode == 0:
        assert ran.stdout.startswith("ran "), ran.stdout
    else:
        assert ran.returncode == 1 and re.fullmatch(r"[^\n]*(device|driver)[^\n]*\n", ran.stderr), ran.stderr


def test_export_refuses_a_foreign_directory_and_needs_force_to_replace_its_own(exported, tmp_path):
    ws, target = exported
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not a cutsearch export"):
        export("fast", out=foreign, workspace=ws)
    assert (foreign / "notes.txt").read_text() == "mine"
    with pytest.raises(UserError, match="--force"):
        export("fast", out=target, workspace=ws)
    assert export("fast", out=target, workspace=ws, force=True) == target


def test_a_study_that_never_beat_cublas_exports_a_cublas_fallback(tmp_path, monkeypatch):
    ws = _study(tmp_path, "slow", speedup_high=False, monkeypatch=monkeypatch)
    target = export("slow", out=tmp_path / "export", workspace=ws)
    meta = json.loads((target / "meta.json").read_text())
    assert meta["backend"] == "cublas"
    assert meta["speedup"] == 1.0 and meta["best_kernel_speedup"] < 1
    assert "calls cuBLAS" in meta["fallback_reason"]
    layer = cutsearch.load(target)  # no architecture check: cuBLAS runs anywhere torch does
    assert layer.backend == "cublas"


@pytest.mark.parametrize("stale", ["speedup", "trial"])
def test_the_export_judges_the_kernel_from_the_study_not_from_a_stale_best_directory(tmp_path, monkeypatch, stale):
    """best/meta.json keeps the verdict of when it was written; the study's trials decide."""
    ws = _study(tmp_path, "slow", speedup_high=False, monkeypatch=monkeypatch)
    best = ws.best_dir("slow") / "meta.json"
    meta = json.loads(best.read_text())
    assert meta["speedup"] < 1
    if stale == "speedup":  # as if written before the study's cuBLAS timings moved
        meta.update(speedup=9.9, cublas_us=9.9 * meta["timing_us"]["median_us"])
        reason = "ran at 0.0"
    else:  # a best directory left by another study of the same name
        meta.update(speedup=9.9, trial=999)
        reason = "no measured trial of this study"
    best.write_text(json.dumps(meta))
    target = export("slow", out=tmp_path / "export", workspace=ws)
    exported = json.loads((target / "meta.json").read_text())
    assert exported["backend"] == "cublas" and reason in exported["fallback_reason"]


@pytest.mark.parametrize("outcome", ["lost", "tied", "failed"])
def test_the_export_follows_the_race_that_ended_the_search(tmp_path, monkeypatch, outcome):
    """A kernel whose trials beat cuBLAS but whose race did not (or only by its median, not in
    every round; or that failed its check in the race) ships the fallback; the race's own
    figures go into the export."""
    ws = _study(tmp_path, "fast", speedup_high=True, monkeypatch=monkeypatch)
    study = optuna.load_study(study_name="fast", storage=open_storage(ws.storage_url("fast", None)))
    race = study.user_attrs["race"]
    meta = json.loads((ws.best_dir("fast") / "meta.json").read_text())
    assert meta["trial"] in race["trials"] and meta["speedup"] > 1
    won = export("fast", out=tmp_path / "won", workspace=ws)
    shipped = json.loads((won / "meta.json").read_text())
    assert shipped["backend"] == "cutlass" and "race of" in shipped["verdict"]
    assert shipped["cublas_us"] == statistics.median(race["cublas_us"])
    at = race["trials"].index(meta["trial"])
    assert shipped["kernel_us"] == statistics.median(race["kernel_us"][at])
    # The same study after a race that went the other way (planted figures).
    if outcome == "lost":
        race["kernel_us"] = [[10 * c for c in race["cublas_us"]] if us else us for us in race["kernel_us"]]
        reason = "ran at 0.10x cuBLAS (a race of"
    elif outcome == "tied":  # 0.9x cuBLAS's time in every round but the first, 1.1x in that one
        race["kernel_us"] = [[(1.1 if r == 0 else 0.9) * c for r, c in enumerate(race["cublas_us"])] if us else us
                             for us in race["kernel_us"]]
        rounds = len(race["cublas_us"])
        reason = f"but faster in only {rounds - 1} of its {rounds} rounds: a tie"
    else:
        race["kernel_us"][at] = None
        reason = "did not pass the race"
    study.set_user_attr("race", race)
    target = export("fast", out=tmp_path / "export", workspace=ws)
    exported = json.loads((target / "meta.json").read_text())
    assert exported["backend"] == "cublas" and reason in exported["fallback_reason"]
    assert exported["speedup"] == 1.0
    if outcome == "tied":
        assert exported["best_kernel_speedup"] == pytest.approx(1 / 0.9)


@pytest.mark.parametrize(("activation", "output", "via_library"), [
    ("relu", "contiguous", True), ("gelu", "contiguous", False), ("none", "contiguous", False),
    ("relu", "transposed", False)])
def test_the_loaded_fallback_calls_its_library_where_cublaslt_fuses_the_activation(tmp_path, activation, output,
                                                                                     via_library):
    """cuBLASLt fuses bias and ReLU into the GEMM, where F.linear runs ReLU as a second kernel.
    Where the toolkit lacks cuBLAS's headers, the library is not built and torch runs every call."""
    layer = cutsearch.Layer(m=8, n=64, k=64, bias=True, activation=activation, output=output)
    files, body = _fallback_export(layer, "no kernel was searched", None)
    target = _write(tmp_path / "export", files, body, layer=layer, study="fallback", summary=None)
    meta = json.loads((target / "meta.json").read_text())
    built = LIBRARY in meta["files"]
    assert built or "cublasLt.h" in meta["note"]
    fc = cutsearch.load(target)
    assert fc.backend == "cublas" and (fc.via == LIBRARY) is (via_library and built), fc


def test_a_fused_fallback_that_won_the_race_is_what_the_export_ships(tmp_path, monkeypatch):
    """A ReLU layer whose race the fallback's fused cuBLASLt won (planted figures): the export is
    the fallback, with the race's speedup where its library was built (else torch runs it: 1.00x)."""
    layer = cutsearch.Layer(m=64, n=64, k=64, bias=True, activation="relu")
    ws = _study(tmp_path, "relu", speedup_high=True, monkeypatch=monkeypatch, layer=layer)
    study = optuna.load_study(study_name="relu", storage=open_storage(ws.storage_url("relu", None)))
    race = study.user_attrs["race"]
    kernel_us = min(statistics.median(us) for us in race["kernel_us"] if us)
    study.set_user_attr("race", {**race, "fallback_us": [kernel_us / 2] * len(race["cublas_us"])})
    target = export("relu", out=tmp_path / "export", workspace=ws)
    meta = json.loads((target / "meta.json").read_text())
    assert meta["backend"] == "cublas" and "cuBLASLt with the ReLU fused" in meta["fallback_reason"]
    if LIBRARY in meta["files"]:
        assert meta["fallback_us"] == kernel_us / 2
        assert meta["speedup"] == pytest.approx(statistics.median(race["cublas_us"]) / (kernel_us / 2))
    else:
        assert meta["speedup"] == 1.0 and "fallback_us" not in meta and meta["best_kernel_speedup"] is None
