"""A suite of layers searched one after another, summarised in one JSON benchmark file.

Where no kernel beats cuBLAS (in every round of the search's race, where one ran), the record
says so and counts the layer at 1.00x: the export of such a layer calls cuBLAS, so that is what
an application would get.
"""

from __future__ import annotations

import datetime
import math
import re
import time
from pathlib import Path
from typing import Any, Callable

from cutsearch import persist
from cutsearch.problem import Layer
from cutsearch.search import SearchResult
from cutsearch.space import transforms as layer_transforms
from cutsearch.workspace import Workspace


def record(name: str, result: SearchResult) -> dict[str, Any]:
    """One layer's line in the suite file."""
    layer, best, cublas_us, speedup = result.layer, result.best, result.cublas_us, result.speedup
    base = {"name": name, "M": layer.m, "N": layer.n, "K": layer.k, "dtype": layer.dtype, "bias": layer.bias,
            "activation": layer.activation, "input": layer.input, "output": layer.output,
            "floor_us": layer.floor_us, "trials": result.trials,
            "wall_s": round(result.wall_s, 1), "study": result.study_name, "source": result.source,
            "verdict": result.verdict.basis}
    # The fallback's fused cuBLASLt, where it won the race: what the export ships and the suite counts.
    fused = result.verdict.fallback_us if result.verdict.fallback_wins else None
    if best is None:
        return {**base, "cublas_us": cublas_us, "cutsearch_us": fused or cublas_us,
                "speedup": cublas_us / fused if fused else 1.0 if cublas_us else None, "fallback": True,
                "fallback_us": fused, "kernel_us": None, "config": None, "transforms": None,
                "note": "no correct kernel was measured" + (": the fallback's fused cuBLASLt won" if fused else "")}
    measurement = best.evaluation["measurement"]
    transforms = {**layer_transforms(layer, best.config, measurement["knobs"]), "knobs": measurement["knobs"]}
    if speedup is None:  # the cost model's pick (or a replay without cuBLAS): nothing to compare it with
        what = "the cost model's pick" if result.source == "predicted" else "the best kernel"
        return {**base, "cublas_us": None, "cutsearch_us": None, "speedup": None, "fallback": True,
                "fallback_us": None, "kernel_us": best.median_us, "config": best.config.to_dict(),
                "transforms": transforms,
                "note": f"{what} ({best.median_us:.1f} µs {result.source}) has no cuBLAS time to be judged "
                        "against: the export calls cuBLAS"}
    base["cublas_beside_us"] = (measurement.get("baseline") or {}).get("median_us")
    # The roofline floor plus an empty kernel timed in the same run: no call is faster, so
    # cuBLAS over it is the most any kernel could gain here.
    if best.empty_kernel_us:
        base["empty_kernel_us"] = best.empty_kernel_us
        base["floor_with_launch_us"] = layer.floor_us + best.empty_kernel_us
        base["speedup_bound"] = cublas_us / base["floor_with_launch_us"]
    # The same kernel with the caller's x (and y) already padded: what the per-call copies cost.
    base["io_variants_us"] = {name: t["median_us"] for name, t in measurement.get("io_variants", {}).items()}
    if fused:
        return {**base, "cublas_us": cublas_us, "cutsearch_us": fused, "speedup": cublas_us / fused,
                "fallback": True, "fallback_us": fused, "kernel_us": best.median_us, "config": best.config.to_dict(),
                "transforms": transforms, "note": f"cuBLASLt with the activation fused (the export's fallback library) "
                                                  f"beat the best kernel ({best.median_us:.1f} µs) in the race"}
    if not result.verdict.kernel_ships:
        why = f"best kernel {result.verdict.tie or f'{speedup:.2f}x cuBLAS'}"
        return {**base, "cublas_us": cublas_us, "cutsearch_us": cublas_us, "speedup": 1.0,
                "fallback": True, "kernel_us": best.median_us, "config": best.config.to_dict(),
                "transforms": transforms, "note": f"{why}: the export calls cuBLAS"}
    return {**base, "cublas_us": cublas_us, "cutsearch_us": best.median_us, "speedup": speedup,
            "fallback": False, "kernel_us": best.median_us, "config": best.config.to_dict(), "transforms": transforms}


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def study_name(table: str) -> str:
    """The study a suite's table is searched in (a UserError for a name no study can have)."""
    from cutsearch.errors import UserError

    try:
        return Workspace.check_name(f"suite-{table}")
    except UserError as exc:
        raise UserError(f"suite table {table!r} cannot name a study: {exc}") from None


def run_suite(layers: dict[str, Layer], *, tune: Callable[..., SearchResult], budget_s: float | None, trials: int,
              workspace: Workspace, command: str, gpu_name: Callable[[], str | None],
              on_layer: Callable[[str, int, int], None] | None = None, **tune_args: Any) -> tuple[Path, dict]:
    """Search each layer in turn, sharing `budget_s` evenly among the layers still to go."""
    from cutsearch.errors import StudyTaken, UserError

    studies = {name: study_name(name) for name in layers}  # every name checked before the first search
    start = time.monotonic()
    records = []
    for i, (name, layer) in enumerate(layers.items()):
        if on_layer is not None:
            on_layer(name, i, len(layers))
        left = None if budget_s is None else max(1.0, (budget_s - (time.monotonic() - start)) / (len(layers) - i))
        try:
            result = tune(layer, trials=trials, timeout_s=left, study=studies[name], workspace=workspace,
                          command=command, **tune_args)
        except StudyTaken as exc:
            raise UserError(f"{exc.reason}: a suite names its studies after its tables, so rename table "
                            f"{name!r}, or give another --studies-dir") from None
        records.append(record(name, result))
    gpu = gpu_name() or "unknown-gpu"
    date = datetime.date.today().isoformat()
    body = {"gpu": gpu, "date": date, "command": command, "budget_s": budget_s, "trials_per_layer": trials,
            "wall_s": round(time.monotonic() - start, 1),
            "geomean_speedup": geomean([r["speedup"] for r in records]),
            "note": "speedup = cuBLAS (F.linear, same bias and activation) / cutsearch, cold L2, same process;"
                    " kernel_us and cublas_us are medians of the race that ends each search (the fastest kernels"
                    " and cuBLAS timed again in interleaved rounds; see each record's verdict), else the best"
                    " trial's time against the lower of the cuBLAS timing beside it (cublas_beside_us) and the"
                    " median of the layer's cuBLAS timings; fallback layers count 1.00x, except where the fallback's"
                    " cuBLASLt call fuses the activation and raced (fallback_us): then they count as raced",
            "records": records}
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    path = workspace.root / "results" / f"suite-{slug}-{date}.json"
    persist.write_json(path, body)
    return path, body
