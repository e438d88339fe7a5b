"""Which fixup-epilogue tiles spill registers: ptxas's report of each build, no GPU needed.

    python studies/scripts/fixup_spills.py OUT.json [--jobs J]

Builds the split-K fixup kernel of each config below on one long-K layer (200x640x10240) in three
epilogue variants (f16 with nothing fused, f16 with bias and ReLU, bf16 with bias), as the search
would, and records each build's registers and spill bytes. tests/test_space.py checks the
space's fixup spill rules against the file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from cutsearch.cache import Cache
from cutsearch.codegen import cutlass_version, render
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cutsearch.problem import Layer
from cutsearch.space import Config

LAYERS = [Layer(m=200, n=640, k=10240, dtype="f16"),
          Layer(m=200, n=640, k=10240, dtype="f16", bias=True, activation="relu"),
          Layer(m=200, n=640, k=10240, dtype="bf16", bias=True)]
PINGPONG_TILES = [(64, 96), (64, 128), (64, 160), (64, 192), (64, 224), (128, 64), (128, 96)]
COOPERATIVE_TILES = [(128, 160), (128, 192), (256, 96)]
CLUSTERS = [(1, 1), (1, 2), (2, 1)]


def configs():
    for schedule, tiles in (("pingpong", PINGPONG_TILES), ("cooperative", COOPERATIVE_TILES)):
        for tm, tn in tiles:
            # Every cluster for 128x96 pingpong, whose builds differ by cluster; 1x1 elsewhere.
            for cm, cn in CLUSTERS if (schedule, tm, tn) == ("pingpong", 128, 96) else CLUSTERS[:1]:
                for swap in (False, True):
                    yield Config(tile_m=tm, tile_n=tn, tile_k=64, cluster_m=cm, cluster_n=cn,
                                 kernel_schedule=schedule, epilogue_schedule="fixup", swap_ab=swap, split_k=True)


def survey(out: Path, jobs: int, pairs, command: str) -> None:
    """Build each (layer, config) of `pairs` as the search would; record ptxas's report of each."""
    toolchain = Toolchain.find(cutlass_version())
    compiler = Compiler(Cache(Path(tempfile.mkdtemp())), toolchain, jobs=jobs)
    cases = {(layer, config): render(layer, config) for layer, config in pairs}
    start = time.time()
    records = []
    for (layer, config), built in compiler.compile_many(cases.items()):
        record = {"layer": layer.to_dict(), "config": config.to_dict()}
        if isinstance(built, CompiledKernel):
            record.update(registers=built.ptxas.registers, spill_bytes=built.ptxas.spill_bytes)
        else:
            record["failure"] = f"{built.kind}: {built.message}"
        records.append(record)
        print(config.key, layer.dtype, layer.bias, layer.activation, record.get("spill_bytes"), flush=True)
    out.write_text(json.dumps({"recorded": "ptxas reports of real nvcc builds; nothing ran on a GPU",
                               "command": command, "nvcc": toolchain.nvcc_version, "cutlass": cutlass_version(),
                               "build_s": round(time.time() - start), "records": records}, indent=1))


def main(out: Path, jobs: int) -> None:
    survey(out, jobs, [(layer, config) for layer in LAYERS for config in configs()],
           "python studies/scripts/fixup_spills.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    main(args.out, args.jobs)
