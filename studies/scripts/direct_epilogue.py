"""The direct epilogue against the epilogues it would replace, on the best recorded configs of
layers whose y rows are not 16-byte aligned, in one run on one GPU.

    python studies/scripts/direct_epilogue.py OUT_DIR RECORDING.json [RECORDING.json ...] [--top 4]
                                              [--jobs 16] [--dtypes f16,bf16]

Each RECORDING's `top` fastest configs that store y with the nosmem or staged epilogue are the
bases; each gets its twin with the direct epilogue (templates/epilogue.cuh), and a staged base a
second twin with A and B swapped the other way (the staged epilogue's fast orientation of y is
the direct one's slow one; `direct_flipped` in the summary). Bases and twins are
built, checked against the float64 reference and timed beside cuBLAS by the search's own
evaluator over their whole knob grid (x's row views included where they apply), in each of
`dtypes` (default: the recording's). OUT_DIR gets one recording per layer and dtype, and
`summary.json`: per base, its best screened median and its twin's.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from cutsearch.efficiency import Recording
from cutsearch.outcome import Measurement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import measure_recordings  # noqa: E402


def summarize(recording: Path, bases: list) -> dict:
    rec = Recording.load(recording)
    by_key = {ev.config.key: ev.outcome for ev in rec.evaluations}

    def best(key: str) -> dict:
        o = by_key.get(key)
        if not isinstance(o, Measurement):
            return {"config": key, "failed": getattr(getattr(o, "kind", None), "value", "missing")}
        return {"config": key, "us": o.median_us, "knobs": o.knobs.to_dict(), "cublas_us": o.baseline.median_us,
                "speedup": o.speedup}

    pairs = []
    for b in bases:
        direct = dataclasses.replace(b, epilogue_schedule="direct")
        pair = {"base": best(b.key), "direct": best(direct.key)}
        if b.epilogue_schedule == "staged":
            pair["direct_flipped"] = best(dataclasses.replace(direct, swap_ab=not b.swap_ab).key)
        pairs.append(pair)
    return {"layer": rec.layer.to_dict(), "pairs": pairs}


def main() -> None:
    measure_recordings("direct_epilogue.py", "direct", ("direct",),
                       lambda layer, c: c.epilogue_schedule in ("nosmem", "staged"), summarize, report, top=4)


def report(layer_summary: dict) -> None:
    for pair in layer_summary["pairs"]:
        b, d, f = pair["base"], pair["direct"], pair.get("direct_flipped", {})
        print(f"  {b['config']}: {b.get('us', b.get('failed'))} -> direct {d.get('us', d.get('failed'))}"
              + (f", flipped {f.get('us', f.get('failed'))}" if f else ""), flush=True)


if __name__ == "__main__":
    main()
