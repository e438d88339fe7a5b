"""`cutsearch worker`: join an existing study as one more worker (one per GPU, any host)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cutsearch.cli.app import app, err, invocation, out, parse_duration


@app.command("worker")
def worker_cmd(
    study: str = typer.Option(..., help="Name of the study to work on."),
    storage: Optional[str] = typer.Option(None, help="Storage URL shared by all workers, e.g. postgresql://..."),
    gpu: int = typer.Option(0, help="GPU index this worker measures on."),
    trials: int = typer.Option(64, help="Evaluated trials the study should reach; workers stop there."),
    timeout: Optional[str] = typer.Option(None, help="Wall-clock limit for starting new batches, e.g. 30m: the "
                                                     "batch in flight is finished."),
    wait: Optional[str] = typer.Option(None, help="Wait this long for the study to appear, e.g. 2m "
                                                  "(a worker started together with the search)."),
    evaluator: str = typer.Option("gpu", help="gpu, replay or model."),
    recording: Optional[Path] = typer.Option(None, help="Recorded evaluations, for --evaluator replay."),
    jobs: Optional[int] = typer.Option(None, help="Parallel nvcc processes."),
    batch: Optional[int] = typer.Option(None, help="Trials asked at once (default: twice --jobs)."),
    sampler: str = typer.Option("tpe", help="tpe, random, or model (the model's ranking in order)."),
    seed: Optional[int] = typer.Option(None, help="Sampler seed (default: differs per worker)."),
    prune: bool = typer.Option(True, "--prune/--no-prune",
                               help="With TPE, skip configs the cost model predicts at 2x its best or slower."),
    studies_dir: Optional[Path] = typer.Option(None, envvar="CUTSEARCH_STUDIES", help="Where studies live."),
) -> None:
    """Work on STUDY until it holds --trials evaluated trials. The layer comes from the study."""
    import os

    from cutsearch import tuner
    from cutsearch.console import ProgressView, print_summary
    from cutsearch.workspace import Workspace

    ws = Workspace(studies_dir)
    layer = tuner.study_layer(study, storage, ws, wait_s=parse_duration(wait) or 0.0)
    command = invocation()
    with ProgressView(err, trials=trials) as view:
        result = tuner.tune(layer, trials=trials, timeout_s=parse_duration(timeout), study=study, storage=storage,
                            evaluator=evaluator, gpu=gpu, jobs=jobs, recording=recording, batch=batch, sampler=sampler,
                            seed=os.getpid() if seed is None else seed, warm=0, workspace=ws, command=command,
                            events=view.event, prune=prune)
    print_summary(out, tuner.summary(result, command=command), result)
