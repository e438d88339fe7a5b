"""Which kernels cuBLAS runs for F.linear (and the torch activation) on each layer, and how long
each takes on the GPU, from torch.profiler: what the search has to beat, named.

    python studies/scripts/cublas_kernels.py OUT.json LAYERS.toml [LAYERS.toml ...] [--calls 20]

Each layer's call is made `calls` times after a warm-up, with warm L2 (the profiler's kernel
times are for naming, not for speedups: those come from the cold-L2 benchmarks). OUT gets, per
layer, each kernel's name, its call count and its median duration.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from cutsearch.problem import load_layers

ACTIVATIONS = {"none": lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def kernels(layer, calls: int) -> list[dict]:
    dt = DTYPES[layer.dtype]
    x = torch.randn(layer.m, layer.k, device="cuda", dtype=dt)
    w = torch.randn(layer.n, layer.k, device="cuda", dtype=dt)
    b = torch.randn(layer.n, device="cuda", dtype=dt) if layer.bias else None
    act = ACTIVATIONS[layer.activation]
    for _ in range(3):
        act(F.linear(x, w, b))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            act(F.linear(x, w, b))
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times.setdefault(e.name, []).append(e.device_time)
    return [{"kernel": name, "calls": len(t), "median_us": statistics.median(t)} for name, t in times.items()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("layers", type=Path, nargs="+")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    out = []
    for path in args.layers:
        for name, layer in load_layers(path).items():
            found = kernels(layer, args.calls)
            out.append({"name": name, **layer.to_dict(), "kernels": found})
            print(f"{name} {layer.shape}:")
            for k in found:
                print(f"  {k['median_us']:9.2f} us  x{k['calls']:<3} {k['kernel'][:150]}")
    args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                    "cublas": torch.backends.cuda.preferred_blas_library().name,
                                    "layers": out}, indent=1))


if __name__ == "__main__":
    main()
