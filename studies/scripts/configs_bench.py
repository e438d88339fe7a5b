"""Measures named configs of one layer, in one run on one GPU, whether or not the default space
offers them: a probe of a choice before the space takes it in.

    python studies/scripts/configs_bench.py OUT.json LAYERS.toml NAME CONFIG [CONFIG ...] [--jobs 16]

NAME is a layer of LAYERS.toml; each CONFIG is
`TMxTNxTK_cCMxCN_SCHEDULE_EPILOGUE_SCHEDULER[_swap][_pad]`, for example
`256x80x64_c2x1_cooperative_tma_persistent_swap` (`_pad`: N and K padded to 16 bytes). Every kernel
is built, checked against the float64 reference and timed beside cuBLAS by the search's own
evaluator over its whole knob grid; OUT is a recording of them all.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from cutsearch.problem import load_layers
from cutsearch.space import Config
from variants import measure

PATTERN = re.compile(r"(\d+)x(\d+)x(\d+)_c(\d)x(\d)_(\w+?)_(\w+?)_(persistent|streamk|grid)(_swap)?(_pad)?$")


def parse(text: str) -> Config:
    match = PATTERN.match(text)
    if match is None:
        raise SystemExit(f"not a config: {text!r} (want e.g. 256x80x64_c2x1_cooperative_tma_persistent_swap_pad)")
    tm, tn, tk, cm, cn, kernel, epilogue, scheduler, swap, pad = match.groups()
    return Config(tile_m=int(tm), tile_n=int(tn), tile_k=int(tk), cluster_m=int(cm), cluster_n=int(cn),
                  kernel_schedule=kernel, epilogue_schedule=epilogue, tile_scheduler=scheduler, swap_ab=bool(swap),
                  pad=bool(pad))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("layers", type=Path)
    ap.add_argument("name")
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args()
    layers = load_layers(args.layers)
    if args.name not in layers:
        raise SystemExit(f"{args.name} is not in {args.layers}: {', '.join(layers)}")
    layer = layers[args.name]
    measure(layer, [parse(c) for c in args.configs], (), args.out, study=f"configs-{layer.slug}", jobs=args.jobs,
            command=f"python studies/scripts/configs_bench.py OUT {args.layers} {args.name} {' '.join(args.configs)}")


if __name__ == "__main__":
    main()
