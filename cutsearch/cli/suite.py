"""`cutsearch suite` (search many layers, one benchmark file) and `cutsearch build`
(compile a layer's most promising kernels ahead, e.g. on a CPU machine)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cutsearch.cli.app import app, err, invocation, out, parse_duration
from cutsearch.errors import UserError


@app.command("suite")
def suite_cmd(
    suite_file: Path = typer.Argument(..., help="TOML file with one table per layer (see studies/suite.toml)."),
    budget: Optional[str] = typer.Option(None, help="Total wall-clock budget, shared among the layers, e.g. 10m."),
    trials: int = typer.Option(32, help="Evaluated trials per layer at most."),
    only: Optional[str] = typer.Option(None, help="Comma-separated layer names to run (default: all); a table's "
                                       "name runs each of its dtypes."),
    gpu: int = typer.Option(0, help="GPU index to measure on."),
    jobs: Optional[int] = typer.Option(None, help="Parallel nvcc processes."),
    batch: Optional[int] = typer.Option(None, help="Trials asked at once (default: twice --jobs)."),
    evaluator: str = typer.Option("gpu", help="gpu, or model to plan without a GPU."),
    studies_dir: Optional[Path] = typer.Option(None, envvar="CUTSEARCH_STUDIES", help="Where studies live."),
) -> None:
    """Search every layer of a suite and write studies/results/suite-<gpu>-<date>.json."""
    from cutsearch import tuner
    from cutsearch.console import ProgressView
    from cutsearch.evaluator import GpuEvaluator
    from cutsearch.problem import load_layers, select_layers
    from cutsearch.suite import run_suite
    from cutsearch.workspace import Workspace

    if evaluator not in ("gpu", "model"):
        raise UserError(f"a suite runs with --evaluator gpu or model, not {evaluator!r}")
    layers = select_layers(load_layers(suite_file), only, suite_file)
    tuner.check_options(trials=trials, gpu=gpu, jobs=jobs, batch=batch)
    ws = Workspace(studies_dir)
    ws.writable()
    command = invocation()
    ev = tuner.make_evaluator(evaluator, layer=next(iter(layers.values())), gpu=gpu, jobs=jobs)
    try:
        views: list[ProgressView] = []

        def tune(layer, **kw):
            with ProgressView(err, trials=kw["trials"]) as view:
                views.append(view)
                return tuner.tune(layer, evaluator=ev, batch=batch, events=view.event, **kw)

        def gpu_name():
            return ev.device().name if isinstance(ev, GpuEvaluator) else evaluator + "-evaluator"

        path, body = run_suite(layers, tune=tune, budget_s=parse_duration(budget), trials=trials, workspace=ws,
                               command=command, gpu_name=gpu_name,
                               on_layer=lambda name, i, n: err.print(f"[bold]layer {i + 1}/{n}: {name}[/]"))
    finally:
        ev.close()
    out.print(_table(body))
    gm = body["geomean_speedup"]
    predicted = all(r["source"] == "predicted" for r in body["records"])
    out.print(f"geometric mean speedup {gm:.2f}x" if gm else "no speedup: the model predicts kernels, not cuBLAS"
              if predicted else "no speedup measured")
    out.print(f"wrote {path}")


def _table(body: dict):
    from rich.table import Table

    table = Table(title=f"suite on {body['gpu']}")
    for col in ("layer", "dtype", "cuBLAS µs", "cutsearch µs", "speedup", "floor µs", "+ empty kernel µs",
                "at most", "note"):
        table.add_column(col)
    for r in body["records"]:
        bound = r.get("speedup_bound")
        table.add_row(r["name"], r["dtype"], _us(r["cublas_us"]), _us(r["cutsearch_us"]),
                      "-" if r["speedup"] is None else f"{r['speedup']:.2f}x", _us(r["floor_us"]),
                      _us(r.get("floor_with_launch_us")), "-" if bound is None else f"{bound:.2f}x",
                      _note(r))
    return table


def _note(r: dict) -> str:
    if r["source"] == "predicted" and r["kernel_us"] is not None:
        return f"model: {r['kernel_us']:.1f} µs"
    if not r["fallback"]:
        return ""
    return "cuBLASLt fallback, ReLU fused" if r.get("fallback_us") else "cuBLAS fallback"


def _us(v):
    return "-" if v is None else f"{v:.1f}"


@app.command("build")
def build_cmd(
    suite_file: Path = typer.Argument(..., help="TOML file of layers (one or many)."),
    top: int = typer.Option(8, help="Configs to build per layer: the ones a new study would measure first."),
    jobs: Optional[int] = typer.Option(None, help="Parallel nvcc processes."),
    studies_dir: Optional[Path] = typer.Option(None, envvar="CUTSEARCH_STUDIES", help="Where earlier studies live."),
) -> None:
    """Compile each layer's most promising kernels into the cache, without a GPU."""
    from cutsearch.outcome import Failure
    from cutsearch.problem import load_layers
    from cutsearch.tuner import prebuild
    from cutsearch.workspace import Workspace

    built = failed = cached = 0
    for tag, result in prebuild(load_layers(suite_file), top=top, jobs=jobs, workspace=Workspace(studies_dir)):
        if isinstance(result, Failure):
            failed += 1
            err.print(f"{tag}: {result.kind.value}: {result.message}")
        else:
            cached += result.cached
            built += not result.cached
            err.print(f"{tag}: {'cached' if result.cached else f'built in {result.compile_s:.0f} s'}")
    out.print(f"{built + cached + failed} distinct kernels: {built} built, {cached} already cached, {failed} failed")
