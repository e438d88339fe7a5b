"""Use an exported cutsearch layer the way an application would, and time it against F.linear.

    python studies/scripts/use_export.py EXPORT_DIR [--out result.json]

Follows the project's measurement protocol: correctness against float64 first, then CUDA
events around each call with L2 flushed (256 MiB zeroed) before every repetition, and F.linear
timed the same way on the same inputs. The export and F.linear are timed in turn, ROUNDS times,
each round in another order, so that neither is always the first: timed first, a cuBLAS
fallback whose GPU work is F.linear's own measured 0.93-0.97x of it. ROUNDS is a multiple of
two and of three calls (twice as many rounds for four), so each call goes first equally often.
Where the kernel reads x at a longer pitch than the layer's, the export is also timed on an x
kept at that pitch (`fc.kernel_x_pitch`), checked first like the rest. In the 55 recorded runs of 5
rounds the export's speedup was 1.7% higher (median) in the rounds it went first
(studies/scripts/round_order.py). Each time is the median of the rounds' medians, and each
round's median is kept. Rounds that show a disturbed GPU (cutsearch.verdict.unsteady: a call's
slowest round over twice its fastest) are all timed again, up to ATTEMPTS times; `disturbed`
says why where the last attempt was disturbed too.
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import cutsearch
from cold_l2 import timed
from cutsearch.verdict import unsteady

ROUNDS = 6
REPS = 20  # a round's repetitions of each call
ATTEMPTS = 3


def in_rounds(calls: dict) -> dict:
    """Each call's median of round medians, with the rounds' own, the order rotating a round."""
    labels = list(calls)
    rounds = []
    for r in range(math.lcm(ROUNDS, len(labels))):  # each call first equally often
        order = labels[r % len(labels):] + labels[:r % len(labels)]
        rounds.append({label: timed(calls[label], reps=REPS, warmup=3) for label in order})
    out = {}
    for label in labels:
        times = [t[label] for t in rounds]
        out[label] = {key: statistics.median(t[key] for t in times) for key in ("median_us", "p20_us", "p80_us")}
        out[label].update(reps=REPS * len(rounds), rounds=len(rounds), round_medians_us=[t["median_us"] for t in times])
    return out


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
    # The layouts the layer was searched for: x handed over in rows of x_pitch (the padding finite,
    # not zero), y written padded or as y^T. F.linear reads the same x.
    layout = fc.spec
    x_rows = torch.full((m, layout.x_pitch), 3.0, device="cuda", dtype=dtype)
    x_rows[:, :k] = torch.randn(m, k, device="cuda", dtype=dtype)
    x = x_rows[:, :k]
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
    b = torch.randn(n, device="cuda", dtype=dtype) if spec["bias"] else None
    act = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[spec["activation"]]
    fc.prepare(w, b)

    y = torch.full(layout.y_shape, float("nan"), device="cuda", dtype=dtype)
    fc(x_rows, out=y)
    y_view = y.T if layout.output == "transposed" else y[:, :n]
    ref = act(x.double() @ w.double().T + (b.double() if b is not None else 0))
    err = float(torch.linalg.norm(y_view.double() - ref) / torch.linalg.norm(ref))
    assert err < 1e-2, f"relative error {err}"

    calls = {"ours": lambda: fc(x_rows, out=y), "theirs": lambda: act(F.linear(x, w, b))}
    err_wide = None
    if fc.kernel_x_pitch:  # the same x kept at the kernel's own pitch: no copy per call
        x_wide = torch.full((m, fc.kernel_x_pitch), 3.0, device="cuda", dtype=dtype)
        x_wide[:, :k] = x
        y_wide = torch.full(layout.y_shape, float("nan"), device="cuda", dtype=dtype)
        fc(x_wide, out=y_wide)
        y_wide_view = y_wide.T if layout.output == "transposed" else y_wide[:, :n]
        err_wide = float(torch.linalg.norm(y_wide_view.double() - ref) / torch.linalg.norm(ref))
        assert err_wide < 1e-2, f"relative error {err_wide} with x at the kernel's pitch"
        calls["ours_at_kernel_pitch"] = lambda: fc(x_wide, out=y_wide)
    if b is None and spec["activation"] == "none":  # such a layer may call torch.mm instead: time that too
        calls["mm"] = lambda: torch.mm(x, w.t())
    for attempt in range(1, ATTEMPTS + 1):
        times = in_rounds(calls)
        disturbed = "; ".join(n for label, t in times.items() if (n := unsteady(label, t["round_medians_us"])))
        if not disturbed:
            break
        print(f"disturbed: {disturbed}" + ("; timing again" if attempt < ATTEMPTS else ""), file=sys.stderr)
    ours, theirs, mm, wide = times["ours"], times["theirs"], times.get("mm"), times.get("ours_at_kernel_pitch")
    # Host cost of one call (arguments already bound), the calls queued without waiting for the GPU.
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        fc(x_rows, out=y)
    host_us = (time.perf_counter() - t0) / 200 * 1e6
    result = {
        "export": args.export, "layer": spec, "backend": fc.backend, "gpu": torch.cuda.get_device_name(),
        "rel_error": err, "cutsearch_us": ours, "f_linear_us": theirs, "torch_mm_us": mm,
        "speedup_vs_mm": mm["median_us"] / ours["median_us"] if mm else None,
        "speedup_import": theirs["median_us"] / ours["median_us"],
        "kernel_x_pitch": fc.kernel_x_pitch, "rel_error_at_kernel_pitch": err_wide,
        "cutsearch_at_kernel_pitch_us": wide,
        "speedup_at_kernel_pitch": theirs["median_us"] / wide["median_us"] if wide else None,
        "speedup_search": fc.meta.get("speedup"),
        "search_us": (fc.meta.get("timing_us") or {}).get("median_us"),
        "host_us_per_call_async": host_us, "load_s": load_s, "attempts": attempt, "disturbed": disturbed or None,
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
