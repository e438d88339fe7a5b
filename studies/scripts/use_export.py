"""Use an exported cutsearch layer the way an application would, and time it against F.linear.

    python studies/scripts/use_export.py EXPORT_DIR [--out result.json]

Follows the project's measurement protocol: correctness against float64 first, then CUDA
events around each call with L2 flushed (256 MiB zeroed) before every repetition, medians
with 20th/80th percentiles, and F.linear timed the same way on the same inputs.
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F

import cutsearch
from cold_l2 import timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("export")
    ap.add_argument("--out")
    args = ap.parse_args()

    t0 = time.perf_counter()
    fc = cutsearch.load(args.export)
    load_s = time.perf_counter() - t0
    spec = fc.meta["layer"]
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[spec["dtype"]]
    m, n, k = spec["M"], spec["N"], spec["K"]
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=dtype) if spec["bias"] else None
    act = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[spec["activation"]]
    fc.prepare(w, b)

    y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    fc(x, out=y)
    ref = act(x.double() @ w.double().T + (b.double() if b is not None else 0))
    err = float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref))
    assert err < 1e-2, f"relative error {err}"

    ours = timed(lambda: fc(x, out=y), reps=50, warmup=5)
    theirs = timed(lambda: act(F.linear(x, w, b)), reps=50, warmup=5)
    # A bias-free layer may call torch.mm instead: time that too, same inputs, same timer.
    mm = timed(lambda: torch.mm(x, w.t()), reps=50, warmup=5) if b is None and spec["activation"] == "none" else None
    # Host cost of one call (arguments already bound), the calls queued without waiting for the GPU.
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        fc(x, out=y)
    host_us = (time.perf_counter() - t0) / 200 * 1e6
    result = {
        "export": args.export, "layer": spec, "backend": fc.backend, "gpu": torch.cuda.get_device_name(),
        "rel_error": err, "cutsearch_us": ours, "f_linear_us": theirs, "torch_mm_us": mm,
        "speedup_vs_mm": mm["median_us"] / ours["median_us"] if mm else None,
        "speedup_import": theirs["median_us"] / ours["median_us"],
        "speedup_search": fc.meta.get("speedup"),
        "search_us": (fc.meta.get("timing_us") or {}).get("median_us"),
        "host_us_per_call_async": host_us, "load_s": load_s,
        "command": "python studies/scripts/use_export.py " + args.export,
    }
    result["import_vs_search"] = (result["speedup_import"] / result["speedup_search"]
                                  if result["speedup_search"] else None)
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
