"""Measures split-K where it should pay, with no recording to start from: for each layer of a
TOML file, the first configs a default search builds (the model's warm start, one kernel each),
beside their split-K twins with the reduction kernel and with the fixup epilogue
(variants.py's `split-k` and `fixup` kinds), in one run on one GPU.

    python studies/scripts/split_k_bench.py LAYERS.toml NAME OUT.json [--top 6] [--jobs 16]

Every kernel is built, checked against the float64 reference and timed beside cuBLAS by the
search's own evaluator, with every split count; OUT is a recording of them all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cutsearch.model import warm_start
from cutsearch.problem import load_layers
from cutsearch.space import Space
from variants import measure


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("layers", type=Path)
    ap.add_argument("name")
    ap.add_argument("out", type=Path)
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args()
    layer = load_layers(args.layers)[args.name]
    bases = warm_start(layer, list(Space(layer, split_k=(False,))), args.top)
    measure(layer, bases, ("split-k", "fixup"), args.out, study=f"split-k-{args.name}", jobs=args.jobs,
            command=f"python studies/scripts/split_k_bench.py {args.layers} {args.name} OUT --top {args.top}")


if __name__ == "__main__":
    main()
