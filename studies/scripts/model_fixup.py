"""Which sums split-K's slices faster, the fixup epilogue or the reduction kernel, and does the cost
model say so? On recorded H200 measurements only: every split-K kernel measured at one slice count
with both (calibration.summation_twins), the measured gap against the model's, with the model's
fixup term (model.FIXUP_SPLIT_US and the launch it saves) and without it.

    python studies/scripts/model_fixup.py [--per-byte]

With --per-byte it tries the fixup priced by the bytes of its partials instead of by the slice
(µs per MB, least squares over the pairs, with DEFAULT): the pairs it orders as measured, with each recording's
pairs left out of the fit in turn, on the searches recorded since (HELD_OUT), and what it does to
the model's order of every recorded search batch (model_shared_feed's sets).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

from cutsearch import calibration, model
from cutsearch.calibration import Twins, summation_twins
from cutsearch.efficiency import load_recordings
from cutsearch.problem import Layer
from cutsearch.space import Config, Knobs

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = [
    "h200x2-2026-12-01-fixup/variants-decode-f16.json",
    "h200x2-2026-12-01-fixup/variants-small_batch-f16.json",
    "h200x2-2026-12-01-fixup/split-k-narrow_long_k.json",
    "h200x2-2026-12-01-fixup/split-k-decode_long_k.json",
    "h200-2026-12-03-split-k-wide/proj_long_k.configs.json",
    *(f"h200-2026-12-04-random13/splitk-{name}.json" for name in ("draw2_3", "r12_1", "random5")),
]
# Searches on the model with the fixup term, not used to set it.
HELD_OUT = ["h200-2026-12-05-reruns/draw5_0.json", "h200-2026-12-05-reruns/draw9_2.json"]


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


def tiles_and_slices(layer: Layer, config: Config, knobs: Knobs | None) -> tuple[int, int]:
    kp = model.kernel_problem(layer, config)
    tiles = model.output_ctas(kp, config)
    cluster = config.cluster_m * config.cluster_n
    return tiles, model._splits(config, knobs, math.ceil(kp.k / config.tile_k), model.SM_COUNT // cluster * cluster, tiles)


def partial_mb(layer: Layer, config: Config, knobs: Knobs | None) -> float:
    """The fp32 partials the fixup writes: a tile's for each of its slices."""
    tiles, splits = tiles_and_slices(layer, config, knobs)
    return tiles * splits * config.tile_m * config.tile_n * 4 / 1e6


def without_term_us(pair: Twins) -> float:
    return pair.predicted_gap_us(model.DEFAULT) - model.FIXUP_SPLIT_US * (pair.splits - 1)


def fit_us_per_mb(twins: list[Twins]) -> float:
    x = np.array([partial_mb(t.layer, *t.fixup[:2]) for t in twins])
    y = np.array([t.measured_gap_us() - without_term_us(t) for t in twins])
    return float(x @ y / (x @ x))


def ordered(twins: list[Twins], us_per_mb: float) -> int:
    return sum((without_term_us(t) + us_per_mb * partial_mb(t.layer, *t.fixup[:2]) > 0) == (t.measured_gap_us() > 0)
               for t in twins)


@contextlib.contextmanager
def priced_per_byte(us_per_mb: float) -> Iterator[None]:
    """model.predict_us with the fixup's slice term replaced by its partials' bytes."""
    plain = model.predict_us

    def predict_us(layer: Layer, config: Config, knobs: Knobs | None = None,
                   coeff: model.Coefficients = model.DEFAULT) -> float:
        t = plain(layer, config, knobs, coeff)
        if config.split_k and config.epilogue_schedule == "fixup":
            splits = tiles_and_slices(layer, config, knobs)[1]
            t += us_per_mb * partial_mb(layer, config, knobs) - model.FIXUP_SPLIT_US * (splits - 1)
        return t

    model.predict_us = predict_us
    try:
        yield
    finally:
        model.predict_us = plain


def per_byte(twins: list[Twins]) -> None:
    from model_shared_feed import earlier, every, held_out, later

    us_per_mb = fit_us_per_mb(twins)
    left_out = sum(ordered([t], fit_us_per_mb([u for u in twins if u.recording != t.recording])) for t in twins)
    error = statistics.median(abs(without_term_us(t) + us_per_mb * partial_mb(t.layer, *t.fixup[:2]) - t.measured_gap_us())
                              for t in twins)
    held = summation_twins(load_recordings(ROOT / "studies" / "recorded" / name for name in HELD_OUT))
    print(f"per byte: {us_per_mb:.2f} µs per MB of partials; ordered as measured {ordered(twins, us_per_mb)} of "
          f"{len(twins)} ({left_out} with each recording left out of the fit), median error {error:.2f}; "
          f"held out: {ordered(held, us_per_mb)} of {len(held)}, against "
          f"{sum((t.predicted_gap_us(model.DEFAULT) > 0) == (t.measured_gap_us() > 0) for t in held)} by slice")
    sets = {"2026-12-02/03": earlier(), "2026-12-04": later(), "2026-12-05": held_out(), "all": every()}
    for label, context in (("by slice", contextlib.nullcontext()), ("per byte", priced_per_byte(us_per_mb))):
        with context:
            cells = []
            for when, recordings in sets.items():
                pts = calibration.points(recordings)
                score, _ = calibration.score(pts, model.DEFAULT)
                cells.append(f"{when}: Spearman {score.spearman_mean:.3f}, top 4 near best "
                             f"{calibration.top_share(pts, model.DEFAULT):.0%}")
        print(f"batches, fixup priced {label}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
    if "--per-byte" in sys.argv:
        per_byte(summation_twins(load_recordings(ROOT / "studies" / "recorded" / name for name in RECORDINGS)))
