"""configs_bench.py with x's own copy offered past the space's bounds, as the trial in
studies/recorded/h200-2026-12-04-own-copy-split-k/ measured it: under split-K (each CTA a slice's
columns of its tile's rows) and up to 32 KiB of x a tile (the space stops at 16 KiB, and offers
none under split-K).

    python studies/scripts/own_copy_trial.py OUT.json LAYERS.toml NAME CONFIG [CONFIG ...] [--cache DIR]

With h200-knob-pairs.sh: BENCH=own_copy_trial.py KNOB=own_copy FREE=pdl,prefetch,views ...
"""

from __future__ import annotations

import dataclasses

import configs_bench
import cutsearch.evaluator
from cutsearch.problem import Layer
from cutsearch.space import (OWN_COPY_MAX_WRITERS, Config, Knobs, copies_x, kernel_problem, knob_grid,
                             own_copy_built, own_copy_load)

TRIAL_MAX_BYTES = 32 << 10  # the staging in shared memory (templates/mainloop.cuh, STAGE_BYTES)


def applies(layer: Layer, config: Config, splits: int) -> bool:
    kp = kernel_problem(layer, config)
    if not copies_x(layer, kp) or not own_copy_built(config):
        return False
    tile_bytes, writers = own_copy_load(layer, config, kp.k // splits if config.split_k else layer.k)
    return tile_bytes <= TRIAL_MAX_BYTES and writers <= OWN_COPY_MAX_WRITERS


def trial_grid(config: Config, layer: Layer) -> list[Knobs]:
    grid = [k for k in knob_grid(config, layer) if not k.own_copy]
    # No copy left to overlap or wait for: launch overlap only with split-K's reduction kernel.
    reduces = config.split_k and config.epilogue_schedule != "fixup"
    return grid + [dataclasses.replace(k, own_copy=1) for k in grid
                   if not (k.views or k.prefetch or (k.pdl and not reduces)) and applies(layer, config, k.splits)]


if __name__ == "__main__":
    cutsearch.evaluator.knob_grid = trial_grid  # the grid the evaluator measures on each kernel
    configs_bench.main()
