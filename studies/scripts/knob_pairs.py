"""Prints, for each measured kernel, its calls with and without one run-time knob, from
recordings written by configs_bench.py: W's prefetch (studies/scripts/h200-prefetch.sh) or x read
in place (`views`, studies/scripts/h200-one-row.sh).

    python studies/scripts/knob_pairs.py RECORDING.json [...] [--knob prefetch] [--free pdl,prefetch]

A call with the knob is paired with the fastest call without it whose other knobs agree, the
`--free` knobs aside: those exist on one side only (a call that reads x in place has no copy to
overlap or to prefetch behind).
"""

from __future__ import annotations

import argparse
import json
import statistics

LABELS = {"prefetch": "the prefetch", "views": "x read in place", "own_copy": "x copied by the GEMM"}


def pairs(recording: dict, knob: str, free: frozenset[str] = frozenset()) -> list[tuple[str, dict, float, float]]:
    """(config key, knobs, µs without, µs with) for every variant measured both ways."""
    out = []
    for ev in recording["evaluations"]:
        m = ev.get("measurement")
        if not m:
            continue
        best: dict[tuple[str, int], float] = {}  # (the other knobs, the knob) -> the fastest median
        for kn, t in m["variants"]:
            key = (json.dumps({k: v for k, v in kn.items() if k != knob and k not in free}, sort_keys=True),
                   kn.get(knob, 0))
            best[key] = min(t, best.get(key, t))
        c = ev["config"]
        name = f"{c['tile_m']}x{c['tile_n']}x{c['tile_k']}_c{c['cluster_m']}x{c['cluster_n']}_{c['kernel_schedule']}"
        for (base, on), t in best.items():
            if on and (base, 0) in best:
                out.append((name, json.loads(base), best[base, 0], t))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recordings", nargs="+")
    ap.add_argument("--knob", default="prefetch")
    ap.add_argument("--free", default="", help="comma-separated knobs that one side lacks")
    args = ap.parse_args()
    free = frozenset(filter(None, args.free.split(",")))
    label = LABELS.get(args.knob, args.knob)
    gains = []
    for path in args.recordings:
        rec = json.load(open(path))
        layer = rec["layer"]
        print(f"{layer['M']}x{layer['N']}x{layer['K']} {layer['dtype']}")
        for name, knobs, without, with_ in pairs(rec, args.knob, free):
            extra = f" splits {knobs['splits']}" if knobs.get("splits", 1) > 1 else ""
            if knobs.get("raster"):
                extra += f" raster {knobs['raster']} swizzle {knobs['swizzle']}"
            print(f"  {name}{extra}: {without:.2f} µs without, {with_:.2f} µs with {label} ({without - with_:+.2f})")
            gains.append(without - with_)
    if gains:
        print(f"{len(gains)} pairs: {label} saved {statistics.median(gains):+.2f} µs at the median, "
              f"{min(gains):+.2f} to {max(gains):+.2f}; faster in {sum(g > 0 for g in gains)}")


if __name__ == "__main__":
    main()
