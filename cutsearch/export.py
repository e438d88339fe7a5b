"""A study's best kernel -> a self-contained directory an application can load.

The directory holds the kernel source with its launcher, the built sm_90a library, a C header,
a CMakeLists.txt to rebuild it, a C++ example, a README and meta.json with the sha256 of every
file. When the search found nothing faster than cuBLAS, the export is a cuBLAS fallback with
the same C ABI, so that using cutsearch never makes an application slower.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cutsearch import codegen, persist
from cutsearch.abi import ABI_VERSION, caller_x, io_flags
from cutsearch.compiler import ARCH
from cutsearch.errors import UserError
from cutsearch.problem import Layer
from cutsearch.space import Config
from cutsearch.workspace import Workspace

EXPORTED_BY = "cutsearch"
LIBRARY = "libcutsearch_fc.so"
HEADER = "cutsearch_fc.h"


def export(study: str, *, out: Path | None = None, storage: str | None = None, workspace: Workspace | None = None,
           force: bool = False) -> Path:
    """Write the export of `study` to `out` (default exports/<study>) and return its path."""
    ws = workspace or Workspace()
    Workspace.check_name(study)
    from cutsearch.tuner import study_layer

    layer = study_layer(study, storage, ws)
    target = Path(out) if out is not None else Path("exports") / study
    _check_target(target, force)
    best = ws.best_dir(study)
    persist.recover_dir(best)
    with persist.locked(best):  # a search of the study may replace best/ meanwhile
        meta = persist.verify_dir(best) if best.exists() else None
        judged, reason = _judge(study, ws.storage_url(study, storage), meta)
        if judged is not None and judged["speedup"] >= 1.0 and "fallback_us" not in judged and "tie" not in judged:
            files, body = _kernel_export(layer, best, {**meta, **judged}, reason)
        else:
            files, body = _fallback_export(layer, reason, judged or meta)
        return _write(target, files, body, layer=layer, study=study, summary=persist.read_json(ws.result_json(study)))


def _write(target: Path, files: dict, body: dict, *, layer: Layer, study: str, summary: dict | None) -> Path:
    body.update({"exported_by": EXPORTED_BY, "abi": ABI_VERSION, "study": study, "library": files.get(LIBRARY) and LIBRARY,
                 "header": HEADER, "layer": layer.to_dict(),
                 "dtypes": {"x": layer.dtype, "w": layer.dtype, "b": layer.dtype if layer.bias else None,
                            "y": layer.dtype, "accumulate": "f32"},
                 "search": ({k: summary.get(k) for k in ("trials", "wall_s", "command", "gpu")}
                            if isinstance(summary, dict) else None)})
    return persist.write_dir(target, files, body)


def _judge(study: str, url: str, meta: dict[str, Any] | None) -> tuple[dict[str, float] | None, str]:
    """The persisted kernel against cuBLAS, judged now from the study (verdict.judge).

    The best directory keeps the verdict of when it was written: before the study's race or
    last trials, by another worker, or by an older cutsearch. Returns the kernel's time,
    cublas_us and speedup, or None and why the export calls cuBLAS.
    """
    from cutsearch.verdict import judge, records, tie, verdict_cublas_us
    from cutsearch.storage import load_study

    if meta is None:
        return None, "the search persisted no kernel"
    loaded = load_study(study, url)
    trials = records(loaded)
    held = next((r for r in trials if r.number == meta.get("trial") and r.median_us
                 and r.evaluation.get("kernel_key") == meta.get("kernel_key")), None)
    if held is None:
        return None, "the persisted kernel is no measured trial of this study"
    verdict = judge(trials, loaded.user_attrs.get("race"))
    if verdict.fallback_wins:
        us = verdict.fallback_us
        return ({"cublas_us": verdict.cublas_us, "fallback_us": us, "speedup": verdict.cublas_us / us},
                f"cuBLASLt with the ReLU fused (this fallback's library) took {us:.1f} µs in the race, "
                f"against {verdict.cublas_us:.1f} µs for F.linear and "
                + (f"{verdict.best.median_us:.1f} µs for the best kernel" if verdict.best else "no correct kernel"))
    if verdict.raced_us is not None:
        kernel_us = verdict.raced_us.get(held.number)
        if kernel_us is None:
            return None, "the persisted kernel did not pass the race against cuBLAS: search again to persist its winner"
        cublas_us = verdict.cublas_us
    else:
        kernel_us, cublas_us = held.median_us, verdict_cublas_us(held, trials)
    if cublas_us is None:
        return None, "the best kernel has no cuBLAS comparison"
    speedup = cublas_us / kernel_us
    judged = {"kernel_us": kernel_us, "cublas_us": cublas_us, "speedup": speedup}
    won = verdict.rounds_won.get(held.number) if verdict.rounds_won is not None else None
    if (even := tie(speedup, won, verdict.rounds)) is not None:
        return {**judged, "tie": even}, f"the best kernel ran at {even} ({verdict.basis})"
    return judged, f"the best kernel ran at {speedup:.2f}x cuBLAS ({verdict.basis})"


def _check_target(target: Path, force: bool) -> None:
    if not target.exists():
        return
    if not target.is_dir():
        raise UserError(f"{target} exists and is not a directory: choose another --out")
    meta = persist.read_json(target / persist.META)
    ours = isinstance(meta, dict) and meta.get("exported_by") == EXPORTED_BY
    if not ours and any(target.iterdir()):
        raise UserError(f"{target} exists and is not a cutsearch export: refusing to replace it")
    if ours and not force:
        raise UserError(f"{target} already holds an export: pass --force to replace it")


def _header(layer: Layer, *, kernel_name: str, pad_n: int, pad_k: int, knobs: dict[str, int]) -> str:
    return codegen.render_template(
        "cutsearch_fc.h", shape=layer.shape, dtype=layer.dtype, bias=str(layer.bias).lower(),
        activation=layer.activation, kernel_name=kernel_name, m=layer.m, n=layer.n, k=layer.k,
        pad_n=pad_n, pad_k=pad_k, raster=knobs.get("raster", 0), swizzle=knobs.get("swizzle", 1),
        splits=knobs.get("splits", 1), decomposition=knobs.get("decomposition", 0),
        reduction=knobs.get("reduction", 0),
        io=io_flags(y_padded=layer.output == "padded", knobs=knobs, **caller_x(layer.input == "padded",
                                                                               layer.x_pitch, pad_k)),
        x_pitch=layer.x_pitch, y_rows=layer.y_shape[0], y_pitch=layer.y_shape[1],
        transposed=int(layer.output == "transposed"))


def _layouts(layer: Layer, pad_k: int) -> str:
    x = (f"x is [M, {layer.x_pitch}] (K = {layer.k} padded to 16-byte rows; padding finite)"
         if layer.input == "padded" else f"x is [M, {layer.k}] contiguous")
    if pad_k > layer.x_pitch:
        x += (f"; the kernel's own pitch is {pad_k}: x may also come as [M, {pad_k}] (padding finite), read "
              "where it lies, with nothing copied per call (`fc.kernel_x_pitch`; from C, `CS_IO_X_PADDED`)")
    y = {"contiguous": f"y is [M, {layer.n}] contiguous",
         "padded": f"y is [M, {layer.y_shape[1]}] (N = {layer.n} padded to 16-byte rows)",
         "transposed": f"y is y^T, [{layer.n}, M] contiguous"}[layer.output]
    return f"{x}; {y}."


def _common_files(layer: Layer, *, backend: str, header: str, pad_k: int) -> dict[str, str]:
    return {
        HEADER: header,
        "CMakeLists.txt": codegen.render_template("CMakeLists.txt", cutlass_version=codegen.cutlass_version(),
                                                  needs_cutlass="ON" if backend == "cutlass" else "OFF"),
        "example.cpp": codegen.render_template("example.cpp"),
        "README.md": codegen.render_template("export_README.md", shape=layer.shape, dtype=layer.dtype,
                                             backend=backend, library=LIBRARY, header=HEADER,
                                             layouts=_layouts(layer, pad_k)),
    }


def _kernel_export(layer: Layer, best: Path, meta: dict[str, Any], verdict: str) -> tuple[dict, dict]:
    transforms = meta["transforms"]
    source = (best / "kernel.cu").read_text()
    name = next((line.split()[-1] for line in source.splitlines() if line.startswith("// Gemm operator")), "kernel")
    backend = "gemv" if Config.from_dict(meta["config"]).gemv else "cutlass"
    files: dict[str, Any] = _common_files(layer, backend=backend, pad_k=transforms["pad_k"], header=_header(
        layer, kernel_name=name, pad_n=transforms["pad_n"], pad_k=transforms["pad_k"], knobs=meta["knobs"]))
    files["kernel.cu"] = best / "kernel.cu"
    files[LIBRARY] = best / "kernel.so"
    body = {"backend": backend, "arch": meta.get("arch", ARCH), "kernel": name,
            "config": meta["config"], "knobs": meta["knobs"], "transforms": transforms,
            "timing_us": meta["timing_us"], "kernel_us": meta.get("kernel_us", meta["timing_us"]["median_us"]),
            "cublas_us": meta["cublas_us"], "speedup": meta["speedup"], "verdict": verdict,
            "floor_us": meta.get("floor_us"), "toolchain": {"gpu": meta.get("gpu"), "nvcc": meta.get("nvcc"),
                                                            "cutlass": meta.get("cutlass")}}
    return files, body


def _fallback_export(layer: Layer, reason: str, judged: dict[str, Any] | None) -> tuple[dict, dict]:
    """`judged`: the best kernel's figures, as judged now or else as persisted; or the fallback's,
    where its fused cuBLASLt call won the race (then `speedup` is the fallback's, as raced)."""
    source = codegen.render_fallback(layer)
    files: dict[str, Any] = _common_files(layer, backend="cublas", pad_k=layer.k, header=_header(
        layer, kernel_name="cublas_fallback", pad_n=layer.n, pad_k=layer.k, knobs={}))
    files["kernel.cu"] = source.code
    built, problem = _build_fallback(source)
    note = None
    if built is not None:
        files[LIBRARY] = built
    else:
        note = f"the C library was not built here ({problem}): build it with CMakeLists.txt; Python calls torch"
    fused = (judged or {}).get("fallback_us")
    body = {"backend": "cublas", "arch": None, "fallback_reason": f"{reason}: this export calls cuBLAS",
            "transforms": {"swap_ab": False, "pad_n": layer.n, "pad_k": layer.k}, "config": None, "knobs": {},
            "timing_us": None, "cublas_us": (judged or {}).get("cublas_us"), "note": note,
            **({"fallback_us": fused, "speedup": judged["speedup"]} if fused and built is not None else
               {"speedup": 1.0, "best_kernel_speedup": None if fused else (judged or {}).get("speedup")})}
    return files, body


def _build_fallback(source: codegen.KernelSource) -> tuple[Path | None, str | None]:
    from cutsearch.compiler import local_compiler
    from cutsearch.errors import EnvironmentProblem
    from cutsearch.outcome import Failure

    try:
        compiler = local_compiler(jobs=1)
    except EnvironmentProblem as exc:
        return None, str(exc)
    built = compiler.compile(source)
    if isinstance(built, Failure):
        return None, built.message
    return built.library, None
