"""Does a cluster feed its tiles faster? The cost model divides a clustered tile's operand bytes by
model.Coefficients.multicast_gain (TMA multicast shares one operand's loads across the cluster).
This scores, on recorded measurements only, that gain and smaller ones, with both constant sets:
- within-layer Spearman and the share of recordings whose model top 4 holds a config within 2% of
  the fastest, on every H200 recording and, apart, on the H100 ones;
- every pair of measured configs that differ only in their cluster (1x1 against a cluster of 2),
  with the same run-time knobs, measured more than 2% apart: how often the model orders the pair
  as measured, and the measured ratios;
- the five exhaustive H200 recordings: the model's rank of the first config within 2% of the
  fastest, and its Spearman.

    python studies/scripts/model_multicast.py [GAIN ...] [--first-batches] [--replay]

With --first-batches it also counts the layers of studies/*.toml whose first batch of 32
(model.warm_start) CALIBRATED at each gain gives otherwise than the model as it is; with --replay
it replays default searches over the exhaustive recordings (efficiency.replay_strategy) with
CALIBRATED at each gain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Iterator

from cutsearch import calibration, model
from cutsearch.efficiency import Recording, replay_strategy
from cutsearch.problem import Layer, load_layers
from cutsearch.space import Config, Space

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_shared_feed import RECORDED, every, exhaustive, first_near_best, other_card, predicted  # noqa: E402

GAINS = (model.DEFAULT.multicast_gain, 1.1, 1.0, 0.9)


def cluster_pairs(recordings: list[Recording]) -> list[tuple[Layer, Config, Config, float]]:
    """(layer, a 1x1 config, its clustered twin, measured time of the twin over the 1x1's), of
    twins timed with the same knobs and more than 2% apart."""
    pairs = []
    for rec in recordings:
        measured = {(e.config, e.outcome.knobs): e.outcome.median_us for e in rec.measured()}
        for (config, knobs), us in measured.items():
            if config.gemv or (config.cluster_m, config.cluster_n) != (1, 1):
                continue
            for shape in ((1, 2), (2, 1)):
                twin = dataclasses.replace(config, cluster_m=shape[0], cluster_n=shape[1])
                if (twin_us := measured.get((twin, knobs))) and abs(twin_us - us) > 0.02 * min(us, twin_us):
                    pairs.append((rec.layer, config, twin, twin_us / us))
    return pairs


def main(gains: tuple[float, ...]) -> None:
    h200, h100 = every(), other_card()
    sets = {"H200": calibration.points(h200), "H100": calibration.points(h100)}
    pairs = {"H200": cluster_pairs(h200), "H100": cluster_pairs(h100)}
    for card, found in pairs.items():
        ratios = [ratio for *_, ratio in found]
        if ratios:
            print(f"{card}: {len(ratios)} cluster twins more than 2% apart, the cluster slower in "
                  f"{sum(r > 1 for r in ratios)}; measured twin / 1x1: median {statistics.median(ratios):.3f}, "
                  f"{min(ratios):.2f} to {max(ratios):.2f}")
    exhaust = {r.layer.shape: calibration.points([r]) for r in exhaustive()}
    for name, base in (("DEFAULT", model.DEFAULT), ("CALIBRATED", model.CALIBRATED)):
        for gain in gains:
            c = dataclasses.replace(base, multicast_gain=gain)
            cells = []
            for card, pts in sets.items():
                score, _ = calibration.score(pts, c)
                agree = sum((predicted(layer, twin, c) > predicted(layer, config, c)) == (ratio > 1)
                            for layer, config, twin, ratio in pairs[card])
                cells.append(f"{card}: {len(score.spearman)} recordings, Spearman {score.spearman_mean:.3f}, "
                             f"top 4 near best {calibration.top_share(pts, c):.0%}, "
                             f"cluster twins ordered {agree} of {len(pairs[card])}")
            print(f"{name:<10} gain {gain:<5} " + "; ".join(cells))
            print(" " * 22 + "exhaustive (first near best, Spearman): " + ", ".join(
                f"{shape} {first_near_best(pts, c)} {calibration.score(pts, c)[0].spearman_mean:.2f}"
                for shape, pts in exhaust.items()))


@contextlib.contextmanager
def calibrated_gain(gain: float) -> Iterator[None]:
    """CALIBRATED with this gain, in place: warm starts and replays read the module's object."""
    saved = model.CALIBRATED.multicast_gain
    object.__setattr__(model.CALIBRATED, "multicast_gain", gain)
    try:
        yield
    finally:
        object.__setattr__(model.CALIBRATED, "multicast_gain", saved)


def first_batches_changed(gains: tuple[float, ...]) -> None:
    """Layers of studies/*.toml whose first batch of 32 differs from the model's own, with
    CALIBRATED at each gain (DEFAULT as it is)."""
    layers = {layer for path in sorted(RECORDED.parent.glob("*.toml")) for layer in load_layers(path).values()}
    spaces = {layer: list(Space(layer)) for layer in layers}
    own = {layer: set(model.warm_start(layer, space, 32)) for layer, space in spaces.items()}
    for gain in gains:
        with calibrated_gain(gain):
            changed = sum(set(model.warm_start(layer, space, 32)) != own[layer] for layer, space in spaces.items())
        print(f"CALIBRATED gain {gain}: first batches of 32 changed in {changed} of {len(layers)} layers "
              "in studies/*.toml")


def replays(gains: tuple[float, ...]) -> None:
    """Trials a default search takes to come within 2% of each exhaustive recording's fastest,
    replayed (means of 5 seeds), with CALIBRATED at each gain (DEFAULT as it is)."""
    for gain in gains:
        with calibrated_gain(gain):
            trials = {rec.layer.shape: statistics.fmean(replay_strategy(rec, "tpe+warm", seed=seed).trials
                                                        for seed in range(5))
                      for rec in exhaustive()}
        cells = [f"{shape} {mean:.1f}" for shape, mean in trials.items()]
        print(f"CALIBRATED gain {gain}: replayed default search, trials to within 2%: " + ", ".join(cells))


if __name__ == "__main__":
    try:
        chosen = tuple(float(a) for a in sys.argv[1:] if not a.startswith("--")) or GAINS
    except ValueError as e:
        sys.exit(f"error: each GAIN is a number ({e})")
    main(chosen)
    if "--first-batches" in sys.argv:
        first_batches_changed(chosen)
    if "--replay" in sys.argv:
        replays(chosen)
