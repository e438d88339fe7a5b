"""The compile-throughput benchmark: kernels built per minute, alone or sharing units.

The same configurations (the model's top for one layer) are built twice from empty caches:
once one kernel per nvcc process, once packed several to a translation unit. Every kernel
built both ways is then compared function by function: the shared build counts only if its
machine code is byte for byte that of the kernel built alone, which also makes its timings
the same.
"""

from __future__ import annotations

import datetime
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from cutsearch import codegen, model
from cutsearch.cache import Cache
from cutsearch.compiler import Compiler, CompiledKernel, Toolchain
from cutsearch.fatbin import device_code
from cutsearch.problem import Layer
from cutsearch.space import Space


def benchmark(layer: Layer, *, kernels: int, naive_kernels: int, jobs: int, batch: int,
              workdir: Path | None = None, keep_cache: Path | None = None,
              on_phase: Callable[[str], None] | None = None,
              on_built: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Build the model's top `kernels` configs packed `batch` to a unit, and the first
    `naive_kernels` of them one per process; report both rates and the machine-code check."""
    configs = [c for _, c in model.rank(layer, list(Space(layer)))][:kernels]
    sources = [codegen.render(layer, c) for c in configs]
    toolchain = Toolchain.find(codegen.cutlass_version())
    root = Path(workdir or tempfile.mkdtemp(prefix="cutsearch-throughput-"))
    runs = {}
    built: dict[str, dict[int, Any]] = {}
    for mode, count, size, cache_dir in (("alone", naive_kernels, 1, root / "alone"),
                                         ("shared", kernels, batch, keep_cache or root / "shared")):
        if on_phase:
            on_phase(f"{mode}: {count} kernels, {jobs} nvcc processes, up to {size} per unit")
        compiler = Compiler(Cache(cache_dir), toolchain, jobs=jobs, max_batch=size)
        start = time.monotonic()
        results = {}
        for i, result in compiler.compile_many(enumerate(sources[:count])):
            results[i] = result
            if on_built:
                on_built(mode, len(results), count)
        wall = time.monotonic() - start
        ok = sum(isinstance(r, CompiledKernel) and not r.cached for r in results.values())
        runs[mode] = {"kernels": count, "built": ok, "failed": count - ok, "wall_s": round(wall, 1),
                      "kernels_per_min": round(ok / wall * 60, 1) if wall else None, "max_per_unit": size}
        built[mode] = results
    same, compared, differing = 0, 0, []
    for i, alone in built["alone"].items():
        shared = built["shared"].get(i)
        if not (isinstance(alone, CompiledKernel) and isinstance(shared, CompiledKernel)):
            continue
        compared += 1
        mine, theirs = device_code(alone.library), device_code(shared.library)
        gemm = [name for name in mine if "device_kernel" in name]
        if gemm and all(theirs.get(name) == mine[name] for name in gemm):
            same += 1
        else:
            differing.append(sources[i].operation_name)
    rate = {m: r["kernels_per_min"] for m, r in runs.items()}
    return {
        "benchmark": "compile throughput", "layer": layer.to_dict(), "configs": "model's top ranked",
        "jobs": jobs, "cpus": len(os.sched_getaffinity(0)), "machine": platform.machine(), "runs": runs,
        "speedup": round(rate["shared"] / rate["alone"], 2) if rate["alone"] and rate["shared"] else None,
        "identical_machine_code": {"compared": compared, "identical": same, "differing": differing},
        "nvcc": toolchain.nvcc_version, "cutlass": toolchain.cutlass_version, "flags": list(toolchain.flags),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
