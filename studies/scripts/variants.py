"""Measures the best recorded configs of a layer again, beside their variants, in one run on
one GPU: choices the default space leaves out (`space`: 256-deep k-tiles, clusters of four;
`split-k`), split-K summed by the GEMM's own epilogue at the base's tile and at tiles twice as
large in M or N (`fixup`), the staged epilogue in place of the nosmem one, direct and swapped
(`staged`), the direct epilogue in place of the nosmem or staged one (`direct`), CTA tiles whose N is not a power of two (`tiles`: 96, 160, 192, 224), the same
tile on CUTLASS's non-persistent warp-specialized kernel, one CTA a tile (`ws`), and a cooperative
base on the stream-K tile scheduler (`streamk`).

    python studies/scripts/variants.py RECORDING.json OUT.json [--top 4] [--jobs 16]
                                       [--kinds space,split-k,fixup,staged,direct,tiles,ws,streamk]

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
from cutsearch.space import CLUSTERS, TILE_K, TILE_N, Config, invalid_reason, split_k_helps


KINDS = ("space", "split-k", "fixup", "staged", "direct", "tiles", "ws", "streamk")


def variants(layer: Layer, base: Config, kinds: tuple[str, ...] = KINDS) -> list[Config]:
    out = []
    if "space" in kinds:
        for tile_k in dict.fromkeys((base.tile_k, *TILE_K[-1:])):
            for cm, cn in CLUSTERS:
                out.append(dataclasses.replace(base, tile_k=tile_k, cluster_m=cm, cluster_n=cn))
    if "split-k" in kinds and split_k_helps(layer):
        out.append(dataclasses.replace(base, split_k=True))  # its slice counts are run-time knobs
    if "fixup" in kinds and split_k_helps(layer):
        # Slices multiply the CTAs, so tiles twice as large in M or N fill the SMs again.
        fixup = dataclasses.replace(base, split_k=True, epilogue_schedule="fixup")
        out += [fixup, dataclasses.replace(fixup, tile_n=2 * base.tile_n),
                dataclasses.replace(fixup, tile_m=2 * base.tile_m)]
    if "staged" in kinds and base.epilogue_schedule == "nosmem":
        staged = dataclasses.replace(base, epilogue_schedule="staged")
        out += [staged, dataclasses.replace(staged, swap_ab=not base.swap_ab)]
    if "direct" in kinds and base.epilogue_schedule in ("nosmem", "staged"):
        direct = dataclasses.replace(base, epilogue_schedule="direct")
        out.append(direct)
        if base.epilogue_schedule == "staged":  # its fast orientation is the direct one's slow one
            out.append(dataclasses.replace(direct, swap_ab=not base.swap_ab))
    if "tiles" in kinds:
        out += [dataclasses.replace(base, tile_n=n) for n in TILE_N if n & (n - 1)]  # not a power of two
    if "ws" in kinds and not base.split_k:
        out.append(dataclasses.replace(base, kernel_schedule="ws", tile_scheduler="grid"))
    if "streamk" in kinds and base.kernel_schedule == "cooperative":
        out.append(dataclasses.replace(base, tile_scheduler="streamk"))
    return [c for c in dict.fromkeys(out) if c != base and invalid_reason(layer, c) is None]


def recording_parser() -> argparse.ArgumentParser:
    """RECORDING OUT [--top N] [--jobs J]: the arguments of the scripts that remeasure a recording."""
    ap = argparse.ArgumentParser()
    ap.add_argument("recording", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=None)
    return ap


def best_recorded(recording: Path, top: int, keep=lambda config: True) -> tuple[Layer, list[Config]]:
    """The layer of a recording and its `top` fastest measured configs that `keep` accepts,
    fastest first."""
    data = json.loads(recording.read_text())
    measured = [Evaluation.from_dict(e) for e in data["evaluations"] if e.get("measurement")]
    measured = [e for e in measured if keep(e.config)]
    measured.sort(key=lambda e: e.outcome.median_us)
    return Layer.from_dict(data["layer"]), [e.config for e in measured[:top]]


def measure_variant(ev: GpuEvaluator, name: str, layer: Layer, configs: list[Config], out: Path, *, study: str,
                    command: str, rows: dict[str, dict]) -> None:
    """Time `configs` of `layer` as codegen builds them now; record them in OUT/NAME-<layer>.json
    and put each one's median and cuBLAS's beside it in rows[config key][name]."""
    results = list(ev.evaluate(layer, configs))
    save_recording(out / f"{name}-{layer.slug}.json", layer, results, study=study, gpu=ev.device().name,
                   date=datetime.date.today().isoformat(), command=command)
    for r in results:
        o = r.outcome
        rows.setdefault(r.config.key, {})[name] = ({"us": o.median_us, "cublas_us": o.baseline.median_us}
                                                   if isinstance(o, Measurement) else {"failed": o.kind.value})


def main() -> None:
    ap = recording_parser()
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    args = ap.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if unknown := set(kinds) - set(KINDS):
        ap.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    layer, bases = best_recorded(args.recording, args.top)
    measure(layer, bases, kinds, args.out, study=f"variants-{layer.slug}", jobs=args.jobs,
            command=f"python studies/scripts/variants.py {args.recording} OUT --top {args.top} --kinds {args.kinds}")


def measure_recordings(script: str, prefix: str, kinds: tuple[str, ...], keep, summarize, report, *,
                       top: int) -> None:
    """The main of a script that remeasures several recordings in several dtypes:
    `script OUT_DIR RECORDING... [--top N] [--jobs J] [--dtypes f16,bf16]`. Each recording's `top`
    fastest configs that `keep(layer, config)` accepts are measured with their variants of `kinds`
    into OUT_DIR/PREFIX-<layer>.json; `summarize(path, bases)` of each goes to `report` and to
    OUT_DIR/summary.json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("recordings", type=Path, nargs="+")
    ap.add_argument("--top", type=int, default=top)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--dtypes", default=None, help="comma-separated; default: each recording's own")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary = []
    for recording in args.recordings:
        recorded = Layer.from_dict(json.loads(recording.read_text())["layer"])
        _, bases = best_recorded(recording, args.top, keep=lambda c: keep(recorded, c))
        for dtype in (args.dtypes.split(",") if args.dtypes else [recorded.dtype]):
            layer = dataclasses.replace(recorded, dtype=dtype)
            out = args.out / f"{prefix}-{layer.slug}.json"
            measure(layer, bases, kinds, out, study=f"{prefix}-{layer.slug}", jobs=args.jobs,
                    command=f"python studies/scripts/{script} OUT {recording} --top {args.top} --dtypes {dtype}")
            summary.append(summarize(out, bases))
            report(summary[-1])
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


def measure(layer: Layer, bases: list[Config], kinds: tuple[str, ...], out: Path, *, study: str, command: str,
            jobs: int | None, cache_dir: Path | None = None) -> None:
    """Build, check and time `bases` and their variants of `kinds` on this GPU; record them in
    `out` and print them fastest first."""
    configs = list(dict.fromkeys(bases + [v for b in bases for v in variants(layer, b, kinds)]))
    print(f"{layer.shape}: {len(bases)} bases, {len(configs) - len(bases)} variants", flush=True)
    ev = GpuEvaluator(cache_dir=cache_dir or Path(tempfile.mkdtemp()), jobs=jobs)
    try:
        results = list(ev.evaluate(layer, configs))
        gpu = ev.device().name
    finally:
        ev.close()
    save_recording(out, layer, results, study=study, gpu=gpu, date=datetime.date.today().isoformat(),
                   command=command, bases=[b.key for b in bases])
    for r in sorted(results, key=lambda r: r.outcome.median_us if isinstance(r.outcome, Measurement) else 1e9):
        o = r.outcome
        tag = "base" if r.config in bases else "variant"
        if isinstance(o, Measurement):
            print(f"{o.median_us:8.2f} µs  {o.speedup:5.2f}x  {tag:7}  {r.config.key}  {o.knobs.to_dict()}", flush=True)
        else:
            print(f"  failed ({o.kind.value})  {tag:7}  {r.config.key}: {o.message[:120]}", flush=True)


if __name__ == "__main__":
    main()
