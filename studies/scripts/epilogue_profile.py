"""Where the unaligned layer's kernels spend their time, by epilogue: Nsight Compute on one call.

    python studies/scripts/epilogue_profile.py build DIR        # builds the kernels, writes DIR/kernels.json
    python studies/scripts/epilogue_profile.py call DIR/kernels.json NAME   # one call, for ncu

The kernels share a mainloop config (128x256x64 cooperative, 1x2 cluster, K padded) and differ
in how y is stored: the TMA epilogue into a padded y, the staged epilogue and the nosmem epilogue
(swapped) into y's own rows. Each is called with x handed over padded (IO bit 1), so no copy
runs; the TMA one also with y padded (IO bit 2). The figures come from Nsight Compute, which
flushes the caches before the kernel and fixes the clocks: they compare the kernels with each
other, not with the timings of the search.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import sys
from pathlib import Path

from cutsearch.abi import io_flags, open_library
from cutsearch.cache import Cache
from cutsearch.codegen import cutlass_version, render
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cutsearch.problem import Layer
from cutsearch.space import Config, invalid_reason, kernel_problem

LAYER = Layer(m=3000, n=1001, k=999, dtype="f16", bias=True)
BASE = Config(tile_m=128, tile_n=256, tile_k=64, cluster_n=2, kernel_schedule="cooperative",
              epilogue_schedule="tma", pad=True)
KERNELS = {
    "tma-y-padded": (BASE, io_flags(True, True)),
    "staged": (dataclasses.replace(BASE, epilogue_schedule="staged"), io_flags(True, False)),
    "nosmem-swapped": (dataclasses.replace(BASE, epilogue_schedule="nosmem", swap_ab=True), io_flags(True, False)),
}


def build(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    compiler = Compiler(Cache(out / "kernels"), Toolchain.find(cutlass_version()))
    sources = []
    for name, (config, _) in KERNELS.items():
        assert invalid_reason(LAYER, config) is None, (name, invalid_reason(LAYER, config))
        sources.append((name, render(LAYER, config)))
    built = dict(compiler.compile_many(sources))
    listing = {}
    for name, (config, io) in KERNELS.items():
        kernel = built[name]
        if not isinstance(kernel, CompiledKernel):
            raise SystemExit(f"{name}: {kernel}")
        kp = kernel_problem(LAYER, config)
        listing[name] = {"library": os.path.relpath(kernel.library), "io": io, "pad_n": kp.pad_n, "pad_k": kp.pad_k,
                         "config": config.to_dict()}
    (out / "kernels.json").write_text(json.dumps(listing, indent=1))
    print(json.dumps(listing, indent=1))


def call(library: str, io: int, pad_n: int, pad_k: int) -> None:
    """One checked layer call after one warm-up call (ncu profiles the launches it is told to)."""
    import torch

    m, n, k = LAYER.m, LAYER.n, LAYER.k
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, device="cuda", dtype=torch.float16)
    xp = torch.zeros(m, pad_k, device="cuda", dtype=torch.float16)
    xp[:, :k] = x
    wp = torch.zeros(pad_n, pad_k, device="cuda", dtype=torch.float16)
    wp[:n, :k] = w
    bp = torch.zeros(pad_n, device="cuda", dtype=torch.float16)
    bp[:n] = b
    y_padded = bool(io & 2)
    y = torch.empty(m, pad_n if y_padded else n, device="cuda", dtype=torch.float16)
    lib = open_library(library)
    h = ctypes.c_void_p()
    assert lib.cs_create(ctypes.byref(h), m, n, k, pad_n, pad_k, 0, 1, 1, 1, 0, 0, io) == 0
    ws = torch.empty(max(1, lib.cs_workspace_size(h)), dtype=torch.uint8, device="cuda")
    assert lib.cs_bind(h, (xp if io & 1 else x).data_ptr(), wp.data_ptr(), bp.data_ptr(), y.data_ptr(),
                       ws.data_ptr()) == 0, lib.cs_error(h)
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(2):
        assert lib.cs_run(h, stream) == 0, lib.cs_error(h)
    torch.cuda.synchronize()
    ref = torch.nn.functional.linear(x.double(), w.double(), b.double())
    err = float((y[:, :n].double() - ref).norm() / ref.norm())
    print(f"rel err {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]))
    else:
        listing = json.loads(Path(sys.argv[2]).read_text())[sys.argv[3]]
        call(listing["library"], listing["io"], listing["pad_n"], listing["pad_k"])
