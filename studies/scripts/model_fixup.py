"""Which sums split-K's slices faster, the fixup epilogue or the reduction kernel, and does the cost
model say so? On recorded H200 measurements only: every split-K kernel measured at one slice count
with both (calibration.summation_twins), the measured gap against the model's, with the model's
fixup term (model.FIXUP_SPLIT_US and the launch it saves) and without it.

    python studies/scripts/model_fixup.py
"""

from __future__ import annotations

import statistics
from pathlib import Path

from cutsearch import model
from cutsearch.calibration import Twins, summation_twins
from cutsearch.efficiency import load_recordings

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = [
    "h200x2-2026-12-01-fixup/variants-decode-f16.json",
    "h200x2-2026-12-01-fixup/variants-small_batch-f16.json",
    "h200x2-2026-12-01-fixup/split-k-narrow_long_k.json",
    "h200x2-2026-12-01-fixup/split-k-decode_long_k.json",
    "h200-2026-12-03-split-k-wide/proj_long_k.configs.json",
    *(f"h200-2026-12-04-random13/splitk-{name}.json" for name in ("draw2_3", "r12_1", "random5")),
]


def fixup_term_us(pair: Twins, coeff: model.Coefficients) -> float:
    return coeff.copy_overhead_us + model.FIXUP_SPLIT_US * (pair.splits - 1)


def main() -> None:
    twins = summation_twins(load_recordings(ROOT / "studies" / "recorded" / name for name in RECORDINGS))
    print(f"{len(twins)} pairs of one kernel at one slice count, fixup minus reduction kernel (µs):")
    for splits in sorted({t.splits for t in twins}):
        gaps = [t.measured_gap_us() for t in twins if t.splits == splits]
        print(f"  {splits:>2} slices: {len(gaps):>2} pairs, measured median {statistics.median(gaps):+.2f}, "
              f"fixup slower in {sum(g > 0 for g in gaps)}")
    for name, coeff in (("CALIBRATED", model.CALIBRATED), ("DEFAULT", model.DEFAULT)):
        for label, less in (("with the fixup term", 0.0), ("without it", 1.0)):
            predicted = [t.predicted_gap_us(coeff) - less * fixup_term_us(t, coeff) for t in twins]
            agree = sum((p > 0) == (t.measured_gap_us() > 0) for p, t in zip(predicted, twins))
            error = statistics.median(abs(p - t.measured_gap_us()) for p, t in zip(predicted, twins))
            print(f"{name:<10} {label:<20} predicted median {statistics.median(predicted):+.2f}, "
                  f"ordered as measured {agree} of {len(twins)}, median error {error:.2f}")


if __name__ == "__main__":
    main()
