"""The per-call pad/unpad copy (templates/copy.cuh): built by nvcc in CI, checked on a GPU.

Padding x to a 16-byte row pitch and unpadding y are both `repitch`; it must be exact for every
pitch, width and pointer alignment, because a search trusts it on every unaligned layer.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from cutsearch.compiler import CompiledKernel, PtxasReport
from tests.harness import build_harness

HARNESS = Path(__file__).parent / "copy" / "copy_harness.cu"

# (rows, cols, src_pitch, dst_pitch): pads (dst wider), unpads (src wider), odd widths, one row,
# one column, a chunk boundary inside a row, widths past one block's chunk.
CASES = [
    (3000, 999, 999, 1000), (3000, 1001, 1008, 1001), (1, 1, 1, 8), (1, 1, 8, 1), (7, 5, 5, 8),
    (7, 5, 8, 5), (33, 2047, 2047, 2048), (33, 2049, 2056, 2049), (5, 9000, 9000, 9008),
    (5, 9001, 9008, 9001), (300, 3, 8, 3), (64, 8, 8, 8), (17, 4095, 4096, 4095),
]


@pytest.fixture(scope="module")
def harness(kernel_cache) -> CompiledKernel:
    return build_harness(HARNESS, kernel_cache)


@pytest.mark.nvcc
def test_the_copy_kernels_build_without_spills(harness):
    assert harness.library.is_file()
    assert PtxasReport.parse(harness.log, helpers=True).spill_bytes == 0


@pytest.mark.gpu
@pytest.mark.parametrize("unroll", [1, 2, 4])  # 16-byte vectors a thread: every block size the copy builds
@pytest.mark.parametrize("offset", [0, 1, 3])  # elements: misaligns source rows and the chunk start
@pytest.mark.parametrize("rows,cols,src_pitch,dst_pitch", CASES)
def test_repitch_matches_numpy(harness, rows, cols, src_pitch, dst_pitch, offset, unroll):
    torch = pytest.importorskip("torch")
    lib = ctypes.CDLL(str(harness.library))
    lib.test_repitch.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_longlong,
                                 ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int]
    gen = torch.Generator(device="cuda").manual_seed(rows * cols + offset)
    src_store = torch.randn(offset + rows * src_pitch, device="cuda", dtype=torch.float16, generator=gen)
    src = src_store[offset:].view(rows, src_pitch)
    dst_store = torch.full((offset + rows * dst_pitch + 8,), float("nan"), device="cuda", dtype=torch.float16)
    dst = dst_store[offset: offset + rows * dst_pitch].view(rows, dst_pitch)
    assert lib.test_repitch(dst.data_ptr(), dst_pitch, src.data_ptr(), src_pitch, rows, cols, unroll) == 0
    want = torch.zeros(rows, dst_pitch, device="cuda", dtype=torch.float16)
    width = min(cols, dst_pitch)
    want[:, :width] = src[:, :width]
    assert torch.equal(dst, want)
    # Nothing written outside the destination.
    assert torch.isnan(dst_store[:offset]).all() and torch.isnan(dst_store[offset + rows * dst_pitch:]).all()
