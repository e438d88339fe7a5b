"""The library's front door: tune one layer, persist its best kernel, summarise the study.

    import cutsearch
    result = cutsearch.tune(cutsearch.Layer(m=4096, n=5000, k=1024, dtype="f16"), trials=64)

The CLI is a thin layer over this module.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from cutsearch import persist
from cutsearch.cache import default_cache_dir
from cutsearch.errors import UserError
from cutsearch.evaluator import Evaluator, GpuEvaluator, ModelEvaluator, ReplayEvaluator
from cutsearch.outcome import Failure
from cutsearch.problem import Layer, replayed_from
from cutsearch.search import BATCH_PER_JOB, SearchResult, check_sampler, search
from cutsearch.space import DEFAULT_STAGES, STAGES, Space, transforms
from cutsearch.verdict import TrialRecord
from cutsearch.workspace import Workspace

if TYPE_CHECKING:
    from cutsearch.compiler import CompiledKernel

EVALUATORS = ("gpu", "replay", "model")


@dataclasses.dataclass
class Provenance:
    gpu: dict[str, Any] | None = None
    nvcc: str | None = None
    cutlass: str | None = None


def make_evaluator(kind: str, *, layer: Layer, gpu: int = 0, jobs: int | None = None,
                   recording: Path | None = None, cache_dir: Path | None = None) -> Evaluator:
    if kind == "gpu":
        return GpuEvaluator(cache_dir=cache_dir or default_cache_dir(), gpu=gpu, jobs=jobs)
    if kind == "replay":
        if recording is None:
            raise UserError("--evaluator replay needs --recording FILE (a recorded study)")
        replay = ReplayEvaluator.load(recording, layer)
        # Seconds each replayed config takes, so tests can kill a replayed search mid-run.
        replay.delay_s = float(os.environ.get("CUTSEARCH_REPLAY_DELAY_S") or 0)
        return replay
    if kind == "model":
        return ModelEvaluator()
    raise UserError(f"unknown evaluator {kind!r}: choose one of {', '.join(EVALUATORS)}")


def tune(layer: Layer, *, trials: int = 64, timeout_s: float | None = None, study: str | None = None,
         storage: str | None = None, evaluator: Evaluator | str = "gpu", gpu: int = 0, jobs: int | None = None,
         recording: Path | None = None, sampler: str = "tpe", batch: int | None = None, seed: int = 0,
         warm: int | None = None, workspace: Workspace | None = None, command: str | None = None,
         events: Callable[[str, dict[str, Any]], None] | None = None, all_stages: bool = False,
         split_k: bool = False, prune: bool = True, space: Space | None = None) -> SearchResult:
    """Search `layer`, resuming study `study`; persist its best kernel and its summary.

    `all_stages` also searches explicit stage counts; by default the CUTLASS builder picks them.
    `split_k` also searches split-K wherever the layer's output tiles leave SMs idle; without it,
    only where K is long and they would leave most SMs idle (space.split_k_pays).
    `prune` lets TPE skip the configs the cost model rates hopeless.
    `space` searches a space of the caller's instead, a restricted one say (its own stages and split-K).
    """
    check_options(trials=trials, gpu=gpu, jobs=jobs, batch=batch, seed=seed, warm=warm, sampler=sampler,
                  evaluator=evaluator, recording=recording)
    if space is not None and dataclasses.replace(space.layer, name=None) != dataclasses.replace(layer, name=None):
        raise UserError(f"the space given is for another layer ({space.layer.slug}, not {layer.slug})")
    if space is not None and (all_stages or split_k):
        raise UserError("all_stages and split_k shape the default space: give a space its own stages and split_k")
    space = space or Space(layer, stages=STAGES if all_stages else DEFAULT_STAGES,
                           split_k=(False, True) if split_k else None)
    ws = workspace or Workspace()
    name = Workspace.check_name(study if study is not None else layer.name or layer.slug)
    ws.writable()
    from cutsearch.storage import open_storage

    store = open_storage(ws.storage_url(name, storage))
    persist.recover_dir(ws.best_dir(name))
    own = isinstance(evaluator, str)
    ev = make_evaluator(evaluator, layer=layer, gpu=gpu, jobs=jobs, recording=recording) if own else evaluator
    try:
        toolchain = _toolchain(ev)

        def on_best(best: TrialRecord, cublas_us: float | None) -> None:
            _persist_best(ws.best_dir(name), layer, best, cublas_us, ev, toolchain)

        from cutsearch.storage import artifact_store

        nvcc_jobs = getattr(getattr(ev, "compiler", None), "jobs", None)
        result = search(layer, evaluator=ev, storage=store, study_name=name, trials=trials, timeout_s=timeout_s,
                        batch=batch or (nvcc_jobs and BATCH_PER_JOB * nvcc_jobs), sampler=sampler,
                        seed=seed, warm=warm, events=events, on_best=on_best, priors=priors(ws, layer),
                        space=space, prune=prune,
                        artifacts=artifact_store(ws.artifacts(name)),
                        device_name=(toolchain.gpu or {}).get("name"))
        if result.best is not None:
            # Against all of the study's cuBLAS timings, which later trials may have moved; also a
            # resumed study's best that an earlier run found.
            on_best(result.best, result.cublas_us)
        command = command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
        runs = _record_run(store, name, result, command, sampler=sampler, seed=seed)
        persist.write_json(ws.result_json(name), summary(result, toolchain=toolchain, command=command, runs=runs))
        return result
    finally:
        if own:
            ev.close()


def check_options(*, trials: int, gpu: int, jobs: int | None, batch: int | None, seed: int = 0,
                  warm: int | None = None, sampler: str = "tpe", evaluator: Evaluator | str = "gpu",
                  recording: Path | None = None) -> None:
    """The options every command that tunes shares (search, worker, suite), checked before anything
    is written or a GPU is opened."""
    check_sampler(sampler)
    if recording is not None and evaluator != "replay":
        raise UserError(f"--recording is replayed by --evaluator replay, not {evaluator}")
    if trials <= 0:
        raise UserError(f"--trials must be positive, got {trials}")
    if gpu < 0:
        raise UserError(f"--gpu must be a GPU index (0 or more), got {gpu}")
    for option, value in (("--jobs", jobs), ("--batch", batch)):
        if value is not None and value <= 0:
            raise UserError(f"{option} must be positive, got {value}")
    if warm is not None and warm < 0:
        raise UserError(f"--warm must be 0 or more, got {warm}")
    if not 0 <= seed < 2**32:
        raise UserError(f"--seed must be in [0, 2**32), got {seed}")


def priors(ws: Workspace, layer: Layer) -> tuple:
    """Winners of earlier studies of layers in the same regime (M within 8x), best first.

    Kernels do not depend on the shape, so what won near this layer is worth measuring first.
    """
    import json
    import math

    from cutsearch.space import Config

    found = []
    for path in sorted((ws.root / "results").glob("*.json")):
        try:
            data = json.loads(path.read_text())
            best, spec = data.get("best"), data.get("layer")
            if best and spec and abs(math.log2(spec["M"] / layer.m)) <= 3 and data.get("source") == "measured":
                found.append((data.get("speedup") or 0, Config.from_dict(best["config"])))
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
            continue  # not a study summary
    return tuple(c for _, c in sorted(found, key=lambda f: -f[0]))


def prebuild(layers: dict[str, Layer], *, top: int = 8, jobs: int | None = None,
             workspace: Workspace | None = None) -> Iterator[tuple[str, CompiledKernel | Failure]]:
    """Compile the `top` configs a new study of each layer would measure first into the kernel
    cache, without a GPU; yields ("<layer> <config>", result) as each is built or found.

    A config the interface cannot render yields its Failure; a kernel several layers share is
    built once, under the first one's name.
    """
    from cutsearch import codegen
    from cutsearch.compiler import local_compiler
    from cutsearch.outcome import FailureKind
    from cutsearch.search import first_configs

    if top <= 0:
        raise UserError(f"--top must be positive, got {top}")
    ws = workspace or Workspace()
    compiler = local_compiler(jobs=jobs)
    sources: dict[str, tuple[str, codegen.KernelSource]] = {}
    for name, layer in layers.items():
        for config in first_configs(layer, Space(layer), top, priors(ws, layer)):
            try:
                src = codegen.render(layer, config)
            except codegen.CodegenError as exc:
                yield f"{name} {config.key}", Failure(kind=FailureKind.INVALID, message=str(exc))
                continue
            sources.setdefault(src.digest, (f"{name} {config.key}", src))
    yield from compiler.compile_many(sources.values())


def _record_run(store, name: str, result: SearchResult, command: str, *, sampler: str = "tpe",
                seed: int = 0) -> list[dict[str, Any]]:
    """Append this run to the study's history, so a resume does not hide the first run's cost,
    with what it takes to repeat it (sampler, seed and batch size)."""
    from cutsearch.storage import append_run

    return append_run(store, name, {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(result.wall_s, 2), "new_trials": result.new_trials,
        "new_compiles": result.new_compiles, "command": command,
        "sampler": sampler, "seed": seed, "batch": result.batch})


def study_layer(study: str, storage: str | None = None, workspace: Workspace | None = None,
                wait_s: float = 0.0) -> Layer:
    """The layer an existing study searches (for workers that join it).

    `wait_s` lets a worker started together with the search wait for it to create the study.
    """
    from cutsearch.storage import load_study, open_storage

    ws = workspace or Workspace()
    url = ws.storage_url(Workspace.check_name(study), storage)
    deadline = time.monotonic() + wait_s
    store = None  # opened once it exists, not at every poll
    while True:
        try:
            if store is None and ("://" in url or Path(url).is_file()):
                store = open_storage(url)
            layer = load_study(study, url, store).user_attrs.get("layer")
            if layer is not None:
                return Layer.from_dict(layer, name=study)
            missing = f"study {study!r} was not made by cutsearch: it records no layer"
        except UserError as exc:
            missing = str(exc)
        if time.monotonic() >= deadline:
            raise UserError(missing + (f" (waited {wait_s:.0f} s)" if wait_s else ""))
        time.sleep(0.5)


def _toolchain(ev: Evaluator) -> Provenance:
    if isinstance(ev, GpuEvaluator):
        return Provenance(gpu=ev.device().to_dict(), nvcc=ev.toolchain.nvcc_version, cutlass=ev.toolchain.cutlass_version)
    return Provenance()


def _persist_best(target: Path, layer: Layer, best: TrialRecord, cublas_us: float | None, ev: Evaluator,
                  toolchain: Provenance) -> None:
    """Copy the best kernel out of the cache, only for kernels built and measured here.

    Its verdict against cuBLAS is informative only: `cutsearch export` judges it again from the
    study, whose later trials may have moved the median cuBLAS timing.
    """
    key = best.evaluation.get("kernel_key")
    if not isinstance(ev, GpuEvaluator) or key is None:
        return
    entry = ev.compiler.cache.get(key)
    held = persist.read_json(target / persist.META)
    held = held if isinstance(held, dict) else {}
    if entry is None or (held.get("kernel_key"), held.get("trial"), held.get("cublas_us"), held.get("kernel_us")) == (
            key, best.number, cublas_us, best.median_us):
        return
    meas = best.evaluation["measurement"]
    meta = {
        "layer": layer.to_dict(), "config": best.config.to_dict(), "knobs": meas["knobs"],
        "transforms": transforms(layer, best.config, meas["knobs"]),
        # timing_us is the trial's; kernel_us and cublas_us are as judged (from the race, if one ran).
        "timing_us": meas["timing"], "kernel_us": best.median_us, "cublas_us": cublas_us,
        "cublas_beside_us": meas["baseline"]["median_us"] if meas.get("baseline") else None,
        "speedup": cublas_us / best.median_us if cublas_us and best.median_us else None,
        "floor_us": layer.floor_us, "trial": best.number, "arch": ev.compiler.toolchain.arch,
        "gpu": toolchain.gpu, "nvcc": toolchain.nvcc, "cutlass": toolchain.cutlass,
        "kernel_key": key, "ptxas": best.evaluation.get("ptxas"),
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    persist.write_dir(target, {"kernel.cu": entry / "kernel.cu", "kernel.so": entry / "kernel.so"}, meta)


def _best_trial(best: TrialRecord) -> dict[str, Any]:
    """The best trial's part of the summary: its config, knobs and what its measurement saw."""
    measured = best.evaluation["measurement"]
    return {
        "trial": best.number, "config": best.config.to_dict(), "knobs": measured["knobs"],
        "timing_us": measured["timing"],
        "cublas_timing_us": measured.get("baseline"),  # the one beside it
        "rel_error": measured["rel_error"],
        "io_variants_us": {name: t["median_us"] for name, t in measured.get("io_variants", {}).items()},
        "floors_us": {name: t["median_us"] for name, t in measured.get("floors", {}).items()},
    }


def summary(result: SearchResult, *, toolchain: Provenance | None = None, command: str = "",
            runs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The one-screen summary, as data: also written as studies/results/<study>.json."""
    best = result.best
    layer = result.layer
    tc = toolchain or Provenance()
    out: dict[str, Any] = {
        "study": result.study_name,
        "layer": layer.to_dict(),
        "source": result.source,
        "gpu": (tc.gpu or {}).get("name") or result.gpu,
        "best_us": best.median_us if best else None,
        "cublas_us": result.cublas_us,
        "speedup": result.speedup,
        "mm_us": ((best.evaluation["measurement"].get("mm") or {}).get("median_us")) if best else None,
        "floor_us": layer.floor_us,
        "fraction_of_floor": layer.floor_us / best.median_us if best and best.median_us else None,
        # The roofline floor plus an empty kernel timed beside cuBLAS: what a call costs at least.
        "empty_kernel_us": best.empty_kernel_us if best else None,
        "floor_with_launch_us": layer.floor_us + best.empty_kernel_us if best and best.empty_kernel_us else None,
        "cublas_wins": (result.speedup is not None and not result.verdict.kernel_ships
                        and not result.verdict.fallback_wins),
        "tie": result.verdict.tie,
        "verdict": result.verdict.basis if result.unserved is None else None,  # nothing was judged
        # The export's cuBLAS fallback, its cuBLASLt call fusing the activation, as raced.
        "fallback_us": result.verdict.fallback_us,
        "ships": ("the fallback's fused cuBLASLt" if result.verdict.fallback_wins else "the best kernel"
                  if result.verdict.kernel_ships else "cuBLAS"),
        "trials": result.trials,
        "new_trials": result.new_trials,
        "new_compiles": result.new_compiles,
        "failures": result.failures,
        "wall_s": round(result.wall_s, 2),
        "command": command,
        "runs": runs or [],
        "study_wall_s": round(sum(r["wall_s"] for r in runs), 2) if runs else round(result.wall_s, 2),
        "best": None if best is None else _best_trial(best),
        "unserved": result.unserved,
        "toolchain": {"gpu": tc.gpu, "nvcc": tc.nvcc, "cutlass": tc.cutlass, "python": platform.python_version()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if result.source == "predicted":
        out["note"] = "model predictions, not measurements"
    elif result.source == "recorded":
        out["note"] = f"{replayed_from([result.gpu])}, not measured in this run"
    return out
