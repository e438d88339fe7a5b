"""Does the cost model order measured kernels better when the SMs that run at once share L2's and
DRAM's bandwidth (the shared feed, in cutsearch/model.py) than with one feed rate an SM? On
recorded H200 measurements only, with both constant sets, each as it is and as it was (every SM
at its old rate, whatever the count of CTAs):
- the search batches recorded on 2026-12-02 and 2026-12-03, those of 2026-12-04, those of
  2026-12-05 (searched on the change, so held out from it), and every recording (each with 8
  measured configs or more), and the recordings CALIBRATED was fitted to; apart, the batches
  recorded on an H100, where the constants were not measured;
- every pair of configs that differ only in swapping A and B, measured in one run more than 2%
  apart: how often the model orders the pair as measured;
- the five exhaustive recordings, which measured the whole default space of their day: the model's
  rank of the first config within 2% of the fastest, and its Spearman.

    python studies/scripts/model_shared_feed.py [--first-batches] [--replay] [--h100-dram]

With --first-batches it also counts the layers of studies/*.toml whose first batch of 32
(model.warm_start) the change alters; with --replay it replays searches over the exhaustive
recordings (efficiency.replay_strategy) with both; with --h100-dram it scores the H100 set again
with the DRAM totals scaled to the H100's datasheet bandwidth.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Iterator

from cutsearch import calibration, model
from cutsearch.efficiency import Recording, load_recordings, recordings_among, replay_strategy
from cutsearch.problem import Layer, load_layers
from cutsearch.space import Config, Space, knob_grid

RECORDED = Path(__file__).resolve().parents[2] / "studies" / "recorded"
LATER = ("models8", "own-copy", "own-copy-split-k", "random6", "random9", "random10", "random11", "random12",
         "random13")


def batches(pattern: str) -> list[Recording]:
    return recordings_among(sorted(RECORDED.glob(pattern)), 8)


def earlier() -> list[Recording]:
    return batches("h200-2026-12-0[23]-*/*.json")


def later() -> list[Recording]:
    return [r for name in LATER for r in batches(f"h200-2026-12-04-{name}/*.json")]


def held_out() -> list[Recording]:
    """The search batches recorded after the change, on its first batches."""
    return batches("h200-2026-12-05-*/*.json")


def other_card() -> list[Recording]:
    """Search batches recorded on an H100: how far the H200's constants carry to another card."""
    return batches("h100*/*.json")


def every() -> list[Recording]:
    """Every H200 recording: the model's constants are the H200's."""
    return batches("h200*/*.json") + batches("h200*/*/*.json")


def swap_pairs(recordings: list[Recording]) -> list[tuple[Layer, Config, Config, float]]:
    """(layer, config, its swapped twin, measured time of the twin minus the config's)."""
    pairs = []
    for rec in recordings:
        measured = {e.config: e.outcome.median_us for e in rec.measured()}
        for config, us in measured.items():
            twin = dataclasses.replace(config, swap_ab=True)
            if not config.swap_ab and twin in measured and abs(measured[twin] - us) > 0.02 * min(us, measured[twin]):
                pairs.append((rec.layer, config, twin, measured[twin] - us))
    return pairs


def exhaustive() -> list[Recording]:
    return load_recordings(sorted(RECORDED.glob("h200x2-2026-11-30-exhaustive/exhaustive-*-f16.json")))


def unshared(coeff: model.Coefficients) -> model.Coefficients:
    """The constants as they were: every SM at its share of the totals when all 132 pull at once,
    whatever the count of CTAs."""
    return dataclasses.replace(coeff, l2_feed_bytes_per_s=coeff.l2_total_bytes_per_s / model.SM_COUNT,
                               dram_feed_bytes_per_s=coeff.dram_total_bytes_per_s / model.SM_COUNT,
                               l2_total_bytes_per_s=math.inf, dram_total_bytes_per_s=math.inf)


def predicted(layer: Layer, config: Config, coeff: model.Coefficients) -> float:
    return model.best_knobs(layer, config, knob_grid(config, layer), coeff)[1]


def first_near_best(pts: list[calibration.Point], coeff: model.Coefficients) -> int:
    ranked = sorted((calibration.predict(p, coeff), p.measured_us) for p in pts)
    best = min(us for _, us in ranked)
    return next(i for i, (_, us) in enumerate(ranked) if us <= 1.02 * best)


def main() -> None:
    recordings = every()
    fitted_on = json.loads((RECORDED.parent / "model-calibration.json").read_text())["recordings"]
    sets = {"2026-12-02/03": calibration.points(earlier()), "2026-12-04": calibration.points(later()),
            "2026-12-05 (held out)": calibration.points(held_out()),
            "all": calibration.points(recordings), "H100 (other card)": calibration.points(other_card()),
            "CALIBRATED's own": calibration.points(load_recordings(RECORDED.parents[1] / r["recording"] for r in fitted_on))}
    pairs = swap_pairs(recordings)
    exhaust = {r.layer.shape: calibration.points([r]) for r in exhaustive()}
    for name, coeff in (("DEFAULT", model.DEFAULT), ("CALIBRATED", model.CALIBRATED)):
        for label, c in (("shared", coeff), ("before", unshared(coeff))):
            cells = []
            for when, pts in sets.items():
                score, _ = calibration.score(pts, c)
                cells.append(f"{when}: {len(score.spearman)} recordings, Spearman {score.spearman_mean:.3f}, "
                             f"top 4 near best {calibration.top_share(pts, c):.0%}")
            print(f"{name:<10} {label:<8} " + "; ".join(cells))
            agree = sum((predicted(layer, twin, c) > predicted(layer, config, c)) == (gap > 0)
                        for layer, config, twin, gap in pairs)
            print(" " * 20 + f"swapped twins ordered as measured: {agree} of {len(pairs)}")
            print(" " * 20 + "exhaustive (first near best, Spearman): " + ", ".join(
                f"{shape} {first_near_best(pts, c)} {calibration.score(pts, c)[0].spearman_mean:.2f}"
                for shape, pts in exhaust.items()))


@contextlib.contextmanager
def unshared_model() -> Iterator[None]:
    """Both constant sets as they were, in place: default arguments across the model and the
    replay hold these two objects."""
    saved = [(c, dataclasses.asdict(c)) for c in (model.DEFAULT, model.CALIBRATED)]
    for coeff, _ in saved:
        for name, value in dataclasses.asdict(unshared(coeff)).items():
            object.__setattr__(coeff, name, value)
    try:
        yield
    finally:
        for coeff, values in saved:
            for name, value in values.items():
                object.__setattr__(coeff, name, value)


def first_batches_changed() -> None:
    layers = {layer for path in sorted(RECORDED.parent.glob("*.toml")) for layer in load_layers(path).values()}
    changed = 0
    for layer in layers:
        space = list(Space(layer))
        with unshared_model():
            before = model.warm_start(layer, space, 32)
        changed += set(before) != set(model.warm_start(layer, space, 32))
    print(f"first batches of 32 changed: {changed} of {len(layers)} layers in studies/*.toml")


def replays() -> None:
    """Trials and replayed seconds a default search takes to come within 2% on each exhaustive
    recording, and the trials plain TPE takes: means of 5 seeds, before and after."""
    for label in ("before", "shared"):
        with unshared_model() if label == "before" else contextlib.nullcontext():
            cells = []
            for rec in exhaustive():
                default = [replay_strategy(rec, "tpe+warm", seed=seed) for seed in range(5)]
                tpe = statistics.fmean(replay_strategy(rec, "tpe", seed=seed).trials for seed in range(5))
                cells.append(f"{rec.layer.shape} {statistics.fmean(r.trials for r in default):.1f} / "
                             f"{statistics.fmean(r.wall_s for r in default):.1f} s ({tpe:.1f})")
        print(f"replayed, default search (plain TPE), {label}: " + ", ".join(cells))


def other_card_dram(scale: float) -> None:
    """The H100 set again with each constant set's DRAM total scaled (3.35 / 4.8 is the datasheets'
    ratio of the H100's bandwidth to the H200's)."""
    pts = calibration.points(other_card())
    for name, coeff in (("DEFAULT", model.DEFAULT), ("CALIBRATED", model.CALIBRATED)):
        c = dataclasses.replace(coeff, dram_total_bytes_per_s=coeff.dram_total_bytes_per_s * scale)
        score, _ = calibration.score(pts, c)
        print(f"{name:<10} DRAM x{scale:.2f}  H100 (other card): {len(score.spearman)} recordings, "
              f"Spearman {score.spearman_mean:.3f}, top 4 near best {calibration.top_share(pts, c):.0%}")


if __name__ == "__main__":
    main()
    if "--h100-dram" in sys.argv:
        other_card_dram(3.35 / 4.8)
    if "--first-batches" in sys.argv:
        first_batches_changed()
    if "--replay" in sys.argv:
        replays()
