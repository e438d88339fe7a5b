"""`cutsearch show`: the top trials and the best kernel against cuBLAS, in the terminal."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import optuna
import pytest
from rich.console import Console
from typer.testing import CliRunner

from cutsearch.console import print_study
from cutsearch.errors import UserError
from cutsearch.evaluator import Evaluation
from cutsearch.outcome import Failure, FailureKind
from cutsearch.problem import Layer
from cutsearch.search import open_study, search
from cutsearch.storage import open_storage

RECORDED = Path(__file__).resolve().parent.parent / "studies" / "recorded" / "h200-smoke" / "journals"
ASR_OUT = "fc-4096x5000x1024-f16"
GELU = "fc-3000x1001x999-bf16-bias-gelu"


def recorded(tmp_path: Path, study: str) -> str:
    journal = tmp_path / f"{study}.log"
    shutil.copy(RECORDED / f"{study}.log", journal)
    return str(journal)


def shown(study: str, storage: str, **kwargs) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    print_study(console, study, storage=storage, **kwargs)
    return console.file.getvalue()


class Timeouts:
    """An evaluator whose every kernel hangs on the GPU."""

    source = "measured"

    def evaluate(self, layer, configs, events=None):
        for config in configs:
            yield Evaluation(config=config, source=self.source, compile_s=30.0,
                             outcome=Failure(kind=FailureKind.TIMEOUT, message="no reply within 60 s"))

    def close(self):
        pass


def test_show_ranks_the_recorded_trials_against_cublas(tmp_path):
    text = shown(ASR_OUT, recorded(tmp_path, ASR_OUT))
    assert "top 4 of 4 completed trials" in text
    rows = [line for line in text.splitlines() if line.count("│") == 8]  # the seven-column table
    assert [row.split("│")[1].strip() for row in rows] == ["2", "3", "1", "0"]  # fastest first
    assert "70.2-72.2" in rows[0] and "0.94x" in rows[0] and "│        48 │" in rows[0]
    assert "128x128x128 c1x1 pingpong/tma/persistent swap" in rows[1]
    assert "70.9 µs (trial 2)" in text
    assert "66.6 µs (lower of the run beside the best and the median of 4 runs)" in text
    assert "53.1 µs (75% reached)" in text
    assert "4 (4 completed, 0 failed, 12 pending)" in text
    assert "cuBLAS is faster for this layer" in text


def test_show_limits_the_table_to_top(tmp_path):
    text = shown(ASR_OUT, recorded(tmp_path, ASR_OUT), top=2)
    assert "top 2 of 4 completed trials" in text
    assert "107.3" not in text


def test_show_counts_failures_by_kind(tmp_path):
    text = shown(GELU, recorded(tmp_path, GELU))
    assert "compile_error 2" in text
    assert "1.95x" in text and "(lower of the run beside the best and the median of 1 run)" in text


def test_show_counts_rule_refusals_apart_from_trials(tmp_path):
    text = shown("fc-16x4096x4096-f16", recorded(tmp_path, "fc-16x4096x4096-f16"))
    assert "4 (4 completed, 0 failed); 28 proposals refused by space rules" in text


def test_a_failures_only_study_shows_its_failures(tmp_path):
    journal = tmp_path / "j.log"
    search(Layer(m=256, n=512, k=1024), evaluator=Timeouts(), storage=open_storage(journal),
           study_name="hangs", trials=2, sampler="random", warm=0, batch=2)
    text = shown("hangs", str(journal))
    assert "no kernel to ship in hangs: every finished trial failed" in text
    assert "timeout 2" in text
    assert "top " not in text


def test_an_empty_study_is_a_user_error(tmp_path):
    journal = tmp_path / "j.log"
    open_study(Layer(m=256, n=512, k=1024), study_name="empty", storage=open_storage(journal),
               sampler=optuna.samplers.RandomSampler())
    with pytest.raises(UserError, match="no finished trial yet"):
        shown("empty", str(journal))


def test_an_unknown_study_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no study named 'nope'"):
        shown("nope", recorded(tmp_path, ASR_OUT))
    with pytest.raises(UserError, match="does not exist"):
        shown("nope", str(tmp_path / "studies" / "nope" / "journal.log"))


def test_the_show_command_prints_the_study(tmp_path):
    import cutsearch.cli  # noqa: F401 - registers the commands
    from cutsearch.cli.app import app

    result = CliRunner().invoke(app, ["show", ASR_OUT, "--storage", recorded(tmp_path, ASR_OUT), "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "best kernel" in result.output and "70.9 µs" in result.output


def padded_winner(layer: str, best_us: float, cublas_us: float, best: dict) -> str:
    """The console summary of a study whose winner was also timed with the caller's buffers padded.
    `layer` is "MxNxK", f16 with no activation."""
    from cutsearch.console import print_summary

    m, n, k = (int(v) for v in layer.split("x"))
    summary = {"study": "s", "layer": {"M": m, "N": n, "K": k, "dtype": "f16", "bias": False, "activation": "none"},
               "best_us": best_us, "cublas_us": cublas_us, "speedup": cublas_us / best_us, "floor_us": 1.0,
               "fraction_of_floor": 0.1, "trials": 1, "new_trials": 1, "new_compiles": 1, "failures": {},
               "wall_s": 1.0, "cublas_wins": best_us > cublas_us, "best": best}
    buffer = io.StringIO()
    print_summary(Console(file=buffer, width=160), summary)
    return buffer.getvalue()


def test_summary_reports_the_figures_with_padded_buffers_beside_the_plain_one():
    """A padded winner is also timed with the caller's buffers padded: both figures are shown."""
    text = padded_winner("3000x1001x999", 40.0, 80.0, {
        "config": {"tile_m": 128, "tile_n": 64, "tile_k": 128, "cluster_m": 1, "cluster_n": 2,
                   "kernel_schedule": "pingpong", "epilogue_schedule": "tma", "stages": 0,
                   "tile_scheduler": "persistent", "swap_ab": True, "pad": True},
        "knobs": {"raster": 1, "swizzle": 8}, "io_variants_us": {"x padded": 32.0, "kernel only": 20.0}})
    assert "with x padded" in text and "32.0 µs (2.50x)" in text
    assert "with x and y padded" in text and "20.0 µs (4.00x)" in text
    assert "pitch" not in text  # x padded as `--input padded` pads it


def test_split_k_padded_figures_name_the_pitch_x_must_have():
    """Split-K pads an odd K further than `--input padded` does (100352 against 100008 here), so
    its figures with x handed over padded hold for x at its own pitch only, and say so. Figures
    as recorded on the H200 (studies/recorded/h200-2026-12-03-tiny-out/split-k-padded/)."""
    text = padded_winner("7x9x100001", 19.0, 18.1, {
        "config": {"tile_m": 64, "tile_n": 16, "tile_k": 128, "cluster_m": 1, "cluster_n": 1,
                   "kernel_schedule": "ws", "epilogue_schedule": "tma", "stages": 0,
                   "tile_scheduler": "grid", "swap_ab": True, "pad": True, "split_k": True},
        "knobs": {"splits": 32, "pdl": 1}, "io_variants_us": {"x padded": 16.6, "kernel only": 16.4}})
    assert "16.6 µs (1.09x); x at split-K's pitch of 100352, not --input padded's" in text
    assert "16.4 µs (1.10x); x at split-K's pitch of 100352" in text


def test_summary_shows_the_floor_with_a_launch_as_the_most_any_kernel_could_gain():
    from cutsearch.console import print_summary

    summary = {"study": "s", "layer": {"M": 16, "N": 4096, "K": 4096, "dtype": "f16", "bias": True,
                                       "activation": "none"},
               "best_us": 18.0, "cublas_us": 20.0, "speedup": 1.11, "floor_us": 7.9, "fraction_of_floor": 0.44,
               "empty_kernel_us": 4.6, "floor_with_launch_us": 12.5, "trials": 1, "new_trials": 1, "new_compiles": 1, "failures": {},
               "wall_s": 1.0, "cublas_wins": False, "best": None}
    buffer = io.StringIO()
    print_summary(Console(file=buffer, width=120), summary)
    assert "floor + empty kernel" in buffer.getvalue() and "at most 1.60x" in buffer.getvalue()
    assert "empty kernel 4.6 µs" in buffer.getvalue()


@pytest.mark.parametrize("gpu, says", [("NVIDIA H100 80GB HBM3", True), ("NVIDIA H200", False), (None, False)])
def test_a_floor_beside_another_gpus_times_says_whose_peaks_it_assumes(gpu, says):
    """The floors use the H200's peaks; an H100 has less bandwidth, so its floors are higher."""
    from cutsearch.console import print_summary

    summary = {"study": "s", "layer": {"M": 2, "N": 427, "K": 240, "dtype": "f16", "bias": True, "activation": "none"},
               "best_us": 6.3, "cublas_us": 7.8, "speedup": 1.23, "floor_us": 0.05, "fraction_of_floor": 0.01,
               "trials": 1, "new_trials": 1, "new_compiles": 1, "failures": {}, "wall_s": 1.0, "cublas_wins": False,
               "best": None, "gpu": gpu}
    buffer = io.StringIO()
    print_summary(Console(file=buffer, width=160), summary)
    assert "0.1 µs (1% reached" in buffer.getvalue()
    assert ("1% reached; at the H200's peaks)" in buffer.getvalue()) == says


def test_a_grid_winner_is_described_without_raster_or_swizzle():
    """A ws kernel launches a CTA per tile, with no scheduler whose order the knobs would set."""
    from cutsearch.console import _config_line

    grid = {"tile_m": 64, "tile_n": 16, "tile_k": 128, "cluster_m": 2, "cluster_n": 1, "kernel_schedule": "ws",
            "epilogue_schedule": "tma", "stages": 0, "tile_scheduler": "grid", "swap_ab": True, "pad": False}
    line = _config_line(grid, {"raster": 0, "swizzle": 1})
    assert "ws/tma" in line and "grid" in line and "a CTA per tile" in line and "raster" not in line
    persistent = _config_line({**grid, "kernel_schedule": "pingpong", "tile_scheduler": "persistent"},
                              {"raster": 2, "swizzle": 4})
    assert "raster along N, swizzle 4" in persistent and "a CTA per tile" not in persistent
    split = _config_line({**grid, "epilogue_schedule": "fixup", "split_k": True}, {"splits": 8})
    assert "split-K in 8 slices; a CTA per tile and slice" in split and "raster" not in split
