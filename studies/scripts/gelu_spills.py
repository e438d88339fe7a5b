"""Which fused-GELU epilogues spill registers: ptxas's report of each build, no GPU needed.

    python studies/scripts/gelu_spills.py OUT.json [--jobs J] [--tile-n 160,224]

Two families, each built as the search would, with GELU after a bias in f16 and bf16, GELU
alone in f16, and SiLU after a bias in bf16 as the control:
- the staged epilogue (cooperative, persistent) on every tile of the space, on a layer whose
  output rows are unaligned either way (1001x1001x1024), at k-tile 64, and 32 for 256x96;
- the TMA epilogue on tiles of 96, 112 and 128 accumulator registers a thread, either
  orientation, on an aligned layer (1024x1024x1024);
- the fixup epilogue (split-K summed by the GEMM's last CTA) on pingpong tiles of 64-112
  accumulator registers a thread, either orientation, on a layer split-K serves (200x640x10240).
tests/test_space.py checks the space's GELU spill rules against the file. `--tile-n` builds only the
tiles of those widths (the ones a change of WGMMA shapes touches).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fixup_spills import survey

from cutsearch.problem import Layer
from cutsearch.space import Config


def _variants(m: int, n: int, k: int) -> list[Layer]:
    return [Layer(m=m, n=n, k=k, dtype="f16", bias=True, activation="gelu"),
            Layer(m=m, n=n, k=k, dtype="bf16", bias=True, activation="gelu"),
            Layer(m=m, n=n, k=k, dtype="f16", activation="gelu"),
            Layer(m=m, n=n, k=k, dtype="bf16", bias=True, activation="silu")]


STAGED_TILES = [(128, 64), (128, 96), (128, 128), (128, 160), (128, 192), (128, 224), (128, 256),
                (256, 32), (256, 64), (256, 96), (256, 128)]
TMA_TILES = [("pingpong", 64, 192), ("pingpong", 64, 224), ("pingpong", 64, 256), ("pingpong", 128, 128),
             ("cooperative", 128, 192), ("cooperative", 128, 224), ("cooperative", 128, 256),
             ("cooperative", 256, 96), ("cooperative", 256, 128)]
FIXUP_TILES = [(64, 128), (64, 160), (64, 192), (64, 224)]


def pairs():
    for layer in _variants(1001, 1001, 1024):
        for tm, tn in STAGED_TILES:
            for tk in (32, 64) if (tm, tn) == (256, 96) else (64,):
                for swap in (False, True):
                    yield layer, Config(tile_m=tm, tile_n=tn, tile_k=tk, kernel_schedule="cooperative",
                                        epilogue_schedule="staged", swap_ab=swap)
    for layer in _variants(1024, 1024, 1024):
        for schedule, tm, tn in TMA_TILES:
            for swap in (False, True):
                yield layer, Config(tile_m=tm, tile_n=tn, tile_k=64, kernel_schedule=schedule,
                                    epilogue_schedule="tma", swap_ab=swap)
    for layer in _variants(200, 640, 10240):
        for tm, tn in FIXUP_TILES:
            for swap in (False, True):
                yield layer, Config(tile_m=tm, tile_n=tn, tile_k=64, kernel_schedule="pingpong",
                                    epilogue_schedule="fixup", swap_ab=swap, split_k=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tile-n", default="", help="comma-separated widths; default: every tile")
    args = ap.parse_args()
    widths = {int(n) for n in args.tile_n.split(",") if n}
    survey(args.out, args.jobs, [(layer, c) for layer, c in pairs() if not widths or c.tile_n in widths],
           "python studies/scripts/gelu_spills.py " + " ".join(sys.argv[1:]))
