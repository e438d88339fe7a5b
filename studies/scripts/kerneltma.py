"""Experiment, not in the product: CUTLASS's non-warp-specialized `KernelTma` beside the ws kernel,
on the best ws tiles of decode and small_batch, in one run on one GPU.

`KernelTma` builds here only with the nosmem epilogue (its collective takes no visitor tree), and the
space keeps nosmem for unaligned output rows. So this script adds the schedule to codegen's tables
for its own run and measures each tile three ways: ws with the TMA epilogue (as searched), ws with
nosmem, and KernelTma with nosmem (the bias is nosmem's source C, as for unaligned rows).

    python studies/scripts/kerneltma.py OUT_DIR [--jobs 16]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from cutsearch import codegen
from cutsearch.problem import Layer
from cutsearch.space import Config

from variants import measure

codegen._KERNEL_SCHEDULES["tma"] = "Tma"
codegen._EPILOGUE_SCHEDULES[("tma", "nosmem")] = "NoSmemWarpSpecialized"

LAYERS = {
    "decode": (Layer(m=16, n=4096, k=4096, bias=True),
               Config(tile_m=64, tile_n=16, tile_k=128, cluster_m=2, kernel_schedule="ws",
                      epilogue_schedule="tma", tile_scheduler="grid", swap_ab=True)),
    "small_batch": (Layer(m=256, n=1024, k=1024, bias=True),
                    Config(tile_m=64, tile_n=32, tile_k=128, cluster_n=2, kernel_schedule="ws",
                           epilogue_schedule="tma", tile_scheduler="grid", swap_ab=True)),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (layer, ws) in LAYERS.items():
        nosmem = dataclasses.replace(ws, epilogue_schedule="nosmem")
        configs = [ws, nosmem, dataclasses.replace(nosmem, kernel_schedule="tma")]
        measure(layer, configs, (), args.out / f"kerneltma-{name}-f16.json", study=f"kerneltma-{name}",
                jobs=args.jobs, command=f"python studies/scripts/kerneltma.py OUT --jobs {args.jobs}")


if __name__ == "__main__":
    main()
