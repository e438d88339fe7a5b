"""Commands that read a finished or running study: show, report, dashboard, export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from cutsearch.cli.app import app, err, out
from cutsearch.errors import UserError
from cutsearch.workspace import Workspace

_STUDIES = typer.Option(None, "--studies-dir", envvar="CUTSEARCH_STUDIES", help="Where studies live.")


@app.command("show")
def show_cmd(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = typer.Option(None, help="Storage URL (default: the study's journal file)."),
    top: int = typer.Option(10, help="Rows of the top-trials table."),
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """A terminal summary: top trials, and the best kernel against cuBLAS."""
    from cutsearch.console import print_study

    ws = Workspace(studies_dir)
    if top <= 0:
        raise UserError(f"--top must be positive, got {top}")
    print_study(out, study, storage=ws.storage_url(Workspace.check_name(study), storage), top=top)


@app.command("report")
def report_cmd(
    study: str = typer.Argument(..., help="Study name."),
    out_path: Path = typer.Option(Path("report.html"), "--out", help="The HTML file to write."),
    storage: Optional[str] = typer.Option(None, help="Storage URL (default: the study's journal file)."),
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """Write one self-contained HTML report of a study."""
    from cutsearch.report import build_report

    ws = Workspace(studies_dir)
    build_report(study, storage=ws.storage_url(Workspace.check_name(study), storage), out=out_path)
    out.print(f"wrote {out_path}")


@app.command("dashboard")
def dashboard_cmd(
    study: Optional[str] = typer.Argument(None, help="Study name (its journal file is served)."),
    storage: Optional[str] = typer.Option(None, help="Storage URL, instead of a study name."),
    host: str = typer.Option("127.0.0.1", help="Address to bind. Anything but loopback needs --allow-remote."),
    port: int = typer.Option(8080, help="Port to serve on."),
    allow_remote: bool = typer.Option(False, help="Serve beyond loopback: the dashboard has no authentication."),
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """Serve optuna-dashboard on a study's storage (also while a search runs)."""
    from cutsearch.dashboard import serve

    ws = Workspace(studies_dir)
    if study is None and storage is None:
        raise UserError("give a study name or --storage URL")
    url = ws.storage_url(Workspace.check_name(study), storage) if study else storage
    artifacts = ws.artifacts(study) if study else None
    serve(url, artifacts=artifacts, host=host, port=port, allow_remote=allow_remote, console=err)


@app.command("export")
def export_cmd(
    study: str = typer.Argument(..., help="Study name."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Directory to write (default: exports/<study>)."),
    storage: Optional[str] = typer.Option(None, help="Storage URL (default: the study's journal file)."),
    force: bool = typer.Option(False, help="Replace an earlier export of cutsearch in --out."),
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """Write a self-contained directory an application can load (Python or C++)."""
    from cutsearch.export import export

    ws = Workspace(studies_dir)
    target = export(study, out=out_dir, storage=storage, workspace=ws, force=force)
    meta = json.loads((target / "meta.json").read_text())
    what = (f"the cuBLAS fallback ({meta['fallback_reason']})" if meta["backend"] == "cublas"
            else f"kernel {meta['kernel']}, {meta['speedup']:.2f}x cuBLAS")
    out.print(f"exported {study} to {target}: {what}", highlight=False)
