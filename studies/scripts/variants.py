"""Measures the best recorded configs of a layer again, beside their variants with choices the
default space leaves out (256-deep k-tiles, clusters of four, split-K), in one run on one GPU.

    python studies/scripts/variants.py RECORDING.json OUT.json [--top 4] [--jobs 16]

RECORDING is an exhaustive recording of the layer (studies/recorded/...): its `top` fastest
configs are the bases. Every base and variant is built, checked against the float64 reference
and timed beside cuBLAS by the search's own evaluator; OUT is a recording of them all.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import tempfile
from pathlib import Path

from cutsearch.evaluator import Evaluation, GpuEvaluator, save_recording
from cutsearch.outcome import Measurement
from cutsearch.problem import Layer
from cutsearch.space import CLUSTERS, TILE_K, Config, invalid_reason, split_k_helps


def variants(layer: Layer, base: Config) -> list[Config]:
    out = []
    for tile_k in dict.fromkeys((base.tile_k, *TILE_K[-1:])):
        for cm, cn in CLUSTERS:
            c = dataclasses.replace(base, tile_k=tile_k, cluster_m=cm, cluster_n=cn)
            if c != base and invalid_reason(layer, c) is None:
                out.append(c)
    split = dataclasses.replace(base, split_k=True)
    if split_k_helps(layer) and invalid_reason(layer, split) is None:
        out.append(split)  # its slice counts are run-time knobs, all measured
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recording", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args()
    data = json.loads(args.recording.read_text())
    layer = Layer.from_dict(data["layer"])
    measured = [Evaluation.from_dict(e) for e in data["evaluations"] if e.get("measurement")]
    measured.sort(key=lambda e: e.outcome.median_us)
    bases = [e.config for e in measured[: args.top]]
    configs = list(dict.fromkeys(bases + [v for b in bases for v in variants(layer, b)]))
    print(f"{layer.shape}: {len(bases)} bases, {len(configs) - len(bases)} variants", flush=True)
    ev = GpuEvaluator(cache_dir=Path(tempfile.mkdtemp()), jobs=args.jobs)
    try:
        results = list(ev.evaluate(layer, configs))
        gpu = ev.device().name
    finally:
        ev.close()
    save_recording(args.out, layer, results, study=f"variants-{layer.slug}", gpu=gpu,
                   date=datetime.date.today().isoformat(),
                   command=f"python studies/scripts/variants.py {args.recording} OUT --top {args.top}",
                   bases=[b.key for b in bases])
    for r in sorted(results, key=lambda r: r.outcome.median_us if isinstance(r.outcome, Measurement) else 1e9):
        o = r.outcome
        tag = "base" if r.config in bases else "variant"
        if isinstance(o, Measurement):
            print(f"{o.median_us:8.2f} µs  {o.speedup:5.2f}x  {tag:7}  {r.config.key}", flush=True)
        else:
            print(f"  failed ({o.kind.value})  {tag:7}  {r.config.key}: {o.message[:120]}", flush=True)


if __name__ == "__main__":
    main()
