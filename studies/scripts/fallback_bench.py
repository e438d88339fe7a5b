"""Times the cuBLAS fallback an export ships against what it replaces, F.linear (and the torch
activation), cold L2, median of 30 a round.

    python studies/scripts/fallback_bench.py OUT.json [--layers LAYERS.toml] [--rounds R]

For each layer (the five below, or those of a layer file): the C ABI library
(templates/cublas_fallback.cu, as `cutsearch export` builds it), the fallback export loaded by
`cutsearch.load` and called with the caller's `out` (through that library for ReLU layers, where
cuBLASLt fuses it, else through torch), and F.linear, on the same inputs, each checked against float64
first. With R rounds the three are timed in turn R times, each round in another order, so that
a drift of the GPU's speed falls on all three; each timing is then the median of the rounds'
medians, and each round's medians are kept. Each call's host cost is timed too: 200 calls issued
back to back, without synchronising, after the GPU is idle.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

import cutsearch
from cutsearch.abi import io_flags, open_library
from cutsearch.cache import Cache
from cutsearch.codegen import cutlass_version, render_fallback
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cutsearch.export import _fallback_export, _write
from cutsearch.problem import Layer, load_layers
from cold_l2 import host_us, save, timed as cold

LAYERS = {
    "tiny_silu": Layer(m=5, n=7, k=9, dtype="bf16", bias=True, activation="silu"),
    "decode": Layer(m=16, n=4096, k=4096, bias=True),
    "mlp_down": Layer(m=8192, n=1024, k=4096, bias=True),
    "gelu_mlp": Layer(m=2048, n=8192, k=2048, bias=True, activation="gelu"),
    "unaligned_relu": Layer(m=3000, n=1001, k=999, bias=True, activation="relu"),
}


def main(out: Path, layers: dict[str, Layer], rounds: int, command: str) -> None:
    compiler = Compiler(Cache(Path(tempfile.mkdtemp())), Toolchain.find(cutlass_version()), jobs=5)
    built = dict(compiler.compile_many((name, render_fallback(layer)) for name, layer in layers.items()))
    stream = torch.cuda.current_stream().cuda_stream
    records = []
    for name, layer in layers.items():
        assert isinstance(built[name], CompiledKernel), built[name]
        lib = open_library(built[name].library)
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer.dtype]
        x = torch.randn(layer.m, layer.k, device="cuda", dtype=dtype)
        w = (torch.randn(layer.n, layer.k, device="cuda") / layer.k ** 0.5).to(dtype)
        b = torch.randn(layer.n, device="cuda", dtype=dtype) if layer.bias else None
        act = (lambda t: t) if layer.activation == "none" else getattr(F, layer.activation)
        want = act(x.double() @ w.double().T + (b.double() if b is not None else 0))
        y = torch.empty(layer.m, layer.n, device="cuda", dtype=dtype)
        handle = ctypes.c_void_p()
        assert lib.cs_create(ctypes.byref(handle), layer.m, layer.n, layer.k, layer.n, layer.k, 0, 0, 1, 1, 0, 0,
                             io_flags(False, False)) == 0
        ws = torch.empty(lib.cs_workspace_size(handle), dtype=torch.uint8, device="cuda")
        assert lib.cs_bind(handle, x.data_ptr(), w.data_ptr(), b.data_ptr() if b is not None else None,
                           y.data_ptr(), ws.data_ptr()) == 0, lib.cs_error(handle)

        def c_abi():
            assert lib.cs_run(handle, stream) == 0

        # The Python fallback as an application gets it: the export loaded by cutsearch.load.
        files, body = _fallback_export(layer, "benchmark", None)
        fc = cutsearch.load(_write(Path(tempfile.mkdtemp()) / name, files, body, layer=layer, study=name,
                                   summary=None)).prepare(w, b)
        calls = {"C ABI fallback": c_abi,
                 "Python fallback into out": lambda: fc(x, out=y),
                 "F.linear": lambda: act(F.linear(x, w, b))}
        record = {"name": name, **layer.to_dict(), "python_fallback_via": fc.via, "timings": {}, "rel_error": {},
                  "rounds": []}
        for label, call in calls.items():
            y.fill_(float("nan"))
            got = call()
            torch.cuda.synchronize()
            got = y if label != "F.linear" else got
            err = float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want))
            assert err < 1e-2, (name, label, err)
            record["rel_error"][label] = err
        labels = list(calls)
        record["host_us_per_call"] = {label: host_us(calls[label]) for label in labels}
        for r in range(rounds):
            order = labels[r % len(labels):] + labels[:r % len(labels)]
            record["rounds"].append({label: cold(calls[label]) for label in order})
        for label in labels:
            medians = [t[label]["median_us"] for t in record["rounds"]]
            record["timings"][label] = ({**record["rounds"][0][label]} if rounds == 1 else
                                        {"median_us": statistics.median(medians), "rounds": rounds})
        lib.cs_destroy(handle)
        base = record["timings"]["F.linear"]["median_us"]
        record["vs_f_linear"] = {k: base / t["median_us"] for k, t in record["timings"].items()}
        records.append(record)
        print(name, {k: round(t["median_us"], 1) for k, t in record["timings"].items()},
              "host µs:", {k: round(t, 1) for k, t in record["host_us_per_call"].items()}, flush=True)
    save(out, command, records)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=Path, help="a layer file (one table per layer) instead of the five above")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    main(args.out, load_layers(args.layers) if args.layers else LAYERS, args.rounds,
         "python studies/scripts/fallback_bench.py OUT.json" + (f" --layers {args.layers}" if args.layers else "")
         + (f" --rounds {args.rounds}" if args.rounds != 1 else ""))
