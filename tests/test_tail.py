"""The views' tail (templates/tail.cuh): built by nvcc in CI, checked on a GPU.

Where P does not divide M, x's row views cover P * (M / P) rows and this kernel computes the last
M mod P of y from x's rows in place, at any alignment, and W's unshifted copy. With integer-valued
data every fp32 sum is exact, so y must equal the float64 product rounded once, bit for bit.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from cutsearch.compiler import CompiledKernel, PtxasReport
from tests.harness import build_harness

HARNESS = Path(__file__).parent / "tail" / "tail_harness.cu"

# (rows, k, n, x_offset, y_pitch): one row to the most a tail has (P - 1 = 7), K below a vector,
# odd and past one staged chunk of 2048 columns, N of one column, of a warp's partial block and
# wide enough for several W rows a warp; x starting at odd elements, y's rows padded.
CASES = [
    (1, 7, 1, 0, 1), (7, 7, 40, 1, 40), (3, 999, 333, 3, 336), (5, 2049, 64, 5, 64), (7, 4099, 1001, 7, 1008),
    (2, 134, 5000, 2, 5000), (6, 3961, 64, 1, 72), (1, 78, 1177, 6, 1177),
]


@pytest.fixture(scope="module")
def harness(kernel_cache) -> CompiledKernel:
    return build_harness(HARNESS, kernel_cache)


@pytest.mark.nvcc
def test_the_tail_kernel_builds_without_spills(harness):
    assert harness.library.is_file()
    assert PtxasReport.parse(harness.log, helpers=True).spill_bytes == 0


def call(harness, torch, rows, k, n, x_offset, y_pitch, dtype, act, with_bias=True):
    """(y with one NaN row around it, the float64 product with bias): x and W integer-valued."""
    lib = ctypes.CDLL(str(harness.library))
    lib.test_tail_rows.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                   ctypes.c_int, ctypes.c_int]
    gen = torch.Generator(device="cuda").manual_seed(rows * k + n)
    pitch = -(-k // 8) * 8 + 8  # W' rows: a vector multiple past K, zero there
    x_store = torch.randint(-3, 4, (x_offset + rows * k,), device="cuda", generator=gen).to(dtype)
    x = x_store[x_offset:]
    w = torch.zeros(n, pitch, device="cuda", dtype=dtype)
    w[:, :k] = torch.randint(-3, 4, (n, k), device="cuda", generator=gen).to(dtype)
    bias = torch.randint(-50, 51, (n,), device="cuda", generator=gen).to(dtype)
    y_store = torch.full((rows + 2, y_pitch), float("nan"), device="cuda", dtype=dtype)
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    assert lib.test_tail_rows(y_store[1].data_ptr(), y_pitch, x.data_ptr(), rows, k, w.data_ptr(), pitch, n,
                              bias.data_ptr() if with_bias else None, act, int(dtype == torch.bfloat16), sm_count) == 0
    want = x.view(rows, k).double() @ w[:, :k].double().T + (bias.double() if with_bias else 0)
    return y_store, want


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["f16", "bf16"])
@pytest.mark.parametrize("rows,k,n,x_offset,y_pitch", CASES)
def test_the_tail_rows_are_the_layer_rounded_once(harness, rows, k, n, x_offset, y_pitch, dtype_name):
    torch = pytest.importorskip("torch")
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    y_store, want = call(harness, torch, rows, k, n, x_offset, y_pitch, dtype, act=1)
    y = y_store[1: rows + 1]
    assert torch.equal(y[:, :n], want.clamp(min=0).to(dtype))  # ReLU, exact
    # Nothing written outside the tail's rows and columns.
    assert torch.isnan(y_store[0]).all() and torch.isnan(y_store[rows + 1]).all() and torch.isnan(y[:, n:]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("rows,k,n", [(3, 999, 333), (7, 4099, 1001)])
def test_the_tail_rows_without_bias_and_with_silu(harness, rows, k, n):
    torch = pytest.importorskip("torch")
    y_store, want = call(harness, torch, rows, k, n, 1, n, torch.float16, act=0, with_bias=False)
    assert torch.equal(y_store[1: rows + 1], want.to(torch.float16))
    y_store, want = call(harness, torch, rows, k, n, 1, n, torch.float16, act=3)
    silu = torch.nn.functional.silu(want)
    assert torch.allclose(y_store[1: rows + 1].double(), silu, rtol=2e-3, atol=1e-3)
