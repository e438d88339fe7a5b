"""Prints, for each measured kernel, its overlapped calls with and without W's prefetch (the
`prefetch` knob), from recordings written by configs_bench.py (studies/scripts/h200-prefetch.sh).

    python studies/scripts/prefetch_pairs.py RECORDING.json [RECORDING.json ...]
"""

from __future__ import annotations

import json
import statistics
import sys


def pairs(recording: dict) -> list[tuple[str, dict, float, float]]:
    """(config key, knobs, µs without, µs with) for every overlapped variant measured both ways."""
    out = []
    for ev in recording["evaluations"]:
        m = ev.get("measurement")
        if not m:
            continue
        # (the other knobs, prefetch) -> median
        times = {(json.dumps({k: v for k, v in kn.items() if k != "prefetch"}, sort_keys=True), kn.get("prefetch", 0)): t
                 for kn, t in m["variants"]}
        c = ev["config"]
        key = f"{c['tile_m']}x{c['tile_n']}x{c['tile_k']}_c{c['cluster_m']}x{c['cluster_n']}_{c['kernel_schedule']}"
        for (base, prefetch), t in times.items():
            if prefetch and (base, 0) in times:
                out.append((key, json.loads(base), times[base, 0], t))
    return out


def main() -> None:
    gains = []
    for path in sys.argv[1:]:
        rec = json.load(open(path))
        layer = rec["layer"]
        print(f"{layer['M']}x{layer['N']}x{layer['K']} {layer['dtype']}")
        for key, knobs, without, with_ in pairs(rec):
            extra = f" splits {knobs['splits']}" if knobs.get("splits", 1) > 1 else ""
            if knobs.get("raster"):
                extra += f" raster {knobs['raster']} swizzle {knobs['swizzle']}"
            print(f"  {key}{extra}: {without:.2f} µs without, {with_:.2f} µs with the prefetch ({without - with_:+.2f})")
            gains.append(without - with_)
    if gains:
        print(f"{len(gains)} pairs: the prefetch saved {statistics.median(gains):+.2f} µs at the median, "
              f"{min(gains):+.2f} to {max(gains):+.2f}; faster in {sum(g > 0 for g in gains)}")


if __name__ == "__main__":
    main()
