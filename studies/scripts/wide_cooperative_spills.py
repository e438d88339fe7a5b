"""Which fused activations spill registers on the cooperative 128x224 TMA tile, under either tile
scheduler: ptxas's report of each build, no GPU needed.

    python studies/scripts/wide_cooperative_spills.py OUT.json [--jobs J]

That tile gives each thread 112 accumulator registers, as the 64x224 pingpong tile does. The GELU
survey (studies/recorded/local-2026-12-02-gelu-spills-2/) built it clean under the persistent
scheduler, but not with SiLU in f16; a search on the H100 then saw it spill with f16, a bias and
SiLU. Built on that search's layer, 7239x512x4160, each way the space can build it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fixup_spills import survey

from cutsearch.problem import Layer
from cutsearch.space import Config

M, N, K = 7239, 512, 4160
VARIANTS = [("f16", True, "silu"), ("f16", False, "silu"), ("bf16", True, "silu"), ("bf16", False, "silu"),
            ("f16", True, "gelu"), ("bf16", True, "gelu"), ("f16", False, "gelu"), ("f16", True, "relu")]


def pairs():
    for dtype, bias, activation in VARIANTS:
        layer = Layer(m=M, n=N, k=K, dtype=dtype, bias=bias, activation=activation)
        for scheduler in ("persistent", "streamk"):
            for swap in (False, True):
                yield layer, Config(tile_m=128, tile_n=224, tile_k=64, kernel_schedule="cooperative",
                                    epilogue_schedule="tma", tile_scheduler=scheduler, swap_ab=swap)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    survey(args.out, args.jobs, list(pairs()),
           "python studies/scripts/wide_cooperative_spills.py " + " ".join(sys.argv[1:]))
