"""The HTML report: one self-contained file of plotly figures, and clear words when there is no data."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from cutsearch.errors import UserError
from cutsearch.evaluator import Evaluation
from cutsearch.outcome import Failure, FailureKind
from cutsearch.problem import Layer
from cutsearch.report import build_report, trim_log
from cutsearch.search import open_study, search
from cutsearch.storage import open_storage
from tests.browser import SCREENSHOTS, chromium, needs_chromium

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "studies" / "recorded" / "h200-smoke" / "journals"
ASR_OUT = "fc-4096x5000x1024-f16"
GELU = "fc-3000x1001x999-bf16-bias-gelu"


def recorded(tmp_path: Path, study: str) -> str:
    journal = tmp_path / f"{study}.log"
    shutil.copy(RECORDED / f"{study}.log", journal)
    return str(journal)


class CompileErrors:
    """An evaluator whose every kernel fails to build, with a long compiler log."""

    source = "measured"

    def evaluate(self, layer, configs, events=None):
        for config in configs:
            log = "\n".join([f"kernel.cu(12): error: no instance of {config.key}"]
                            + [f"  instantiated from line {i}" for i in range(200)] + ["1 error detected"])
            yield Evaluation(config=config, source=self.source, compile_s=21.5,
                             outcome=Failure(kind=FailureKind.COMPILE_ERROR, message="no instance of the collective",
                                             log=log))

    def close(self):
        pass


def failing_study(journal: Path) -> str:
    search(Layer(m=256, n=512, k=1024), evaluator=CompileErrors(), storage=open_storage(journal),
           study_name="failing", trials=3, sampler="random", warm=0, batch=3)
    return str(journal)


def empty_study(journal: Path) -> str:
    open_study(Layer(m=256, n=512, k=1024), study_name="empty", storage=open_storage(journal),
               sampler=optuna.samplers.RandomSampler())
    return str(journal)


def test_report_is_one_self_contained_html_file(tmp_path):
    out = tmp_path / "out" / "report.html"
    assert build_report(ASR_OUT, storage=recorded(tmp_path, ASR_OUT), out=out) == out
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]
    page = out.read_text()
    assert page.count('class="plotly-graph-div"') == 5  # history, importances, parameters, roofline, compile
    for div in ("fig-history", "fig-importances", "fig-parameters", "fig-roofline", "fig-compile"):
        assert f'id="{div}"' in page
    assert '"name":"cuBLAS (F.linear)"' in page
    assert "<script src" not in page and 'src="http' not in page  # plotly.js is inlined
    assert "70.9 µs (trial 2, 128x128x128_c1x1_pingpong_tma_s0_persistent)" in page
    assert "66.6 µs (lower of the run beside the best and the median of 4 runs)" in page
    assert "75% reached" in page


@pytest.mark.parametrize("recording, study, floor", [
    ("h100-2026-12-05-random14-17/journals/r14_0", "r14_0", "0.0 µs, 1% reached, at the H200&#x27;s peaks"),
    ("h200-2026-12-05-reruns/journals/draw5_0", "draw5_0_d5", "0.6 µs, 7% reached</td>")])
def test_the_report_says_whose_peaks_a_floor_assumes_beside_another_gpus_times(tmp_path, recording, study, floor):
    """Recorded on an H100 and on an H200: the floor uses the H200's peaks, and says so beside the H100's."""
    journal = tmp_path / "journal.log"
    journal.write_bytes(gzip.decompress((ROOT / "studies" / "recorded" / f"{recording}.journal.log.gz").read_bytes()))
    page = build_report(study, storage=str(journal), out=tmp_path / "report.html").read_text()
    assert floor in page


def test_report_shows_failures_by_kind_with_their_message(tmp_path):
    page = build_report(GELU, storage=recorded(tmp_path, GELU), out=tmp_path / "r.html").read_text()
    assert "<h3>compile_error</h3>" in page
    assert "Unsupported schedule" in page
    assert "<details><summary>log</summary><pre>" in page
    assert "Too few completed trials to rank parameters (1 completed)" in page


def test_a_failures_only_study_reports_no_completed_trial(tmp_path):
    page = build_report("failing", storage=failing_study(tmp_path / "j.log"), out=tmp_path / "r.html").read_text()
    assert "No kernel to ship in failing" in page
    assert "<td>compile_error</td><td>3</td>" in page
    assert "no instance of the collective" in page
    assert "lines left out" in page  # the log is trimmed
    assert 'id="fig-compile"' in page  # the builds still took time
    assert 'id="fig-history"' not in page


def test_an_empty_study_reports_no_completed_trial(tmp_path):
    page = build_report("empty", storage=empty_study(tmp_path / "j.log"), out=tmp_path / "r.html").read_text()
    assert "No kernel to ship in empty" in page
    assert "plotly-graph-div" not in page


def test_an_unknown_study_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=f"no study named 'nope' in .* \\(it holds: {ASR_OUT}\\)"):
        build_report("nope", storage=recorded(tmp_path, ASR_OUT), out=tmp_path / "r.html")
    with pytest.raises(UserError, match="does not exist"):
        build_report("nope", storage=str(tmp_path / "missing" / "journal.log"), out=tmp_path / "r.html")
    assert not (tmp_path / "missing").exists() and not (tmp_path / "r.html").exists()


def test_trim_log_keeps_the_first_error_and_the_end():
    log = "\n".join(["error: first"] + [f"line {i}" for i in range(100)] + ["x" * 1000, "last"])
    trimmed = trim_log(log).splitlines()
    assert trimmed[0] == "error: first" and trimmed[-1] == "last"
    assert any("lines left out" in line for line in trimmed)
    assert max(len(line) for line in trimmed) < 310


def test_the_report_command_writes_the_file(tmp_path):
    import cutsearch.cli  # noqa: F401 - registers the commands
    from cutsearch.cli.app import app

    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", ASR_OUT, "--storage", recorded(tmp_path, ASR_OUT),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "plotly-graph-div" in out.read_text()


@needs_chromium
def test_chromium_renders_the_report_plots(tmp_path):
    out = build_report(ASR_OUT, storage=recorded(tmp_path, ASR_OUT), out=tmp_path / "report.html")
    shot = SCREENSHOTS / "report.png"
    dom = chromium(out.as_uri(), shot, tmp_path / "profile", height=3400)
    # Each figure that plotly drew holds its own main-svg layers; a failed script leaves none.
    drawn = {part.split('"', 1)[0]: 'class="main-svg"' in part for part in dom.split('id="fig-')[1:]}
    assert drawn == dict.fromkeys(("history", "importances", "parameters", "roofline", "compile"), True)
    assert shot.stat().st_size > 20_000
