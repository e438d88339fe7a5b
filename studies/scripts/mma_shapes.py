"""What CuTe's extended WGMMA shapes change: the best recorded configs of a layer and their
160- and 224-wide twins, each built with the extended shapes (one m64n160 or m64n224
instruction a k-step) and without them (5 or 7 m64n32 instructions), in one run on one GPU.

    python studies/scripts/mma_shapes.py OUT_DIR RECORDING.json [RECORDING.json ...] [--top 3]
                                         [--jobs 16]

Every kernel is built, checked against the float64 reference and timed beside cuBLAS by the
search's own evaluator over its whole knob grid. OUT_DIR gets a recording per layer and variant,
and `summary.json`: per config, the best median of each variant.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from cutsearch import codegen
from cutsearch.evaluator import GpuEvaluator
from cutsearch.space import invalid_reason

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import best_recorded, measure_variant  # noqa: E402

WIDE = (160, 224)  # the TILE_N widths whose WGMMA the macro changes
VARIANTS = {"narrow": False, "extended": True}


def configs(layer, bases):
    twins = [dataclasses.replace(b, tile_n=n) for b in bases for n in WIDE]
    return list(dict.fromkeys(bases + [t for t in twins if invalid_reason(layer, t) is None]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("recordings", type=Path, nargs="+")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ev = GpuEvaluator(cache_dir=Path(tempfile.mkdtemp()), jobs=args.jobs)
    default = codegen.EXTENDED_MMA_SHAPES
    summary = []
    try:
        layers = []
        for recording in args.recordings:
            layer, bases = best_recorded(recording, args.top)
            layers.append((recording, layer, configs(layer, bases)))
        # Every kernel built at once, in parallel, so that each evaluation finds it cached.
        sources = []
        for extended in VARIANTS.values():
            codegen.EXTENDED_MMA_SHAPES = extended
            sources += [(len(sources), codegen.render(layer, c)) for _, layer, cs in layers for c in cs]
        for _ in ev.compiler.compile_many(sources):
            pass
        for recording, layer, cs in layers:
            rows = {c.key: {} for c in cs}
            for name, extended in VARIANTS.items():
                codegen.EXTENDED_MMA_SHAPES = extended
                measure_variant(ev, name, layer, cs, args.out, study=f"mma-{name}", rows=rows,
                                command=f"python studies/scripts/mma_shapes.py OUT {recording} --top {args.top}")
            summary.append({"layer": layer.to_dict(), "configs": rows})
            print(layer.shape, json.dumps(rows, indent=1), flush=True)
    finally:
        codegen.EXTENDED_MMA_SHAPES = default
        ev.close()
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
