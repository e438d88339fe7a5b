"""Times the per-call pad/unpad copy alone on the GPU, cold L2, against simpler copies.

    python studies/scripts/copy_bench.py OUT.json

Builds tests/copy/copy_harness.cu (templates/copy.cuh behind a C entry point), then for the
unaligned suite layer's two copies (x 3000x999 -> pitch 1000, y pitch 1008 -> 3000x1001, fp16)
times: cutsearch's copy with 1, 2 and 4 16-byte vectors a thread (the one the launcher builds
marked), a one-element-per-thread copy, torch's strided copy, and a contiguous copy of the same bytes (the
bandwidth reference). Median of 30, 256 MiB zeroed before each.
"""

from __future__ import annotations

import ctypes
import json
import sys
import tempfile
from pathlib import Path

import torch

from cutsearch import codegen
from cutsearch.cache import Cache
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cold_l2 import timed as cold

ROOT = Path(__file__).resolve().parents[2]


def build() -> ctypes.CDLL:
    text = (ROOT / "tests" / "copy" / "copy_harness.cu").read_text().replace("${copy_kernels}", codegen.copy_kernels())
    source = codegen.KernelSource(operation_name="copy_harness", code=text, cutlass_version="none")
    built = Compiler(Cache(Path(tempfile.mkdtemp())), Toolchain.find("none")).compile(source)
    assert isinstance(built, CompiledKernel), built
    lib = ctypes.CDLL(str(built.library))
    args = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong,
            ctypes.c_longlong, ctypes.c_void_p]
    lib.bench_simple.argtypes = args
    lib.bench_repitch.argtypes = [*args, ctypes.c_int]
    return lib


def main(out: Path) -> None:
    lib = build()
    stream = torch.cuda.current_stream().cuda_stream
    rows, results = 3000, {}
    for name, cols, sp, dp in (("pad x", 999, 999, 1000), ("unpad y", 1001, 1008, 1001)):
        src = torch.randn(rows, sp, device="cuda", dtype=torch.float16)
        dst = torch.empty(rows, dp, device="cuda", dtype=torch.float16)
        want = torch.zeros_like(dst)
        want[:, : min(cols, dp)] = src[:, : min(cols, dp)]
        entry = {}
        built = lib.copy_unroll()
        kernels = {f"cutsearch copy, {u} vectors a thread{' (built)' if u == built else ''}": (lib.bench_repitch, (u,))
                   for u in (1, 2, 4)}
        kernels["element per thread"] = (lib.bench_simple, ())
        for label, (fn, extra) in kernels.items():

            def call(fn=fn, extra=extra):
                assert fn(dst.data_ptr(), dp, src.data_ptr(), sp, rows, cols, stream, *extra) == 0
            dst.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            assert torch.equal(dst, want), label
            entry[label] = cold(call)
        if dp > cols:
            entry["torch strided copy"] = cold(lambda: dst[:, :cols].copy_(src))
        else:
            entry["torch strided copy"] = cold(lambda: dst.copy_(src[:, :cols]))
        count = min(src.numel(), dst.numel())
        flat = torch.empty(count, device="cuda", dtype=torch.float16)
        entry["contiguous copy, same bytes"] = cold(lambda: flat.copy_(src.view(-1)[:count]))
        results[name] = entry
    data = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": "rows 3000, fp16",
            "command": "python studies/scripts/copy_bench.py OUT.json", "results": results}
    out.write_text(json.dumps(data, indent=1))
    print(json.dumps(data, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
