"""The split-K reduction (templates/reduce.cuh): built by nvcc in CI, checked on a GPU.

Every split-K kernel with a reduction kernel trusts it for y, so it must match, bit for bit, the
order it promises: each of an element's lanes sums its share of the slices in order, then the
lanes add theirs pairwise. The cost model counts its rounds of loads from the same lane rule.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from cutsearch import model
from cutsearch.compiler import CompiledKernel, PtxasReport
from tests.harness import build_harness

HARNESS = Path(__file__).parent / "reduce" / "reduce_harness.cu"

# (m, n, pitch, y_pitch, splits, bias): a tiny output over a warp's lanes (odd slice counts, y
# padded), a few lanes, one lane on the packed path and on the pitched one (a partial batch).
CASES = [
    (7, 9, 16, 9, 128, True), (1, 1, 8, 1, 3, True), (3, 1, 8, 1, 13, False), (5, 13, 16, 16, 100, False),
    (16, 1024, 1024, 1024, 6, True), (2, 5000, 5000, 5000, 128, True), (64, 1024, 1024, 1024, 5, True),
    (300, 333, 336, 333, 17, True), (1, 8, 8, 8, 2, False),
]


@pytest.fixture(scope="module")
def harness(kernel_cache) -> CompiledKernel:
    return build_harness(HARNESS, kernel_cache)


def lanes_of(harness):
    lib = ctypes.CDLL(str(harness.library))
    lib.reduce_lanes.argtypes = [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int]
    return lambda m, n, splits: lib.reduce_lanes(m, n, splits)


@pytest.mark.nvcc
def test_the_reduction_builds_without_spills(harness):
    assert PtxasReport.parse(harness.log, helpers=True).spill_bytes == 0


@pytest.mark.nvcc
def test_the_kernel_and_the_model_spread_slices_over_the_same_lanes(harness):
    kernel = lanes_of(harness)
    shapes = [(m, n, s) for m in (1, 3, 7, 16, 64, 256, 4096) for n in (1, 9, 64, 1000, 1024, 5000)
              for s in (2, 3, 5, 8, 13, 16, 32, 64, 100, 128)]
    seen = {(m, n, s): kernel(m, n, s) for m, n, s in shapes}
    assert seen == {shape: model.reduce_lanes(*shape) for shape in shapes}
    assert set(seen.values()) == {1, 2, 4, 8, 16, 32}
    assert seen[7, 9, 128] == 32 and seen[1, 1, 3] == 2 and seen[4096, 1024, 128] == 1


def test_the_model_counts_a_batch_of_loads_a_round():
    assert model.reduce_rounds(7, 9, 128) == 1  # 32 lanes, four slices each
    assert model.reduce_rounds(4096, 1024, 16) == 2  # one lane: sixteen slices, eight at a time
    assert model.reduce_rounds(4096, 1024, 17) == 3
    assert model.reduce_rounds(1, 1, 2) == 1


def emulated(parts: np.ndarray, bias: np.ndarray | None, lanes: int) -> np.ndarray:
    """The kernel's order in fp32: lane j sums slices j, j + lanes, ...; then a butterfly."""
    shares = []
    for j in range(lanes):
        acc = parts[j].copy()
        for s in range(j + lanes, len(parts), lanes):
            acc = acc + parts[s]
        shares.append(acc)
    offset = lanes // 2
    while offset:
        shares = [shares[j] + shares[j ^ offset] for j in range(lanes)]
        offset //= 2
    total = shares[0] if bias is None else shares[0] + bias.astype(np.float32)
    return total.astype(np.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,pitch,y_pitch,splits,with_bias", CASES)
def test_sum_splits_adds_in_the_order_it_promises(harness, m, n, pitch, y_pitch, splits, with_bias):
    torch = pytest.importorskip("torch")
    lib = ctypes.CDLL(str(harness.library))
    lib.test_sum_splits.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_longlong,
                                    ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    rng = np.random.default_rng(m * n + splits)
    parts = rng.standard_normal((splits, m, pitch), dtype=np.float32)
    bias = rng.standard_normal(n).astype(np.float16) if with_bias else None
    lanes = model.reduce_lanes(m, n, splits)
    want = emulated(parts[:, :, :n], bias, lanes)
    parts_d = torch.from_numpy(parts).cuda()
    bias_d = torch.from_numpy(bias).cuda() if with_bias else None
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    outputs = []
    for _ in range(2):  # the same bits every launch
        y = torch.full((m, y_pitch), float("nan"), dtype=torch.float16, device="cuda")
        assert lib.test_sum_splits(y.data_ptr(), y_pitch, parts_d.data_ptr(), pitch, m, n, splits,
                                   bias_d.data_ptr() if with_bias else None, sm_count) == 0
        outputs.append(y.cpu().numpy())
    assert np.array_equal(outputs[0], outputs[1], equal_nan=True)
    assert np.array_equal(outputs[0][:, :n], want), (lanes, np.abs(outputs[0][:, :n] - want).max())
    assert np.isnan(outputs[0][:, n:]).all()  # y's padding untouched
    # And the sum is the layer's: within fp16 rounding of the float64 one.
    exact = parts[:, :, :n].astype(np.float64).sum(0) + (bias.astype(np.float64) if with_bias else 0)
    assert np.allclose(outputs[0][:, :n], exact, rtol=2e-3, atol=2e-3)
