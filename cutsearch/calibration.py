"""Fit the cost model's free constants to recorded H200 measurements.

The model only orders candidates (its warm start and the `model` sampler), so what matters is
how well it ranks measured kernels within one layer (Spearman) and, second, how far its
absolute numbers are (|log(predicted / measured)|). `fit` searches the constants one at a time
over a grid of multipliers and keeps what lowers the objective. It never changes
`model.DEFAULT`: it reports the fitted constants, and a person decides.

Every figure here compares predictions with recorded measurements; none is measured now.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import statistics
from typing import Any, Sequence

from cutsearch import model
from cutsearch.efficiency import Recording
from cutsearch.errors import UserError
from cutsearch.outcome import Measurement
from cutsearch.problem import Layer
from cutsearch.space import Config, Knobs, knob_grid

# The constants the fit may move, and the multipliers of each it tries per round.
FREE = ("launch_us", "tile_fill_us", "l2_feed_bytes_per_s", "dram_feed_bytes_per_s", "l2_total_bytes_per_s",
        "dram_total_bytes_per_s", "copy_overhead_us", "k_step_us")
MULTIPLIERS = (0.25, 0.5, 0.7, 0.85, 0.93, 1.0, 1.08, 1.18, 1.4, 2.0, 4.0)
BOUNDS = {  # physically sensible ranges: a fit on few points must not run off to absurd values
    "launch_us": (0.5, 20.0), "tile_fill_us": (0.0, 5.0),
    "l2_feed_bytes_per_s": (5e9, 1e12), "dram_feed_bytes_per_s": (2e9, 5e11),
    "copy_overhead_us": (0.2, 20.0), "k_step_us": (0.0, 1.0),
    "l2_total_bytes_per_s": (1e12, 1e14), "dram_total_bytes_per_s": (1e12, 2e13),
    "store_column_bytes_per_s": (1e11, 5e12), "store_row_bytes_per_s": (5e10, 5e12),
}
OBJECTIVES = ("log", "spearman")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Point:
    """One recorded measurement of one config on one layer."""

    recording: str
    layer: Layer
    config: Config
    measured_us: float


def points(recordings: Sequence[Recording]) -> list[Point]:
    out = []
    for rec in recordings:
        # Runs of one layer in different directories share a file name; each is ranked on its own.
        name = str(rec.path) if rec.path is not None else rec.name
        for ev in rec.evaluations:
            if isinstance(ev.outcome, Measurement) and ev.outcome.median_us > 0:
                out.append(Point(recording=name, layer=rec.layer, config=ev.config, measured_us=ev.outcome.median_us))
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Twins:
    """One split-K kernel at one slice count, recorded with its slices summed both ways in one run:
    by the fixup epilogue and by the reduction kernel, each at its fastest run-time variant."""

    recording: str
    layer: Layer
    fixup: tuple[Config, Knobs, float]
    reduction: tuple[Config, Knobs, float]

    @property
    def splits(self) -> int:
        return self.fixup[1].splits

    def measured_gap_us(self) -> float:
        """How much longer the fixup took: negative where it was faster."""
        return self.fixup[2] - self.reduction[2]

    def predicted_gap_us(self, coeff: model.Coefficients) -> float:
        return (model.predict_us(self.layer, *self.fixup[:2], coeff=coeff)
                - model.predict_us(self.layer, *self.reduction[:2], coeff=coeff))


def summation_twins(recordings: Sequence[Recording]) -> list[Twins]:
    """Every pair of split-K configs that differ only in how the slices are summed, at each slice
    count that both measured."""
    out = []
    for rec in recordings:
        fastest: dict[tuple[Config, int], tuple[Config, Knobs, float]] = {}
        for ev in rec.measured():
            if not ev.config.split_k:
                continue
            for knobs, us in ev.outcome.variants:
                key = (ev.config, knobs.splits)
                if key not in fastest or us < fastest[key][2]:
                    fastest[key] = (ev.config, knobs, us)
        for (config, splits), fixup in fastest.items():
            twin = (dataclasses.replace(config, epilogue_schedule="tma"), splits)
            if config.epilogue_schedule == "fixup" and twin in fastest:
                out.append(Twins(recording=rec.name, layer=rec.layer, fixup=fixup, reduction=fastest[twin]))
    return out


def predict(p: Point, coeff: model.Coefficients) -> float:
    return model.best_knobs(p.layer, p.config, knob_grid(p.config, p.layer), coeff)[1]


def rank_correlation(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rho with tied values given their average rank.

    The model ties many configs; `model.spearman` breaks ties by position, which makes its
    figure depend on the order of the input. Without ties the two agree.
    """
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for pos in range(i, j + 1):
                r[order[pos]] = (i + j) / 2
            i = j + 1
        return r

    if len(xs) != len(ys):
        raise ValueError("rank_correlation needs two sequences of one length")
    if len(xs) < 2:
        return float("nan")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx and sy else float("nan")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Score:
    median_abs_log: float
    mean_abs_log: float
    spearman: dict[str, float]   # per recording: the model ranks within one layer
    spearman_mean: float | None  # over recordings with at least 3 measurements

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def score(pts: Sequence[Point], coeff: model.Coefficients) -> tuple[Score, list[float]]:
    preds = [predict(p, coeff) for p in pts]
    errs = [abs(math.log(pr / p.measured_us)) for pr, p in zip(preds, pts)]
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(pts):
        groups.setdefault(p.recording, []).append(i)
    rho = {name: rank_correlation([preds[i] for i in idx], [pts[i].measured_us for i in idx])
           for name, idx in groups.items()}
    usable = [r for name, r in rho.items() if len(groups[name]) >= 3 and not math.isnan(r)]
    return Score(median_abs_log=statistics.median(errs), mean_abs_log=statistics.fmean(errs), spearman=rho,
                 spearman_mean=statistics.fmean(usable) if usable else None), preds


def top_share(pts: Sequence[Point], coeff: model.Coefficients, top: int = 4, tolerance: float = 0.02) -> float:
    """The share of recordings in which the model's `top` configs (of those measured) hold one
    within `tolerance` of the fastest measured: how often a small first batch would find it."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for p in pts:
        groups.setdefault(p.recording, []).append((predict(p, coeff), p.measured_us))
    hits = [min(us for _, us in sorted(g)[:top]) <= (1 + tolerance) * min(us for _, us in g) for g in groups.values()]
    return sum(hits) / len(hits) if hits else float("nan")


def _loss(s: Score, objective: str) -> tuple[float, ...]:
    if objective == "spearman":
        return (-(s.spearman_mean if s.spearman_mean is not None else 0.0), s.mean_abs_log)
    return (s.mean_abs_log, -(s.spearman_mean or 0.0))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fit:
    before: model.Coefficients
    after: model.Coefficients
    score_before: Score
    score_after: Score
    table: list[dict[str, Any]]
    objective: str
    points: int

    def to_dict(self, *, recordings: Sequence[Recording] = (), command: str | None = None) -> dict[str, Any]:
        return {
            "recorded": True,
            "note": ("model constants fitted to recorded H200 measurements; model.DEFAULT is unchanged. "
                     "Predictions are model outputs, measurements are replayed from the recordings."),
            "date": datetime.date.today().isoformat(),
            "command": command,
            "objective": self.objective,
            "points": self.points,
            "recordings": [{"recording": str(r.path) if r.path else r.name, "layer": r.layer.to_dict(),
                            "gpu": r.meta.get("gpu"), "recorded_on": r.meta.get("date")} for r in recordings],
            "coefficients_before": dataclasses.asdict(self.before),
            "coefficients_after": dataclasses.asdict(self.after),
            "score_before": self.score_before.to_dict(),
            "score_after": self.score_after.to_dict(),
            "table": self.table,
        }


def fit(recordings: Sequence[Recording], *, start: model.Coefficients = model.DEFAULT, objective: str = "log",
        rounds: int = 4, free: Sequence[str] = FREE) -> Fit:
    """Coordinate search over the free constants, from `start`, to lower the objective.

    objective "log": the mean |log(predicted / measured)| (ties broken by the rank correlation);
    "spearman": the mean within-layer rank correlation (ties broken by the log error).
    """
    if objective not in OBJECTIVES:
        raise UserError(f"unknown objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    unknown = [f for f in free if f not in BOUNDS]
    if unknown:
        raise UserError(f"cannot fit {', '.join(unknown)}: the free constants are {', '.join(FREE)}")
    pts = points(recordings)
    if len(pts) < 2:
        raise UserError(f"calibration needs at least 2 recorded measurements, the recordings hold {len(pts)}")
    best = start
    best_score, _ = score(pts, best)
    best_loss = _loss(best_score, objective)
    for _ in range(rounds):
        improved = False
        for name in free:
            lo, hi = BOUNDS[name]
            base = getattr(best, name)
            for mult in MULTIPLIERS:
                value = min(hi, max(lo, (base or hi / 100) * mult))  # a zero constant restarts from 1% of its range
                if value == base:
                    continue
                trial = dataclasses.replace(best, **{name: value})
                trial_score, _ = score(pts, trial)
                trial_loss = _loss(trial_score, objective)
                if trial_loss < best_loss:
                    best, best_score, best_loss, improved = trial, trial_score, trial_loss, True
        if not improved:
            break
    before_score, before_preds = score(pts, start)
    after_score, after_preds = score(pts, best)
    table = [{"recording": p.recording, "layer": p.layer.shape, "config": p.config.key, "measured_us": p.measured_us,
              "predicted_before_us": b, "predicted_after_us": a, "ratio_after": a / p.measured_us}
             for p, b, a in zip(pts, before_preds, after_preds)]
    return Fit(before=start, after=best, score_before=before_score, score_after=after_score, table=table,
               objective=objective, points=len(pts))


def load_coefficients(path) -> model.Coefficients:
    """Fitted constants from a calibration JSON, for `ModelEvaluator(coeff=...)` or `model.rank`."""
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"calibration file {path} does not exist") from None
    values = data.get("coefficients_after", data)
    fields = {f.name for f in dataclasses.fields(model.Coefficients)}
    kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in values.items() if k in fields}
    return model.Coefficients(**kwargs)
