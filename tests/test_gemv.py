"""The gemv kernel (templates/gemv.cu) for a few rows of x: its place in the space and the
search, built by nvcc in CI, and checked against float64 on a GPU.

Without a GPU the search runs on the cost model (ModelEvaluator) or on the fake worker of
tests/fakes.py; the kernels are real nvcc builds.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import re
import time
from pathlib import Path

import optuna
import pytest

import cutsearch
from cutsearch import codegen
from cutsearch.compiler import local_compiler
from cutsearch.console import _config_line
from cutsearch.evaluator import GpuEvaluator, ModelEvaluator, ReplayEvaluator, read_recording
from cutsearch.export import export
from cutsearch.outcome import Measurement
from cutsearch.pool import WorkerProcess
from cutsearch.search import search
from cutsearch.space import (GEMV_MAX_M, GEMV_PARAM, GEMV_SHAPES, GEMV_SPLITS, Knobs, Space, gemv_configs, gemv_shape,
                             gemv_splits, invalid_reason, kernel_problem, knob_grid)
from cutsearch.workspace import Workspace
from tests import fakes
from tests.harness import build_harness

Layer = cutsearch.Layer
ROOT = Path(__file__).resolve().parent.parent


def test_the_gemv_kernel_serves_a_few_rows_of_any_k():
    assert len(gemv_configs(Layer(m=1, n=4096, k=4096))) == len(GEMV_SHAPES)
    # A K shorter than a warp's pass: the shapes' loads are cut to the one K needs (gemv_loads).
    short = Layer(m=GEMV_MAX_M, n=7, k=8, dtype="bf16", activation="silu")
    assert [gemv_shape(c, short.dtype) for c in gemv_configs(short)] == [(1, 1), (2, 1), (4, 1)]
    assert gemv_configs(Layer(m=GEMV_MAX_M + 1, n=4096, k=4096)) == ()
    # x's rows need not be whole 16-byte vectors: x is read where it lies, W padded once when bound.
    for layer in (Layer(m=2, n=4096, k=4100), Layer(m=2, n=4096, k=4100, input="padded")):
        kp = kernel_problem(layer, gemv_configs(layer)[0])
        assert (kp.pad_k, kp.pad_n, len(gemv_configs(layer))) == (4104, 4096, len(GEMV_SHAPES))
        # No copy of x, no row views: only how many warps share a row's K.
        assert knob_grid(gemv_configs(layer)[0], layer) == [Knobs(splits=s) for s in GEMV_SPLITS]
    assert not Space(Layer(m=1, n=64, k=64), gemv=False).gemv_configs()


def test_a_gemv_config_is_valid_only_for_its_own_layer():
    layer = Layer(m=3, n=1000, k=512, dtype="bf16", bias=True, activation="gelu")
    configs = gemv_configs(layer)
    # K = 512 is one pass of a warp of 2 loads of 8 bf16 a lane: more would read past K, so the
    # shapes of 4 and 8 are cut to 2, and no warp would be left a share of K.
    assert [gemv_shape(c, layer.dtype) for c in configs] == [(1, 2), (2, 2), (4, 2)]
    assert all(invalid_reason(layer, c) is None and c.gemv for c in configs)
    assert all(knob_grid(c, layer) == [Knobs()] for c in configs)
    # 4096 is 8 passes of 2 loads and 4 of 4; 8 loads a lane are never split (gemv_splits).
    wide = dataclasses.replace(layer, k=4096)
    assert [gemv_shape(c, wide.dtype) for c in gemv_configs(wide)] == list(GEMV_SHAPES)
    assert [[k.splits for k in knob_grid(c, wide)] for c in gemv_configs(wide)] == [
        [1, 2, 4, 8] if loads == 2 else [1, 2, 4] if loads == 4 else [1] for _, loads in GEMV_SHAPES]
    one_row = configs[0].to_dict()  # 8 rows of W a block, one a warp
    assert _config_line(one_row, {}).endswith(": 3 rows of x, 8 of W a block (1 a warp), K in steps of 512")
    assert "2 of W a block (1 a warp, each row's K shared by 4 warps)" in _config_line(one_row, {"splits": 4})
    assert "at most 4 rows" in invalid_reason(Layer(m=5, n=1000, k=512), configs[0])
    assert "outside the space" in invalid_reason(Layer(m=2, n=1000, k=512, dtype="bf16"), configs[0])  # tile_m 3
    assert "outside the space" in invalid_reason(layer, gemv_configs(wide)[1])  # 4 loads a lane, for K = 512
    for c in configs:  # through Optuna's parameters and back, as a study stores it
        assert Space.config_from_params(Space.params_from_config(c)) == c
        assert set(Space.params_from_config(c)) == {GEMV_PARAM}


def _study(layer: Layer, trials: int, tmp_path, name: str = "s"):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/study.db")
    result = search(layer, evaluator=ModelEvaluator(), storage=storage, study_name=name, trials=trials, batch=8)
    return result, optuna.load_study(study_name=name, storage=storage)


def test_a_study_measures_each_gemv_config_once_first_then_samples_cutlass(tmp_path):
    layer = Layer(m=2, n=4096, k=4096, bias=True)
    result, study = _study(layer, 20, tmp_path)
    gemv = {c.key for c in gemv_configs(layer)}
    told = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    keys = [t.user_attrs["config"] for t in told]
    assert set(keys[:len(gemv)]) == gemv and len(keys) == 20
    assert not gemv & set(keys[len(gemv):])  # never asked again: the sampler proposes CUTLASS configs
    assert all(set(t.params) == {GEMV_PARAM} for t in told[:len(gemv)])
    assert all(GEMV_PARAM not in t.params and "tile_m" in t.params for t in told[len(gemv):])
    # Resumed, the study queues none of them again.
    result, study = _study(layer, 26, tmp_path)
    keys = [t.user_attrs["config"] for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(keys) == 26 and sorted(k for k in keys if k in gemv) == sorted(gemv)
    assert result.best is not None


def test_a_gemv_trial_a_stopped_run_left_unfinished_is_measured_when_the_study_resumes(tmp_path):
    from cutsearch import search as search_mod

    layer = Layer(m=2, n=4096, k=4096, bias=True)
    _, study = _study(layer, 1, tmp_path)  # the first gemv config measured, the rest still queued
    trial = study.ask()  # the next queued gemv config, taken by a run that is then stopped
    trial.suggest_categorical(GEMV_PARAM, search_mod.gemv_distribution(study, Space(layer)).choices)
    lost = Space.config_from_params(trial.params).key
    study._storage.set_trial_user_attr(trial._trial_id, "failure", {"kind": "interrupted", "message": "", "log": ""})
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    # Queued again like any interrupted config: behind what was queued (the warm start of 8), not lost.
    _, study = _study(layer, len(GEMV_SHAPES) + 8 + 1, tmp_path)
    measured = [t.user_attrs["config"] for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    assert set(c.key for c in gemv_configs(layer)) <= set(measured) and measured.count(lost) == 1


def test_a_layer_of_more_rows_has_no_gemv_trial(tmp_path):
    _, study = _study(Layer(m=5, n=1024, k=1024), 10, tmp_path)
    assert all(GEMV_PARAM not in t.params for t in study.get_trials())


# Each row count of x, both dtypes, each activation, y and y^T, with a K long enough for every
# shape; and a short K, whose shapes have one load a lane. A build of 2 rows in bf16 with a bias
# and ReLU once spilled 16 bytes (nvcc 13.0), while the 4-row GELU builds did not.
BUILT_LAYERS = [Layer(m=m, n=1000, k=2056, dtype=dtype, bias=True, activation=act, output=out)
                for m, act, out in ((1, "none", "contiguous"), (2, "relu", "transposed"), (3, "silu", "contiguous"),
                                    (4, "gelu", "transposed"))
                for dtype in ("f16", "bf16")]
BUILT_LAYERS += [Layer(m=4, n=1000, k=187, bias=True, activation="gelu", output="transposed"),
                 Layer(m=1, n=1000, k=93, dtype="bf16", activation="silu")]


@pytest.fixture(scope="module")
def gemv_builds():
    sources = {}
    for layer in BUILT_LAYERS:
        for config in gemv_configs(layer):
            sources[(layer, config)] = codegen.render(layer, config)
    keys = list(sources)
    built = dict(local_compiler(jobs=8).compile_many(list(enumerate(sources.values()))))
    return {keys[i]: (sources[keys[i]], b) for i, b in built.items()}


@pytest.mark.nvcc
def test_every_gemv_config_builds_without_spills_and_exports_the_c_abi(gemv_builds):
    assert len(gemv_builds) == 8 * len(GEMV_SHAPES) + 2 * 3
    for (layer, config), (source, built) in gemv_builds.items():
        key = (layer.slug, config.key)
        assert hasattr(built, "library"), (key, built)
        assert built.ptxas.spill_bytes == 0 and built.ptxas.stack_bytes == 0, (key, built.ptxas)
        assert not re.search(r'#include\s*[<"]cut(e|lass)/', source.code), key  # no CUTLASS headers
        lib = ctypes.CDLL(str(built.library))
        lib.cs_kernel_name.restype = ctypes.c_char_p
        lib.cs_workspace_size.restype = ctypes.c_size_t
        lib.cs_workspace_size.argtypes = [ctypes.c_void_p]
        assert lib.cs_abi_version() == 3
        assert lib.cs_kernel_name().decode() == source.operation_name
        assert lib.cs_workspace_size(None) == 0
        lib.cs_error.restype = ctypes.c_char_p
        most = max(gemv_splits(gemv_shape(config, layer.dtype)[1]))
        for splits in (0, 3, 16, most * 2):  # a row's K is shared by warps of one block, of 8
            handle = ctypes.c_void_p()
            assert lib.cs_create(ctypes.byref(handle), 1, 64, 64, 64, 64, 0, 0, 1, splits, 0, 0, 0) == 1
            assert not handle.value
            assert f"splits ({splits}) must divide {most}," in lib.cs_error(None).decode()


X_ROWS_HARNESS = ROOT / "tests" / "gemv" / "x_rows_harness.cu"


def _before_a_guard_page(nbytes: int):
    """A uint16 buffer of nbytes (a multiple of 16) that ends where an unreadable page begins:
    a read past it is a segmentation fault."""
    import mmap

    import numpy as np

    page = mmap.PAGESIZE
    size = -(-nbytes // page) * page
    mem = mmap.mmap(-1, size + page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base + size, page, 0) == 0, ctypes.get_errno()  # PROT_NONE
    return np.frombuffer(mem, dtype=np.uint16, count=nbytes // 2, offset=size - nbytes)


def _read_rows_of_x(library: str, tile_m: int) -> None:
    import numpy as np

    lib = ctypes.CDLL(library)
    lib.test_x_rows.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p]
    rng = np.random.default_rng(tile_m)
    for k in (1, 3, 7, 8, 9, 37, 334, 999, 1000):
        vectors = -(-k // 8)
        for m in sorted({tile_m, 1, 2 * tile_m + 1, 7}):
            # x as it lies, and padded (where K is not already), from the start of a vector or
            # from any element into one.
            for x_ld, off in [(x_ld, off) for x_ld in sorted({k, vectors * 8}) for off in (0, 1, 5, 7)]:
                x = rng.integers(0, 0x7000, size=(m, x_ld), dtype=np.uint16)  # finite f16 bits
                store = _before_a_guard_page(-(-(off + m * x_ld) // 8) * 16)  # to the end of x's last vector
                store[:] = 0x7C00
                store[off:off + m * x_ld] = x.ravel()
                out = np.zeros((m, vectors * 8), dtype=np.uint16)
                assert lib.test_x_rows(store[off:].ctypes.data, m, x_ld, k, out.ctypes.data) == 0
                want = np.zeros_like(out)
                want[:, :k] = x[:, :k]
                assert (out == want).all(), (k, m, x_ld, off)


@pytest.mark.nvcc
@pytest.mark.parametrize("tile_m", range(1, GEMV_MAX_M + 1))
def test_the_gemv_kernel_reads_each_row_of_x_where_it_lies(tile_m, kernel_cache):
    """The kernel's own reading of unaligned rows of x (templates/gemv.cu's x_rows and x_vector),
    run on the CPU: at every alignment a row can start at, each lane's vector holds the row's
    elements and zeros past K, never the next row's, and no lane reads past x's last vector (an
    unreadable page lies there; the reads run in a child process, which it would kill). x's bytes
    past its last row are infinities (f16). Rows at a padded pitch are read through it too, and x
    may start at any element of a vector (cs_run dispatches there by the same x_vectors)."""
    import multiprocessing

    layer = Layer(m=tile_m, n=64, k=64)
    built = build_harness(X_ROWS_HARNESS, kernel_cache, after=codegen.render(layer, gemv_configs(layer)[0]))
    child = multiprocessing.get_context("fork").Process(target=_read_rows_of_x, args=(str(built.library), tile_m))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0, f"the reads failed (exit code {child.exitcode}; -11: past x's last vector)"


@pytest.mark.nvcc
@pytest.mark.parametrize("k", [64, 61])
def test_a_gemv_winner_exports_without_cutlass(tmp_path, monkeypatch, k):
    """The fake worker measures real gemv builds, each faster than the last (tests/fakes.py)."""
    layer = Layer(m=2, n=64, k=k)
    monkeypatch.setenv(fakes.EPOCH_ENV, str(time.time() - 995))
    ws = Workspace(tmp_path)
    evaluator = GpuEvaluator(cache_dir=tmp_path / "kernels", jobs=2, worker=WorkerProcess(serve=fakes.serve))
    try:
        result = cutsearch.tune(layer, trials=2, study="g", evaluator=evaluator, batch=2, workspace=ws,
                                command="pytest")
    finally:
        evaluator.close()
    assert result.best is not None and result.best.config.gemv
    assert _config_line(result.best.config.to_dict(), {}).startswith("gemv kernel on CUDA cores: 2 rows of x, ")
    target = export("g", out=tmp_path / "export", workspace=ws)
    meta = json.loads((target / "meta.json").read_text())
    assert meta["backend"] == "gemv" and meta["kernel"].startswith("cutsearch_gemv_")
    assert meta["transforms"]["pad_k"] == 64  # W's rows padded to whole vectors, once, when bound
    assert "set(CS_NEEDS_CUTLASS OFF)" in (target / "CMakeLists.txt").read_text()
    loaded = cutsearch.load(target, capability=(9, 0))
    assert loaded.backend == "gemv" and loaded.via != "torch"
    # x as it lies, or at the kernel's pitch where K leaves its rows unaligned: neither is copied.
    assert loaded.kernel_x_pitch == (64 if k % 8 else None)
    with pytest.raises(cutsearch.UserError, match="built for sm_90a"):
        cutsearch.load(target, capability=(8, 0))


# -- on a GPU ------------------------------------------------------------------------------

GPU_LAYERS = [
    Layer(m=1, n=4096, k=4096, dtype="f16", bias=True),
    Layer(m=3, n=1000, k=520, dtype="bf16", bias=True, activation="gelu", output="transposed"),
    Layer(m=4, n=333, k=4100, dtype="f16", activation="silu", input="padded", output="padded"),
    Layer(m=2, n=77, k=8, dtype="bf16", bias=True, activation="relu"),
    # x's rows not 16-byte aligned: each row starts at its own element of a vector.
    Layer(m=4, n=1001, k=999, dtype="f16", bias=True, activation="relu"),
    Layer(m=3, n=300, k=37, dtype="bf16", activation="gelu", output="transposed"),
    Layer(m=1, n=513, k=4095, dtype="f16", bias=True),
    Layer(m=2, n=64, k=3, dtype="bf16", bias=True, activation="silu"),
]


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.parametrize("layer", GPU_LAYERS, ids=[l.slug for l in GPU_LAYERS])
def test_every_gemv_config_computes_the_layer(layer):
    """The worker checks each build against float64 before it times it: a wrong one is a failure."""
    evaluator = GpuEvaluator(cache_dir=cutsearch.cache.default_cache_dir())
    try:
        evaluations = list(evaluator.evaluate(layer, list(gemv_configs(layer))))
    finally:
        evaluator.close()
    assert len(evaluations) == len(gemv_configs(layer))
    for ev in evaluations:
        assert isinstance(ev.outcome, Measurement), (ev.config.key, ev.outcome)
        assert ev.outcome.rel_error < 1e-2 and ev.outcome.median_us > 0, ev.config.key
        # A variant the worker found wrong would be dropped from the timings: none was.
        assert [k for k, _ in ev.outcome.variants] == knob_grid(ev.config, layer), ev.config.key


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.parametrize("k", [512, 509])
def test_a_searched_gemv_kernel_computes_other_row_counts_from_its_export(tmp_path, k):
    torch = pytest.importorskip("torch")
    layer = Layer(m=3, n=1000, k=k, dtype="bf16", bias=True, activation="gelu")
    ws = Workspace(tmp_path)
    result = cutsearch.tune(layer, trials=len(gemv_configs(layer)), study="g", evaluator="gpu", workspace=ws,
                            command="pytest gemv")
    assert result.best is not None and result.best.config.gemv  # the first trials are the gemv configs
    target = export("g", out=tmp_path / "export", workspace=ws)
    gen = torch.Generator(device="cuda").manual_seed(7)
    w = torch.randn(1000, k, device="cuda", generator=gen).bfloat16()
    b = torch.randn(1000, device="cuda", generator=gen).bfloat16()
    fc = cutsearch.load(target, any_m=True).prepare(w, b)
    assert fc.via != "torch"
    for m in (3, 1, 7, 64):  # its tile's rows, fewer, and more: the grid covers the rest of M
        x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        want = torch.nn.functional.gelu(x.double() @ w.double().T + b.double())
        got = fc(x)
        torch.cuda.synchronize()
        assert (torch.linalg.norm(got.double() - want) / torch.linalg.norm(want)).item() < 1e-2, m
    # Where K leaves rows unaligned, a row's last vector runs into the next row: an infinity there
    # must not reach the row before it (W's padding is zero, and 0 x inf is NaN).
    x = torch.randn(3, k, device="cuda", generator=gen).bfloat16()
    x[1] = float("inf")
    got = fc(x)
    torch.cuda.synchronize()
    want = torch.nn.functional.gelu(x.double() @ w.double().T + b.double())
    for row in (0, 2):
        assert torch.isfinite(got[row]).all(), row
        assert (torch.linalg.norm(got[row].double() - want[row]) / torch.linalg.norm(want[row])).item() < 1e-2, row


# -- recorded GPU data ------------------------------------------------------------------------

RECORDED = ROOT / "studies" / "recorded"


@pytest.mark.parametrize("study, winner, splits", [
    ("h200-2026-12-06-gemv/v_m1", "1x8x512", 1), ("h200-2026-12-06-gemv/v_m1_wide", "1x8x1024", 1),
    ("h200-2026-12-06-gemv/drawn/r12_1", None, None),
    # The same layer on an H100, once warps could share a row's K: 8 of them a row won.
    ("h100-2026-12-06-gemv-split/r12_1", "2x16x512", 8),
    # K shorter than a warp's pass, its shapes cut to one load a lane: a gemv config wins 2x64x93,
    # and CUTLASS still wins 4x13632x187.
    ("h100-2026-12-06-gemv-short-k/r21_0", "2x16x256", 1), ("h100-2026-12-06-gemv-short-k/random0", None, None)])
def test_a_replayed_recorded_study_measures_the_gemv_configs_first(tmp_path, study, winner, splits):
    """Recorded on one GPU: replaying it measures nothing. Where the gemv kernel's best trial was
    the fastest, the replayed search finds it, with the run-time split it measured fastest; where
    split-K's CUTLASS kernel was (r12_1 before gemv splits), that."""
    path = RECORDED / f"{study}.json"
    layer, recorded, _ = read_recording(path)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/replay.db")
    result = search(layer, evaluator=ReplayEvaluator.load(path, layer), storage=storage, study_name="r", trials=12,
                    batch=6)
    told = optuna.load_study(study_name="r", storage=storage).get_trials()
    assert {t.user_attrs["config"] for t in told[:len(gemv_configs(layer))]} == {c.key for c in gemv_configs(layer)}
    # The GPU the recording names, which its directory does too: the replay's note says it.
    assert result.gpu == json.loads(path.read_text())["gpu"] and study[:4].upper() in result.gpu
    fastest = min((e for e in recorded if isinstance(e.outcome, Measurement)), key=lambda e: e.outcome.median_us)
    gemv_best = min(e.outcome.median_us for e in recorded if e.config.gemv)
    assert result.best.config.gemv == (winner is not None)
    if winner is not None:
        assert result.best.config == fastest.config and result.best.config.key.startswith(winner)
        assert result.best.evaluation["measurement"]["knobs"]["splits"] == splits
    else:
        assert result.best.median_us < gemv_best  # a CUTLASS config the sampler reached beat every gemv one
