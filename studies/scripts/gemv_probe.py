"""A probe for small-M layers: how fast two plain skinny kernels (gemv_probe.cu: CUDA cores, and
tensor cores through mma.sync) run against F.linear and the streaming floor, under the
measurement protocol, in one run. Where M <= 7, the row views' tail kernel (templates/tail.cuh,
the one skinny kernel the search ships) runs the whole layer beside them.

    python studies/scripts/gemv_probe.py OUT.json [MxNxK ...]

For each layer (f16, with bias) every variant, a kernel and its knobs (rows of W a warp or block,
loads in flight, grid, cluster), is first checked against float64, then timed; each kernel's best
median is kept. Beside them, in the same process: F.linear with the same bias, and the streaming
floor (stream_floor.py) of the same bytes. The probe's layers have K a multiple of 8 and M in
1, 2, 4, 8 or 16 (the CUDA-core kernel's builds); neither probe kernel is in the search.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from cutsearch import codegen
from cutsearch.cache import Cache
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cold_l2 import save, timed as cold
import stream_floor

HERE = Path(__file__).resolve().parent
LAYERS = ["1x4096x4096", "2x4096x4096", "4x4096x4096", "8x4096x4096", "16x4096x4096", "1x11008x4096",
          "8x14336x4096", "16x1024x4096", "2x4096x14336", "4x1024x4096", "16x28672x4096"]
SHAPES = [(1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 1), (4, 2)]  # (rows a warp, loads in flight a row)
BLOCKS_PER_SM = (1, 2, 4, 8, 16)
THREADS = (128, 256)
MMA_THREADS = (64, 128, 256, 512)  # 32 x the warps splitting K in a block
MMA_SPLITS = (1, 2, 4, 8)          # blocks of a cluster splitting K further
MMA_SHAPES = [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (1, 4), (2, 4)]  # (chunks in flight, 16-row groups a block)


def _built(name: str, code: str) -> ctypes.CDLL:
    source = codegen.KernelSource(operation_name=name, code=code, cutlass_version="none")
    built = Compiler(Cache(Path(tempfile.mkdtemp())), Toolchain.find("none")).compile(source)
    assert isinstance(built, CompiledKernel), built
    return ctypes.CDLL(str(built.library))


TAIL_ENTRY = """
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
${copy_kernels}
extern "C" {
int cs_abi_version(void) { return 0; }
// The tail kernel on f16 rows with a bias and no activation, queued on `stream` without waiting.
int tail_probe(void* y, const void* x, int rows, int k, const void* w, int n, const void* b, int sms, void* stream) {
  return cutsearch_tail::launch_tail_rows<0>(static_cast<__half*>(y), n, static_cast<const __half*>(x), rows, k,
                                             static_cast<const __half*>(w), k, n, static_cast<const __half*>(b), sms,
                                             static_cast<cudaStream_t>(stream), false) != cudaSuccess;
}
}
"""


def build_tail() -> ctypes.CDLL:
    """templates/tail.cuh as the search renders it (codegen.copy_kernels), behind a C entry point."""
    lib = _built("tail_probe", TAIL_ENTRY.replace("${copy_kernels}", codegen.copy_kernels()))
    lib.tail_probe.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                               ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    return lib


def build() -> ctypes.CDLL:
    lib = _built("gemv_probe", (HERE / "gemv_probe.cu").read_text())
    lib.gemv_probe.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                     ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                                     ctypes.c_void_p]
    lib.gemv_mma_probe.argtypes = [ctypes.c_int] * 5 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                                         ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                                         ctypes.c_void_p]
    return lib


def probe(lib, tail, m: int, n: int, k: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(m * n + k)
    x = torch.randn(m, k, device="cuda", generator=gen).half()
    w = torch.randn(n, k, device="cuda", generator=gen).half()
    b = torch.randn(n, device="cuda", generator=gen).half()
    y = torch.empty(m, n, device="cuda", dtype=torch.half)
    want = x.double() @ w.double().T + b.double()
    scale = want.abs().max().item()
    stream = torch.cuda.current_stream().cuda_stream
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    options = []  # (the kernel and its knobs, a call)
    for (rows, loads), per_sm, threads in itertools.product(SHAPES, BLOCKS_PER_SM, THREADS):
        knobs = {"kernel": "cuda cores", "rows_a_warp": rows, "loads_a_row": loads, "blocks": sms * per_sm,
                 "threads": threads}
        options.append((knobs, lambda r=rows, lo=loads, bl=sms * per_sm, th=threads: lib.gemv_probe(
            0, m, r, lo, y.data_ptr(), x.data_ptr(), k, w.data_ptr(), n, b.data_ptr(), bl, th, stream)))
    for threads, (chunks, groups), splits in itertools.product(MMA_THREADS, MMA_SHAPES, MMA_SPLITS):
        knobs = {"kernel": "mma.sync", "threads": threads, "chunks_in_flight": chunks, "row_groups": groups,
                 "cluster_splits": splits, "blocks": -(-n // (16 * groups)) * splits}
        options.append((knobs, lambda th=threads, c=chunks, rg=groups, sp=splits: lib.gemv_mma_probe(
            0, m, c, rg, sp, y.data_ptr(), x.data_ptr(), k, w.data_ptr(), n, b.data_ptr(), th, stream)))
    if m <= 7:  # the tail kernel's most rows; it picks its own grid
        options.append(({"kernel": "tail.cuh"}, lambda: tail.tail_probe(
            y.data_ptr(), x.data_ptr(), m, k, w.data_ptr(), n, b.data_ptr(), sms, stream)))
    best, tried = None, []
    for knobs, launch in options:
        def call():
            assert launch() == 0, knobs

        y.fill_(float("nan"))
        if launch() != 0:  # a cluster the GPU cannot place
            tried.append({**knobs, "median_us": None, "launch_failed": True})
            continue
        err = ((y.double() - want).abs().max() / scale).item()
        if not err < 2e-3:  # wrong results are kept, and never timed
            print(f"{m}x{n}x{k} {knobs}: WRONG, relative error {err:.2e}", flush=True)
            tried.append({**knobs, "median_us": None, "rel_err": err})
            continue
        timing = cold(call)
        tried.append({**knobs, "median_us": timing["median_us"], "rel_err": err})
        if best is None or timing["median_us"] < best["timing"]["median_us"]:
            best = {**knobs, "timing": timing, "rel_err": err}
    cublas = cold(lambda: F.linear(x, w, b))
    return {"best": best, "cublas_f16": cublas, "tried": tried}


def main(out: Path, layers: list[str]) -> None:
    lib, tail, floor_lib = build(), build_tail(), stream_floor.build()
    records = []
    for name in layers:
        m, n, k = (int(v) for v in name.split("x"))
        got = probe(lib, tail, m, n, k)
        floor = stream_floor.floor(floor_lib, 2 * (m * k + n * k + n), 2 * m * n)
        record = {"name": name, "M": m, "N": n, "K": k, "dtype": "f16", "bias": True, **got, "stream_floor": floor}
        records.append(record)
        for kernel in ("cuda cores", "mma.sync", "tail.cuh"):
            timed = [t for t in got["tried"] if t["kernel"] == kernel and t["median_us"]]
            if not timed:
                if kernel != "tail.cuh" or m <= 7:
                    print(f"{name} {kernel}: nothing ran", flush=True)
                continue
            mine = min(timed, key=lambda t: t["median_us"])
            p, c, f = mine["median_us"], got["cublas_f16"]["median_us"], floor["timing"]["median_us"]
            knobs = {key: v for key, v in mine.items() if key not in ("kernel", "median_us", "rel_err")}
            failed = sum(1 for t in got["tried"] if t["kernel"] == kernel and not t["median_us"])  # or wrong
            print(f"{name} {kernel}: {p:.2f} µs, F.linear {c:.2f} µs ({c / p:.2f}x), stream floor {f:.2f} µs "
                  f"(at {f / p:.0%} of its speed); {knobs}; {failed} not launched or wrong", flush=True)
        save(out, "python studies/scripts/gemv_probe.py OUT.json " + " ".join(layers), records)  # kept if cut
    save(out, "python studies/scripts/gemv_probe.py OUT.json " + " ".join(layers), records)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or LAYERS)
