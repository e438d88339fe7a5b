"""What a fused activation costs in the epilogue: the best recorded configs of a layer, measured
with no activation, with the layer's activation as cutsearch now builds it, and with CUTLASS's
own functor where cutsearch replaces it (SiLU: expf and an IEEE division per element), in one
run on one GPU.

    python studies/scripts/activation_cost.py OUT_DIR RECORDING.json [RECORDING.json ...] [--top 2]
                                              [--jobs 16]

Every kernel is built, checked against the float64 reference and timed beside cuBLAS (F.linear,
then the matching torch activation, with the same bias) by the search's own evaluator over its
whole knob grid. OUT_DIR gets a recording per layer and variant, and `summary.json`: per config,
the best median of each variant.
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
from cutsearch.problem import Layer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from variants import best_recorded, measure_variant  # noqa: E402


def variants(layer: Layer) -> dict[str, tuple[Layer, dict]]:
    """name -> (layer, codegen's replacements to use while building it)."""
    out = {"none": (dataclasses.replace(layer, activation="none"), codegen.OWN_ACTIVATIONS),
           "ours": (layer, codegen.OWN_ACTIVATIONS)}
    if layer.activation in codegen.OWN_ACTIVATIONS:
        out["cutlass"] = (layer, {})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("recordings", type=Path, nargs="+")
    ap.add_argument("--top", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ev = GpuEvaluator(cache_dir=Path(tempfile.mkdtemp()), jobs=args.jobs)
    own = codegen.OWN_ACTIVATIONS
    summary = []
    try:
        layers = [best_recorded(recording, args.top) for recording in args.recordings]
        # Every kernel built at once, in parallel, so that each layer's evaluation finds it cached.
        sources = []
        for layer, bases in layers:
            for variant, replacements in variants(layer).values():
                codegen.OWN_ACTIVATIONS = replacements
                sources += [(len(sources), codegen.render(variant, c)) for c in bases]
        codegen.OWN_ACTIVATIONS = own
        for _ in ev.compiler.compile_many(sources):
            pass
        for recording, (layer, bases) in zip(args.recordings, layers):
            rows = {c.key: {} for c in bases}
            for name, (variant, replacements) in variants(layer).items():
                codegen.OWN_ACTIVATIONS = replacements
                measure_variant(ev, name, variant, bases, args.out, study=f"act-{name}", rows=rows,
                                command=f"python studies/scripts/activation_cost.py OUT {recording} --top {args.top}")
                codegen.OWN_ACTIVATIONS = own
            summary.append({"layer": layer.to_dict(), "configs": rows})
            print(layer.shape, json.dumps(rows, indent=1), flush=True)
    finally:
        codegen.OWN_ACTIVATIONS = own
        ev.close()
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
