"""Measures each suite layer's bandwidth floor on the GPU: the fastest one kernel can read x, W
and b and write y, doing nothing else, under the measurement protocol (cold L2, median of 30).

    python studies/scripts/stream_floor.py studies/suite.toml OUT.json

The roofline floor assumes the datasheet bandwidth from the first byte. This one is measured: a
streaming kernel (studies/scripts/stream_floor.cu) swept over grid size, block size and loads in
flight, its best median kept. Beside it, in the same run: an empty kernel and cuBLAS
(`F.linear` with the layer's bias). cuBLAS over the measured floor bounds what any kernel can
gain. Each byte count is checked: the kernel's word sums must equal the buffer's.
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
from cutsearch.problem import load_layers
from cold_l2 import save, timed as cold

HERE = Path(__file__).resolve().parent
BLOCKS_PER_SM = (1, 2, 4, 8, 16)
THREADS = (256, 512, 1024)
UNROLL = (1, 4, 8)


def build() -> ctypes.CDLL:
    source = codegen.KernelSource(operation_name="stream_floor", code=(HERE / "stream_floor.cu").read_text(),
                                  cutlass_version="none")
    built = Compiler(Cache(Path(tempfile.mkdtemp())), Toolchain.find("none")).compile(source)
    assert isinstance(built, CompiledKernel), built
    lib = ctypes.CDLL(str(built.library))
    lib.stream_floor.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_longlong,
                                 ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return lib


def floor(lib: ctypes.CDLL, read_bytes: int, write_bytes: int) -> dict:
    n_read, n_write = -(-read_bytes // 16), -(-write_bytes // 16)
    src = torch.randint(-2**31, 2**31 - 1, (n_read * 4,), dtype=torch.int32, device="cuda")
    dst = torch.empty(n_write * 4, dtype=torch.int32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sums = torch.zeros(sms * max(BLOCKS_PER_SM), dtype=torch.int32, device="cuda")
    want = int(src.to(torch.int64).sum()) % 2**32
    stream = torch.cuda.current_stream().cuda_stream
    best = None
    for per_sm, threads, unroll in itertools.product(BLOCKS_PER_SM, THREADS, UNROLL):
        blocks = sms * per_sm

        def call():
            assert lib.stream_floor(unroll, src.data_ptr(), n_read, dst.data_ptr(), n_write, sums.data_ptr(),
                                    blocks, threads, stream) == 0
        sums.zero_()
        dst.fill_(-1)
        call()
        got = int(sums[:blocks].to(torch.int64).sum()) % 2**32
        assert got == want and not dst.any(), f"the floor kernel skipped bytes ({per_sm}, {threads}, {unroll})"
        timing = cold(call)
        if best is None or timing["median_us"] < best["timing"]["median_us"]:
            best = {"timing": timing, "blocks": blocks, "threads": threads, "loads_in_flight": unroll}
    return best


def main(suite: Path, out: Path) -> None:
    lib = build()
    tiny = torch.empty(4, dtype=torch.int32, device="cuda")
    records = []
    for name, layer in load_layers(suite).items():
        e = 2  # f16 and bf16 move the same bytes
        read = e * (layer.m * layer.k + layer.n * layer.k + (layer.n if layer.bias else 0))
        write = e * layer.m * layer.n
        x = torch.randn(layer.m, layer.k, dtype=torch.float16, device="cuda")
        w = torch.randn(layer.n, layer.k, dtype=torch.float16, device="cuda")
        b = torch.randn(layer.n, dtype=torch.float16, device="cuda") if layer.bias else None
        cublas = cold(lambda: F.linear(x, w, b))
        empty = cold(lambda: tiny.zero_())
        best = floor(lib, read, write)
        record = {"name": name, "M": layer.m, "N": layer.n, "K": layer.k, "bias": layer.bias,
                  "read_bytes": read, "write_bytes": write, "roofline_floor_us": layer.floor_us,
                  "empty_kernel": empty, "cublas_f16": cublas, "stream_floor": best,
                  "stream_floor_tb_per_s": (read + write) / best["timing"]["median_us"] / 1e6,
                  "cublas_over_stream_floor": cublas["median_us"] / best["timing"]["median_us"]}
        records.append(record)
        print(f"{name}: cuBLAS {cublas['median_us']:.1f} µs, stream floor {best['timing']['median_us']:.1f} µs "
              f"({record['stream_floor_tb_per_s']:.2f} TB/s), empty kernel {empty['median_us']:.1f} µs, "
              f"at most {record['cublas_over_stream_floor']:.2f}x", flush=True)
    save(out, "python studies/scripts/stream_floor.py studies/suite.toml OUT.json", records)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
