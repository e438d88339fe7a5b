"""Does the cost model pick the slice count of a split-K kernel with a reduction kernel? On
recorded H200 measurements only: for each such config, the model's predictions over the slice
counts measured on it (each without launch overlap) against the measured times, with the model's
term for the reduction kernel's rounds of loads (model.REDUCE_ROUND_US) and without it.

    python studies/scripts/model_reduce_splits.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from cutsearch import model
from cutsearch.calibration import rank_correlation
from cutsearch.problem import Layer
from cutsearch.space import Config, Knobs

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = [
    "h200-2026-11-30-split-k/model-top24-decode-f16.json",
    "h200x2-2026-12-01-fixup/split-k-narrow_long_k.json",
    "h200x2-2026-12-01-fixup/unseen/narrow_long_k.json",
    # Of the kernel that spreads a tiny output's slices over a warp's lanes (the recordings of
    # split-k-padded/ measured the kernel before it, which summed them one after another).
    *(f"h200-2026-12-03-tiny-out/lanes/{name}.json" for name in ("tiny_long", "dot", "cls_head", "value_head")),
    *(f"h200-2026-12-03-heads/{name}.json" for name in ("head0", "head1", "head2", "head3", "headb0", "headb1", "headb2")),
]


def configs(path: Path):
    """(layer, config, [(knobs, measured µs)]) of each split-K config with a reduction kernel."""
    data = json.loads(path.read_text())
    layer = Layer.from_dict(data["layer"])
    for e in data["evaluations"]:
        config = Config.from_dict(e["config"])
        if config.split_k and config.epilogue_schedule != "fixup" and e.get("measurement"):
            timed = [(Knobs(**k), t) for k, t in e["measurement"]["variants"] if not k.get("pdl")]
            if len({k.splits for k, _ in timed}) > 2:
                yield layer, config, timed


def main() -> None:
    kept = model.REDUCE_ROUND_US
    for label, term in (("with the rounds term", kept), ("without it", 0.0)):
        model.REDUCE_ROUND_US = term
        for name in RECORDINGS:
            rhos, picked = [], []
            for layer, config, timed in configs(ROOT / "studies" / "recorded" / name):
                predicted = [model.predict_us(layer, config, k) for k, _ in timed]
                measured = [t for _, t in timed]
                rhos.append(rank_correlation(predicted, measured))
                # The measured time of the model's pick, over the best measured one.
                picked.append(measured[predicted.index(min(predicted))] / min(measured))
            if rhos:
                print(f"{label:<24} {name:<58} configs {len(rhos):>2}  Spearman {statistics.median(rhos):.2f}  "
                      f"pick/best {statistics.median(picked):.2f} (worst {max(picked):.2f})")
    model.REDUCE_ROUND_US = kept


if __name__ == "__main__":
    main()
