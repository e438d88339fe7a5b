"""`cutsearch search`: tune one layer."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cutsearch.cli.app import app, err, invocation, out, parse_duration
from cutsearch.errors import UserError


_FLAG_VALUES = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _layer(m, n, k, dtype, bias, activation, layer_file, io=("contiguous", "contiguous")):
    from cutsearch.problem import Layer, load_layers

    if layer_file is not None:
        if str(layer_file).lower() in _FLAG_VALUES and not layer_file.exists():
            raise UserError(f"{str(layer_file)!r} is no layer file: --bias, --all-stages, --split-k and --prune "
                            "are flags and take no value (--no-bias, --no-prune turn them off)")
        if any(v is not None for v in (m, n, k)):
            raise UserError("give either a layer file or --m/--n/--k, not both")
        given = [option for option, value, default in (
            ("--dtype", dtype, "f16"), ("--bias", bias, False), ("--activation", activation, "none"),
            ("--input", io[0], "contiguous"), ("--output", io[1], "contiguous")) if value != default]
        if given:
            raise UserError(f"the layer file sets the layer: drop {', '.join(given)} (or change the file)")
        layers = load_layers(layer_file)
        if len(layers) != 1:
            raise UserError(f"{layer_file} defines {len(layers)} layers: use `cutsearch suite` for several")
        return next(iter(layers.values()))
    if None in (m, n, k):
        raise UserError("give the layer as --m M --n N --k K (or a TOML layer file)")
    return Layer(m=m, n=n, k=k, dtype=dtype, bias=bias, activation=activation, input=io[0], output=io[1])


@app.command("search")
def search_cmd(
    layer_file: Optional[Path] = typer.Argument(None, help="TOML file with a \\[layer] table (M, N, K, dtype, bias)."),
    m: Optional[int] = typer.Option(None, "--m", help="Rows of x (tokens in the batch)."),
    n: Optional[int] = typer.Option(None, "--n", help="Output features (rows of W)."),
    k: Optional[int] = typer.Option(None, "--k", help="Input features."),
    dtype: str = typer.Option("f16", help="f16 or bf16 (fp32 accumulation)."),
    bias: bool = typer.Option(False, "--bias/--no-bias", help="Add a bias vector (fused in the epilogue)."),
    activation: str = typer.Option("none", help="none, relu, gelu or silu (fused)."),
    input_layout: str = typer.Option("contiguous", "--input",
                                     help="contiguous, or padded: x arrives with rows padded to 16 bytes."),
    output_layout: str = typer.Option("contiguous", "--output",
                                      help="contiguous, padded (rows padded to 16 bytes) or transposed (y^T)."),
    trials: int = typer.Option(64, help="Finished trials the study should hold; a rerun resumes up to it."),
    timeout: Optional[str] = typer.Option(None, help="Wall-clock limit for starting new batches, e.g. 15m: the "
                                                     "batch in flight is finished."),
    study: Optional[str] = typer.Option(None, help="Study name (default: from the layer)."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL (default: a journal file under studies/)."),
    gpu: int = typer.Option(0, help="GPU index to measure on."),
    evaluator: str = typer.Option("gpu", help="gpu (measure), replay (recorded data) or model (predictions)."),
    recording: Optional[Path] = typer.Option(None, help="Recorded evaluations, for --evaluator replay."),
    sampler: str = typer.Option("tpe", help="tpe, random, or model (the model's ranking in order)."),
    jobs: Optional[int] = typer.Option(None, help="Parallel nvcc processes (default: CPU count)."),
    batch: Optional[int] = typer.Option(None, help="Trials asked at once (default: twice --jobs). Above --jobs, "
                                                   "kernels share translation units: more per minute, "
                                                   "fewer sampler updates."),
    warm: Optional[int] = typer.Option(None, help="Model-ranked configs enqueued first (default: one batch)."),
    seed: int = typer.Option(0, help="Sampler seed, for reproducible searches."),
    all_stages: bool = typer.Option(False, "--all-stages",
                                    help="Also search explicit stage counts (2-7). By default the CUTLASS builder "
                                         "picks the count: on recorded H200 data explicit counts never won by "
                                         "more than 0.6%."),
    split_k: bool = typer.Option(False, "--split-k",
                                 help="Also search split-K wherever the output tiles leave SMs idle: K in "
                                      "slices, summed by the GEMM's own epilogue or by a second kernel. Without "
                                      "it, split-K is searched only where K >= 1024 and 64x32 tiles would busy a "
                                      "quarter of the SMs or fewer (half, where K >= 7680); on the H200 it was at "
                                      "par for decode."),
    prune: bool = typer.Option(True, "--prune/--no-prune",
                               help="With TPE, skip configs the cost model predicts at 2x its best or slower."),
    studies_dir: Optional[Path] = typer.Option(None, envvar="CUTSEARCH_STUDIES", help="Where studies live."),
) -> None:
    """Search the fastest kernel for one layer; running it again resumes the same study."""
    from cutsearch import tuner
    from cutsearch.console import ProgressView, print_summary
    from cutsearch.workspace import Workspace

    layer = _layer(m, n, k, dtype, bias, activation, layer_file, (input_layout, output_layout))
    seconds = parse_duration(timeout)
    tuner.check_options(trials=trials, gpu=gpu, jobs=jobs, batch=batch, seed=seed, warm=warm,
                        sampler=sampler, evaluator=evaluator, recording=recording)  # before any notice
    command = invocation()
    if evaluator == "model":
        err.print("[yellow]--evaluator model: every time below is a model prediction, not a measurement[/]")
    if split_k:
        from cutsearch.space import Space

        if Space(layer, split_k=(False, True)).dimensions()["split_k"] == (False,):
            err.print("[yellow]--split-k: not searched for this layer: split-K needs an output smaller than one "
                      "128x128 tile per SM, y in rows (not y^T), and x's pitch or split-K's cut into 16-byte "
                      "slices[/]")
    with ProgressView(err, trials=trials) as view:
        result = tuner.tune(layer, trials=trials, timeout_s=seconds, study=study, storage=storage,
                            evaluator=evaluator, gpu=gpu, jobs=jobs, batch=batch, recording=recording, sampler=sampler,
                            seed=seed, warm=warm, workspace=Workspace(studies_dir), command=command,
                            events=view.event, all_stages=all_stages, split_k=split_k, prune=prune)
    print_summary(out, tuner.summary(result, command=command), result)
