"""Does every config the space offers build clean? nvcc builds of random configs of random layers,
no GPU needed.

    python studies/scripts/space_survey.py OUT.json --seed SEED [--layers 40] [--per-layer 3] [--jobs J] [--all-stages]
        [--output contiguous|padded|transposed] [--bias] [--epilogues nosmem,staged,direct]

The searches measure the cost model's favourites, so a corner of the space they never reach
could fail to build, or spill, on a layer nobody has tried. Here the layers are drawn as
random_layers.py draws them (its three distributions in turn), each with a random caller
layout, and each layer's configs are drawn uniformly from its whole valid
space, split-K included wherever the layer allows it (a layer whose space is empty gets none:
`Space.unserved` says why). Each is rendered and built as the search would, and ptxas's report is
recorded: a failure, a spill or serialized WGMMA is a defect of the space's rules. Builds run
through a fresh compile cache, so every one is real. `--all-stages` draws from the space that
`cutsearch search --all-stages` searches: explicit stage counts too. `--output`, `--bias` and
`--epilogues` survey one corner: every layer with that output layout, a bias, and configs with
those epilogues only (layers whose space holds none are drawn again).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from random_layers import draw

from cutsearch.cache import Cache
from cutsearch.codegen import cutlass_version, render
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cutsearch.problem import Layer
from cutsearch.space import DEFAULT_STAGES, STAGES, Space

DISTRIBUTIONS = ("drawn", "models", "heads")


def layers(rng: random.Random, *, output: str | None = None, bias: bool = False) -> Iterator[Layer]:
    """Layers drawn without end, the three distributions in turn."""
    for i in itertools.count():
        d = draw(rng, DISTRIBUTIONS[i % len(DISTRIBUTIONS)])
        layout = {"input": rng.choice(["contiguous", "contiguous", "padded"]),
                  "output": output or rng.choice(["contiguous", "contiguous", "padded", "transposed"])}
        yield Layer(m=d["M"], n=d["N"], k=d["K"], dtype=d["dtype"], bias=bias or d["bias"],
                    activation=d["activation"], **layout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--per-layer", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--all-stages", action="store_true")
    parser.add_argument("--output", choices=("contiguous", "padded", "transposed"))
    parser.add_argument("--bias", action="store_true")
    parser.add_argument("--epilogues", type=lambda v: tuple(v.split(",")), help="comma-separated epilogue schedules")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    pairs, drawn = [], 0
    for layer in layers(rng, output=args.output, bias=args.bias):
        if drawn == args.layers:
            break
        space = [c for c in Space(layer, split_k=(False, True), stages=STAGES if args.all_stages else DEFAULT_STAGES)
                 if args.epilogues is None or c.epilogue_schedule in args.epilogues]
        if args.epilogues is not None and not space:
            continue
        drawn += 1
        pairs += [(layer, config) for config in rng.sample(space, min(args.per_layer, len(space)))]

    records: list[dict] = []
    sources = []
    for layer, config in pairs:
        record = {"layer": layer.to_dict(), "config": config.to_dict(), "key": config.key}
        try:
            sources.append((len(records), render(layer, config)))
        except Exception as exc:  # noqa: BLE001 - the CUTLASS interface refused what the space offered
            record["failure"] = f"render: {type(exc).__name__}: {exc}"[:500]
        records.append(record)

    toolchain = Toolchain.find(cutlass_version())
    compiler = Compiler(Cache(Path(tempfile.mkdtemp())), toolchain, jobs=args.jobs)
    start = time.time()
    for done, (i, built) in enumerate(compiler.compile_many(sources), 1):
        record = records[i]
        if isinstance(built, CompiledKernel):
            record.update(registers=built.ptxas.registers, spill_bytes=built.ptxas.spill_bytes,
                          defect=built.ptxas.defect, compile_s=round(built.compile_s, 1))
        else:
            record["failure"] = f"{built.kind.value}: {built.message}"[:500]
        layer = record["layer"]
        print(f"[{done}/{len(sources)}] {layer['M']}x{layer['N']}x{layer['K']} {record['key']}: "
              f"{record.get('failure') or record.get('defect') or 'clean'}", flush=True)

    bad = [r for r in records if r.get("failure") or r.get("defect")]
    args.out.write_text(json.dumps({
        "recorded": "nvcc and ptxas reports of real builds; nothing ran on a GPU",
        "command": "python studies/scripts/space_survey.py " + " ".join(sys.argv[1:]),
        "nvcc": toolchain.nvcc_version, "cutlass": cutlass_version(), "wall_s": round(time.time() - start),
        "builds": len(records), "failed_or_defective": len(bad), "records": records}, indent=1) + "\n")
    print(f"{len(records)} builds, {len(bad)} failed or defective, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
