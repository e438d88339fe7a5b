"""Search economy: record a study, calibrate the model, replay strategies, ask a second opinion.

Everything here reads recorded measurements; nothing is built or measured, and every figure
printed says so.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from cutsearch import persist
from cutsearch.cli.app import app, check_output_file, err, invocation, out
from cutsearch.errors import UserError
from cutsearch.workspace import Workspace

_STUDIES = typer.Option(None, "--studies-dir", envvar="CUTSEARCH_STUDIES", help="Where studies live.")
_RECORDINGS = typer.Argument(..., help="Recordings: JSON files written by `cutsearch record`.")


def _rho(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:+.2f}"


@app.command("record")
def record_cmd(
    study: str = typer.Argument(..., help="Study name."),
    out_path: Path = typer.Option(..., "--out", help="The recording to write (JSON)."),
    storage: Optional[str] = typer.Option(None, help="Storage URL (default: the study's journal file)."),
    results: Optional[Path] = typer.Option(None, help="The study's summary JSON, for provenance "
                                                      "(default: studies/results/<study>.json)."),
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """Write a study's measured trials as a recording that `--evaluator replay` and the benchmarks replay."""
    from cutsearch.efficiency import record_study

    ws = Workspace(studies_dir)
    name = Workspace.check_name(study)
    url = ws.storage_url(name, storage)
    if storage is None and not ws.journal(name).is_file():
        raise UserError(f"no study {name!r} in {ws.root}: give --storage or --studies-dir")
    if results is not None and not isinstance(persist.read_json(results), dict):
        raise UserError(f"--results {results} is no study summary (a JSON file written by `cutsearch search`)")
    summary = record_study(name, storage=url, out=out_path, command=invocation(),
                           results=results or ws.result_json(name))
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(summary.skipped.items())) or "none"
    out.print(f"recorded {summary.evaluations} evaluations ({summary.measured} measured) of "
              f"{summary.layer.shape} {summary.layer.dtype} to {summary.path}; skipped: {skipped}")


@app.command("calibrate")
def calibrate_cmd(
    recordings: List[Path] = _RECORDINGS,
    out_path: Path = typer.Option(Path("studies/model-calibration.json"), "--out", help="The JSON to write."),
    objective: str = typer.Option("log", help="log: mean |log(predicted/measured)|; spearman: within-layer rank."),
    rows: int = typer.Option(20, help="Rows of the predicted-vs-measured table to print (all go to the JSON)."),
) -> None:
    """Fit the cost model's constants to recorded measurements; prints them, never applies them."""
    from cutsearch.calibration import fit
    from cutsearch.efficiency import load_recordings

    if rows < 0:
        raise UserError(f"--rows must be 0 or more, got {rows}")
    check_output_file(out_path)
    recs = load_recordings(recordings)
    result = fit(recs, objective=objective)
    data = result.to_dict(recordings=recs, command=invocation())
    persist.write_json(out_path, data)
    scores = Table(title="model against recorded H200 measurements", title_justify="left")
    for col in ("", "median |log(pred/meas)|", "mean |log(pred/meas)|", "Spearman (mean over layers)"):
        scores.add_column(col)
    for label, s in (("before", result.score_before), ("after", result.score_after)):
        scores.add_row(label, f"{s.median_abs_log:.3f}", f"{s.mean_abs_log:.3f}", _rho(s.spearman_mean))
    out.print(scores)
    per = Table(title="Spearman per recording", title_justify="left")
    for col in ("recording", "before", "after"):
        per.add_column(col, overflow="fold")
    for name, rho in result.score_before.spearman.items():
        per.add_row(name, _rho(rho), _rho(result.score_after.spearman[name]))
    out.print(per)
    table = Table(title="predicted vs measured (µs)", title_justify="left")
    for col in ("layer", "config", "measured", "predicted before", "predicted after"):
        table.add_column(col, overflow="fold")
    for row in result.table[:rows]:
        table.add_row(row["layer"], row["config"], f"{row['measured_us']:.1f}", f"{row['predicted_before_us']:.1f}",
                      f"{row['predicted_after_us']:.1f}")
    out.print(table)
    changed = {k: v for k, v in data["coefficients_after"].items() if data["coefficients_before"][k] != v}
    out.print("fitted constants (model.DEFAULT is unchanged): "
              + (", ".join(f"{k}={v:.4g}" for k, v in changed.items()) or "no change"))
    if result.points < 20:
        err.print(f"[yellow]only {result.points} measurements: too few for a fit to be trusted[/]")
    out.print(f"wrote {out_path}")


@app.command("efficiency")
def efficiency_cmd(
    recordings: List[Path] = _RECORDINGS,
    repeats: int = typer.Option(5, help="Seeds per strategy (the model's ranking has one order)."),
    jobs: int = typer.Option(16, help="Parallel nvcc processes in the wall-time model."),
    batch: Optional[int] = typer.Option(None, help="Trials asked at once (default: twice --jobs, as a search does)."),
    warm: Optional[int] = typer.Option(None, help="Model-ranked configs first for tpe+warm (default: one batch)."),
    tolerance: float = typer.Option(0.02, help="How close to the recording's best counts as found."),
    strategy: Optional[List[str]] = typer.Option(None, help="Strategies to run (default: all)."),
    out_path: Optional[Path] = typer.Option(None, "--out", help="JSON to write "
                                                                "(default: studies/results/efficiency-<date>.json)."),
    markdown_path: Optional[Path] = typer.Option(None, "--markdown", help="Also write the README table here."),
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """Replay search strategies over recordings: trials and wall time to come within 2% of the best."""
    from cutsearch import efficiency

    if jobs <= 0:
        raise UserError(f"--jobs must be positive, got {jobs}")
    if not 0 <= tolerance < 1:
        raise UserError(f"--tolerance must be a fraction in [0, 1), got {tolerance}")
    check_output_file(out_path)
    check_output_file(markdown_path, "--markdown")
    recs = efficiency.load_recordings(recordings)
    report = efficiency.benchmark(recs, strategies=strategy or efficiency.STRATEGIES, repeats=repeats, batch=batch,
                                  cost=efficiency.CostModel(jobs=jobs), tolerance=tolerance, warm=warm,
                                  command=invocation())
    target = out_path or efficiency.default_report_path(studies_dir)
    efficiency.write_report(report, target)
    if markdown_path is not None:
        persist.write_text(markdown_path, report["markdown"])
    typer.echo(report["markdown"])  # verbatim: a table to paste, never re-wrapped
    out.print(f"wrote {target}" + (f" and {markdown_path}" if markdown_path else ""))


@app.command("heuristics")
def heuristics_cmd(
    recordings: List[Path] = _RECORDINGS,
    gpu: str = typer.Option("H200_SXM", help="nvMatmulHeuristics' predefined GPU."),
    metric: str = typer.Option("relative", help="relative (tuned for ordering) or runtime."),
    out_path: Optional[Path] = typer.Option(None, "--out", help="Also write the comparison as JSON."),
) -> None:
    """Compare the model's ranking and nvMatmulHeuristics' with recorded measurements."""
    from cutsearch.efficiency import load_recordings
    from cutsearch.heuristics import METRICS, Heuristics, compare

    if metric not in METRICS:  # before the package is looked for
        raise UserError(f"unknown metric {metric!r}: choose one of {', '.join(METRICS)}")
    check_output_file(out_path)
    recs = load_recordings(recordings)
    heur = Heuristics(gpu=gpu, metric=metric)
    try:
        results = compare(recs, heur)
    finally:
        heur.close()
    table = Table(title="rank correlation with recorded H200 measurements (Spearman)", title_justify="left")
    for col in ("recording", "measured", "rated", "model", "nvMatmulHeuristics", "model vs heuristics"):
        table.add_column(col, overflow="fold")
    for c in results:
        table.add_row(c.recording, str(c.measured), str(c.rated), _rho(c.model_vs_measured),
                      _rho(c.heuristics_vs_measured), _rho(c.model_vs_heuristics))
    out.print(table)
    out.print("estimates are predictions; the measurements are replayed from the recordings")
    if out_path is not None:
        persist.write_json(out_path, {"recorded": True, "gpu_descriptor": gpu, "metric": metric,
                                      "command": invocation(), "comparisons": [c.to_dict() for c in results]})
        out.print(f"wrote {out_path}")


@app.command("throughput")
def throughput_cmd(
    m: int = typer.Option(4096, "--m", help="Rows of x."), n: int = typer.Option(5000, "--n", help="Output features."),
    k: int = typer.Option(1024, "--k", help="Input features."),
    dtype: str = typer.Option("f16", help="f16 or bf16."),
    kernels: int = typer.Option(64, help="Kernels built sharing units (the model's top configs)."),
    naive: int = typer.Option(32, help="How many of them are also built one per nvcc process."),
    jobs: Optional[int] = typer.Option(None, help="Parallel nvcc processes (default: usable CPUs)."),
    batch: int = typer.Option(8, help="Kernels per translation unit at most."),
    out_path: Path = typer.Option(..., "--out", help="The JSON to write."),
    keep_cache: Optional[Path] = typer.Option(None, help="Keep the shared build's kernels in this cache."),
) -> None:
    """Measure compile throughput: kernels a minute alone and sharing units, same machine code."""
    import json
    import os

    from cutsearch import throughput
    from cutsearch.persist import write_json
    from cutsearch.problem import Layer

    if kernels <= 0 or naive <= 0 or naive > kernels:
        raise UserError("need 0 < --naive <= --kernels")
    if batch <= 0 or (jobs is not None and jobs <= 0):
        raise UserError("--batch and --jobs must be positive")
    check_output_file(out_path)  # before minutes of builds
    if keep_cache is not None and keep_cache.exists() and not keep_cache.is_dir():
        raise UserError(f"--keep-cache {keep_cache} is a file: name a directory for the kernel cache")
    from rich.progress import Progress

    layer = Layer(m=m, n=n, k=k, dtype=dtype)
    with Progress(console=err, transient=True) as progress:
        tasks: dict[str, object] = {}

        def built(mode: str, done: int, total: int) -> None:
            task = tasks.get(mode) or tasks.setdefault(mode, progress.add_task(f"building {mode}", total=total))
            progress.update(task, completed=done)

        result = throughput.benchmark(layer, kernels=kernels, naive_kernels=naive,
                                      jobs=jobs or len(os.sched_getaffinity(0)), batch=batch, keep_cache=keep_cache,
                                      on_phase=lambda s: progress.console.print(f"[dim]{s}[/]"), on_built=built)
    result["command"] = invocation()
    write_json(out_path, result)
    out.print(json.dumps({"runs": result["runs"], "speedup": result["speedup"],
                          "identical_machine_code": result["identical_machine_code"]}, indent=1))
