"""Measures named configs of one layer, in one run on one GPU, whether or not the default space
offers them: a probe of a choice before the space takes it in.

    python studies/scripts/configs_bench.py OUT.json LAYERS.toml NAME CONFIG [CONFIG ...] [--jobs 16]
                                            [--cache DIR [--build-only]]

NAME is a layer of LAYERS.toml; each CONFIG is
`TMxTNxTK_cCMxCN_SCHEDULE_EPILOGUE_SCHEDULER[_swap][_pad][_splitk]`, for example
`256x80x64_c2x1_cooperative_tma_persistent_swap` (`_pad`: N and K padded to 16 bytes; `_splitk`: K
split on the batch dimension, its slice counts measured as knobs). Every kernel
is built, checked against the float64 reference and timed beside cuBLAS by the search's own
evaluator over its whole knob grid; OUT is a recording of them all. `--build-only` fills the
compile cache DIR and measures nothing, so that several layers' kernels can be built at once
and then measured one layer at a time.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from cutsearch.cache import Cache
from cutsearch.codegen import cutlass_version, render
from cutsearch.compiler import Compiler, Toolchain
from cutsearch.problem import load_layers
from cutsearch.space import Config
from variants import measure

PATTERN = re.compile(r"(\d+)x(\d+)x(\d+)_c(\d)x(\d)_(\w+?)_(\w+?)_(persistent|streamk|grid)(_swap)?(_pad)?(_splitk)?$")


def parse(text: str) -> Config:
    match = PATTERN.match(text)
    if match is None:
        raise SystemExit(f"not a config: {text!r} (want e.g. 256x80x64_c2x1_cooperative_tma_persistent_swap_pad)")
    tm, tn, tk, cm, cn, kernel, epilogue, scheduler, swap, pad, split = match.groups()
    return Config(tile_m=int(tm), tile_n=int(tn), tile_k=int(tk), cluster_m=int(cm), cluster_n=int(cn),
                  kernel_schedule=kernel, epilogue_schedule=epilogue, tile_scheduler=scheduler, swap_ab=bool(swap),
                  pad=bool(pad), split_k=bool(split))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("layers", type=Path)
    ap.add_argument("name")
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--cache", type=Path, default=None, help="compile cache (default: a fresh one)")
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args()
    if args.build_only and args.cache is None:
        raise SystemExit("--build-only needs --cache DIR")
    layers = load_layers(args.layers)
    if args.name not in layers:
        raise SystemExit(f"{args.name} is not in {args.layers}: {', '.join(layers)}")
    layer = layers[args.name]
    configs = [parse(c) for c in args.configs]
    if args.build_only:
        compiler = Compiler(Cache(args.cache), Toolchain.find(cutlass_version()), jobs=args.jobs)
        for config, kernel in compiler.compile_many((c, render(layer, c)) for c in configs):
            print(f"{layer.slug} {config.key}: {type(kernel).__name__}", flush=True)
        return
    measure(layer, configs, (), args.out, study=f"configs-{layer.slug}", jobs=args.jobs, cache_dir=args.cache,
            command=f"python studies/scripts/configs_bench.py OUT {args.layers} {args.name} {' '.join(args.configs)}")


if __name__ == "__main__":
    main()
