"""End to end on a Hopper GPU: search a small layer, then call the kept kernel from a fresh process.

Skipped without torch, a Hopper GPU or nvcc. Each test compiles at most four kernels, in
parallel (eight in all: a few minutes with 16 nvcc jobs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cutsearch
from cutsearch import loader, persist
from cutsearch.evaluator import GpuEvaluator
from cutsearch.outcome import Measurement
from cutsearch.cache import default_cache_dir
from cutsearch.space import invalid_reason, kernel_problem

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

ROOT = Path(__file__).resolve().parent.parent

# Loads studies/<study>/best as an application would, with only ctypes, torch and meta.json,
# and prints the relative Frobenius error of y against a float64 reference. The C ABI (loader.ABI_VERSION):
# cs_create(&h, M, N, K, pad_n, pad_k, device, raster, swizzle, splits, decomposition, reduction, io).
CALL_BEST = r"""
import ctypes, json, sys
from pathlib import Path

import torch

best, abi = Path(sys.argv[1]), int(sys.argv[2])
meta = json.loads((best / "meta.json").read_text())
layer, knobs, tr = meta["layer"], meta["knobs"], meta["transforms"]
m, n, k = layer["M"], layer["N"], layer["K"]
pad_n, pad_k = tr["pad_n"], tr["pad_k"]
dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer["dtype"]]

lib = ctypes.CDLL(str(best / "kernel.so"))
vp, i = ctypes.c_void_p, ctypes.c_int
assert lib.cs_abi_version() == abi, f"library has C ABI {lib.cs_abi_version()}, this script speaks {abi}"
lib.cs_create.argtypes = [ctypes.POINTER(vp), i, i, i, i, i, i, i, i, i, i, i, i]
lib.cs_create.restype = i
lib.cs_workspace_size.argtypes = [vp]
lib.cs_workspace_size.restype = ctypes.c_size_t
lib.cs_bind.argtypes = [vp, vp, vp, vp, vp, vp]
lib.cs_bind.restype = i
lib.cs_run.argtypes = [vp, vp]
lib.cs_run.restype = i
lib.cs_error.argtypes = [vp]
lib.cs_error.restype = ctypes.c_char_p
lib.cs_destroy.argtypes = [vp]
lib.cs_destroy.restype = None

gen = torch.Generator(device="cuda").manual_seed(1234)  # not the inputs the search checked
x = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen) / k ** 0.5
b = torch.randn(n, device="cuda", dtype=dtype, generator=gen) if layer["bias"] else None
# W and b are laid out once, as an export would: W as [pad_n, pad_k], b as [pad_n], zero-padded.
w_prepared = torch.zeros(pad_n, pad_k, device="cuda", dtype=dtype)
w_prepared[:n, :k] = w
b_prepared = None
if b is not None:
    b_prepared = torch.zeros(pad_n, device="cuda", dtype=dtype)
    b_prepared[:n] = b
y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)

handle = vp()
assert lib.cs_create(ctypes.byref(handle), m, n, k, pad_n, pad_k, torch.cuda.current_device(),
                     knobs["raster"], knobs["swizzle"], knobs["splits"], knobs["decomposition"],
                     knobs.get("reduction", 0), 0) == 0, "cs_create"  # io 0: contiguous x and y
workspace = torch.empty(max(1, lib.cs_workspace_size(handle)), dtype=torch.uint8, device="cuda")
if lib.cs_bind(handle, x.data_ptr(), w_prepared.data_ptr(), None if b_prepared is None else b_prepared.data_ptr(),
               y.data_ptr(), workspace.data_ptr()):
    sys.exit("cs_bind: " + lib.cs_error(handle).decode())
stream = torch.cuda.current_stream().cuda_stream
for _ in range(2):  # a second call catches a workspace that is not reset between calls
    if lib.cs_run(handle, stream):
        sys.exit("cs_run: " + lib.cs_error(handle).decode())
torch.cuda.synchronize()
lib.cs_destroy(handle)

ref = x.double() @ w.double().T
if b is not None:
    ref += b.double()
act = {"none": lambda t: t, "relu": torch.nn.functional.relu, "gelu": torch.nn.functional.gelu,
       "silu": torch.nn.functional.silu}[layer["activation"]]
ref = act(ref)
err = float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref))
print(json.dumps({"rel_error": err, "nan": bool(torch.isnan(y).any())}))
"""


@pytest.mark.parametrize("layer, trials", [
    # Bias and ReLU: the fallback's fused cuBLASLt races the kernels at the end.
    (cutsearch.Layer(m=256, n=1024, k=1024, dtype="f16", bias=True, activation="relu"), 4),
    # Unaligned K and N (padding), bf16, and a fused bias + GELU epilogue.
    (cutsearch.Layer(m=300, n=1001, k=999, dtype="bf16", bias=True, activation="gelu"), 2),
], ids=["256x1024x1024-f16-bias-relu", "300x1001x999-bf16-bias-gelu"])
def test_gpu_search_keeps_a_best_kernel_that_computes_the_layer(layer, trials, private_dirs):
    studies = private_dirs[0]
    study = f"gpu-{layer.slug}"
    result = cutsearch.tune(layer, trials=trials, evaluator="gpu", study=study, command="pytest gpu end-to-end")

    assert result.source == "measured"
    assert result.trials == trials
    assert result.best is not None, f"no candidate ran correctly: {result.failures}"
    assert result.best.median_us > 0 and result.cublas_us > 0
    assert result.new_compiles >= 1

    summary = json.loads((studies / "results" / f"{study}.json").read_text())
    assert summary["gpu"] and "H" in summary["gpu"]  # H100 / H200
    assert summary["best_us"] == result.best.median_us
    assert summary["speedup"] == pytest.approx(result.cublas_us / result.best.median_us)
    assert summary["toolchain"]["nvcc"] and summary["toolchain"]["cutlass"]
    # The search ended with a race of its fastest kernels and cuBLAS, and the race decided.
    assert "race of" in result.verdict.basis and summary["verdict"] == result.verdict.basis
    assert (summary["fallback_us"] is not None) is (layer.activation == "relu"), summary
    assert summary["ships"] in ("the best kernel", "cuBLAS", "the fallback's fused cuBLASLt")

    best = studies / study / "best"
    meta = persist.verify_dir(best)
    assert {"kernel.so", "kernel.cu"} <= set(meta["files"])
    assert meta["config"] == result.best.config.to_dict()
    assert meta["trial"] == result.best.number and meta["kernel_us"] == result.best.median_us
    kp = kernel_problem(layer, result.best.config)
    assert meta["transforms"] == {"swap_ab": result.best.config.swap_ab, "pad_n": kp.pad_n, "pad_k": kp.pad_k}
    assert meta["knobs"] == result.best.evaluation["measurement"]["knobs"]

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    call = subprocess.run([sys.executable, "-c", CALL_BEST, str(best), str(loader.ABI_VERSION)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert call.returncode == 0, call.stderr
    checked = json.loads(call.stdout.strip().splitlines()[-1])
    assert checked["nan"] is False
    assert checked["rel_error"] < 1e-2


CLUSTERED = (
    cutsearch.Config(tile_m=128, tile_n=64, tile_k=64, cluster_m=2, kernel_schedule="cooperative",
                     epilogue_schedule="tma", swap_ab=True),  # bias along the clustered M: Sm90ColBroadcast
    cutsearch.Config(tile_m=128, tile_n=64, tile_k=64, cluster_n=2, kernel_schedule="pingpong",
                     epilogue_schedule="tma"),  # bias along the clustered N: Sm90RowBroadcast
)


def test_clustered_kernels_with_fused_bias_compute_the_layer():
    """The interface sizes the bias broadcast for the cluster's tile, not the CTA's: still correct?

    codegen passes CUTLASS the cluster tile; the collective builders get the CTA tile, but the
    epilogue visitor tree's EpilogueDescriptor gets the cluster tile (twice the CTA along the
    clustered mode), so the bias buffer is sized and partitioned for a larger tile than runs.
    Both kernels compile in parallel, then the worker checks each against float64.
    """
    layer = cutsearch.Layer(m=512, n=1024, k=1024, bias=True, activation="relu")
    assert all(invalid_reason(layer, c) is None for c in CLUSTERED)
    evaluator = GpuEvaluator(cache_dir=default_cache_dir())
    try:
        evaluations = {ev.config.key: ev for ev in evaluator.evaluate(layer, list(CLUSTERED))}
    finally:
        evaluator.close()
    assert set(evaluations) == {c.key for c in CLUSTERED}
    for key, ev in evaluations.items():
        assert isinstance(ev.outcome, Measurement), (key, ev.outcome)
        assert ev.outcome.rel_error < 1e-2, key
