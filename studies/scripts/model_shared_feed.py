"""Does the cost model order measured kernels better when the SMs that run at once share L2's and
DRAM's bandwidth (the shared feed, in cutsearch/model.py) than with one feed rate an SM? On recorded H200 measurements
only, with both constant sets, each as it is and as it was (every SM at its old rate, whatever
the count of CTAs):
- the search batches recorded on 2026-12-02 and 2026-12-03, and those of 2026-12-04 (every
  recording there with 8 measured configs or more);
- the five exhaustive recordings, which measured the whole default space of their day: the model's
  rank of the first config within 2% of the fastest, and its Spearman.

    python studies/scripts/model_shared_feed.py
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from cutsearch import calibration, model
from cutsearch.efficiency import Recording, load_recordings

RECORDED = Path(__file__).resolve().parents[2] / "studies" / "recorded"
LATER = ("models8", "own-copy", "own-copy-split-k", "random6", "random9", "random10", "random11", "random12",
         "random13")


def batches(pattern: str) -> list[Recording]:
    recordings = load_recordings(p for p in sorted(RECORDED.glob(pattern)) if _is_recording(p))
    return [r for r in recordings if len(list(r.measured())) >= 8]


def _is_recording(path: Path) -> bool:
    data = json.loads(path.read_text())
    return isinstance(data, dict) and "layer" in data and isinstance(data.get("evaluations"), list)


def earlier() -> list[Recording]:
    return batches("h200-2026-12-0[23]-*/*.json")


def later() -> list[Recording]:
    return [r for name in LATER for r in batches(f"h200-2026-12-04-{name}/*.json")]


def exhaustive() -> list[Recording]:
    return load_recordings(sorted(RECORDED.glob("h200x2-2026-11-30-exhaustive/exhaustive-*-f16.json")))


def unshared(coeff: model.Coefficients) -> model.Coefficients:
    """The constants as they were: every SM at its share of the totals when all 132 pull at once,
    whatever the count of CTAs."""
    return dataclasses.replace(coeff, l2_feed_bytes_per_s=coeff.l2_total_bytes_per_s / model.SM_COUNT,
                               dram_feed_bytes_per_s=coeff.dram_total_bytes_per_s / model.SM_COUNT,
                               l2_total_bytes_per_s=math.inf, dram_total_bytes_per_s=math.inf)


def first_near_best(pts: list[calibration.Point], coeff: model.Coefficients) -> int:
    ranked = sorted((calibration.predict(p, coeff), p.measured_us) for p in pts)
    best = min(us for _, us in ranked)
    return next(i for i, (_, us) in enumerate(ranked) if us <= 1.02 * best)


def main() -> None:
    sets = {"2026-12-02/03": calibration.points(earlier()), "2026-12-04": calibration.points(later())}
    exhaust = {r.layer.shape: calibration.points([r]) for r in exhaustive()}
    for name, coeff in (("DEFAULT", model.DEFAULT), ("CALIBRATED", model.CALIBRATED)):
        for label, c in (("shared", coeff), ("before", unshared(coeff))):
            cells = []
            for when, pts in sets.items():
                score, _ = calibration.score(pts, c)
                cells.append(f"{when}: {len(score.spearman)} recordings, Spearman {score.spearman_mean:.3f}, "
                             f"top 4 near best {calibration.top_share(pts, c):.0%}")
            print(f"{name:<10} {label:<8} " + "; ".join(cells))
            print(" " * 20 + "exhaustive (first near best, Spearman): " + ", ".join(
                f"{shape} {first_near_best(pts, c)} {calibration.score(pts, c)[0].spearman_mean:.2f}"
                for shape, pts in exhaust.items()))


if __name__ == "__main__":
    main()
