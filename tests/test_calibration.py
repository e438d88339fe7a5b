"""Model calibration against recorded H200 measurements, and the optional second opinion.

The recorded tests read the first H200 smoke run (studies/recorded/h200-smoke): their
measurements were taken on an H200 earlier. The recovery test fits to model-generated data
(labelled synthetic), where the right answer is known.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cutsearch import calibration, model
from cutsearch.calibration import fit, load_coefficients, rank_correlation
from cutsearch.cli import app
from cutsearch.efficiency import Recording
from cutsearch.errors import UserError
from cutsearch.evaluator import ModelEvaluator
from cutsearch.outcome import Measurement
from cutsearch.problem import Layer
from cutsearch.space import Space

SMOKE = Path(__file__).resolve().parent.parent / "studies" / "recorded" / "h200-smoke"
SMOKE_FILES = sorted(SMOKE.glob("*.json"))


@pytest.fixture(scope="module")
def recorded() -> list[Recording]:
    return [Recording.load(p) for p in SMOKE_FILES]


def synthetic(layer: Layer, coeff: model.Coefficients, count: int = 12) -> Recording:
    """'Measurements' that are the model's own predictions under `coeff` (not a recording)."""
    configs = list(Space(layer))[::53][:count]
    evals = tuple(ModelEvaluator(coeff).evaluate(layer, configs))
    return Recording(layer=layer, evaluations=evals, meta={"synthetic": True}, path=Path(f"{layer.slug}.json"))


def test_rank_correlation_agrees_with_model_spearman_without_ties():
    xs, ys = [3.0, 1.0, 4.0, 1.5, 9.0], [2.0, 1.0, 5.0, 3.0, 8.0]
    assert rank_correlation(xs, ys) == pytest.approx(model.spearman(xs, ys))


def test_rank_correlation_gives_ties_their_average_rank():
    # Tied predictions carry no order: the figure must not depend on the order of the input.
    assert rank_correlation([1.0, 1.0, 2.0], [1.0, 2.0, 3.0]) == pytest.approx(math.sqrt(3) / 2)
    assert rank_correlation([1.0, 1.0, 2.0], [2.0, 1.0, 3.0]) == pytest.approx(math.sqrt(3) / 2)
    assert math.isnan(rank_correlation([1.0, 1.0], [1.0, 2.0]))


def test_points_are_the_recorded_measurements_only(recorded):
    pts = calibration.points(recorded)
    measured = sum(isinstance(e.outcome, Measurement) for r in recorded for e in r.evaluations)
    assert len(pts) == measured == 9
    assert all(p.measured_us > 0 for p in pts)


def test_two_runs_with_one_file_name_are_ranked_apart(recorded, tmp_path):
    """Runs of one layer in two directories share a file name; one Spearman over both mixed them."""
    again = tmp_path / "again" / recorded[0].path.name
    again.parent.mkdir()
    shutil.copy(recorded[0].path, again)
    score, _ = calibration.score(calibration.points([recorded[0], Recording.load(again)]), model.DEFAULT)
    assert len(score.spearman) == 2
    assert len(set(score.spearman.values())) == 1  # the same measurements, ranked alike


def test_fit_never_worsens_its_objective_on_recorded_data(recorded):
    for objective in calibration.OBJECTIVES:
        result = fit(recorded, objective=objective)
        assert calibration._loss(result.score_after, objective) <= calibration._loss(result.score_before, objective)
        assert len(result.table) == result.points == 9


def test_fit_stays_within_physical_bounds(recorded):
    after = fit(recorded).after
    for name, (lo, hi) in calibration.BOUNDS.items():
        assert lo <= getattr(after, name) <= hi


def test_fit_recovers_a_known_launch_cost_from_synthetic_data():
    truth = dataclasses.replace(model.DEFAULT, launch_us=model.DEFAULT.launch_us * 2)
    data = [synthetic(Layer(m=4096, n=5000, k=1024), truth), synthetic(Layer(m=256, n=1024, k=1024), truth)]
    result = fit(data)
    assert result.score_before.mean_abs_log > 0.01
    assert result.after.launch_us == pytest.approx(truth.launch_us)
    assert result.score_after.mean_abs_log == pytest.approx(0.0, abs=1e-9)


def test_fit_leaves_the_model_default_alone(recorded):
    before = dataclasses.asdict(model.DEFAULT)
    fit(recorded)
    assert dataclasses.asdict(model.DEFAULT) == before


def test_fitted_constants_load_back_from_the_json(recorded, tmp_path):
    result = fit(recorded)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(result.to_dict(recordings=recorded)))
    assert load_coefficients(path) == result.after


def test_fit_needs_two_measurements():
    one = Recording.load(SMOKE / "fc-3000x1001x999-bf16-bias-gelu.json")
    with pytest.raises(UserError, match="at least 2"):
        fit([one])


def test_calibrate_command_reports_and_writes_without_applying(tmp_path):
    out = tmp_path / "model-calibration.json"
    result = CliRunner().invoke(app, ["calibrate", *map(str, SMOKE_FILES), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "model.DEFAULT is unchanged" in result.output
    data = json.loads(out.read_text())
    assert data["recorded"] is True and data["points"] == 9
    assert set(data["score_before"]) >= {"median_abs_log", "spearman"}
    assert data["coefficients_before"] == json.loads(json.dumps(dataclasses.asdict(model.DEFAULT)))


# --------------------------------------------------------------------------- second opinion (optional)

def test_second_opinion_is_optional(monkeypatch):
    from cutsearch import heuristics

    monkeypatch.setitem(sys.modules, "nvMatmulHeuristics", None)  # as if it were not installed
    heuristics._module.cache_clear()
    try:
        assert heuristics.available() is False
        with pytest.raises(heuristics.HeuristicsUnavailable, match="pip install nvidia-matmul-heuristics"):
            heuristics.Heuristics()
    finally:
        heuristics._module.cache_clear()


def test_second_opinion_ranks_recorded_configs_without_a_gpu(recorded):
    pytest.importorskip("nvMatmulHeuristics")
    from cutsearch.heuristics import Heuristics, compare

    heur = Heuristics()
    try:
        results = compare(recorded, heur)
        layer = Layer(m=4096, n=5000, k=1024)
        suggested = heur.suggest(layer, 4)
    finally:
        heur.close()
    by_name = {c.recording: c for c in results}
    big = by_name["fc-4096x5000x1024-f16"]
    assert big.measured == big.rated == 4
    assert all(r["heuristics_us"] > 0 for r in big.rows)
    assert -1.0 <= big.heuristics_vs_measured <= 1.0
    assert suggested and all(c.tile_m in (64, 128, 256) for c in suggested)
