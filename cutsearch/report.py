"""A study as one self-contained HTML file, to see a search rather than read its journal.

`digest` reads a study once into what both views need: this report and `cutsearch show`
(console.print_study). The figures are plotly, with plotly.js inlined, so the file opens
offline and can be mailed or attached to an issue.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import datetime
import html
import math
import statistics
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from cutsearch import persist
from cutsearch.errors import UserError
from cutsearch.problem import PEAK_BYTES_PER_S, PEAK_FLOPS, Layer, floor_note, replayed_from
from cutsearch.verdict import TrialRecord, Verdict, cublas_runs, judge
from cutsearch.space import Config, unserved_line
from cutsearch.storage import load_study

CUBLAS = "cuBLAS (F.linear)"
EXAMPLES_PER_KIND = 3
LOG_HEAD_LINES, LOG_TAIL_LINES, LOG_LINE_CHARS = 25, 15, 300  # compiler logs: first error and the end
REJECTED_SHOWN = 10
NOTHING = "No completed trial yet."


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailedTrial:
    number: int
    kind: str
    message: str
    log: str
    config: str  # the config key, or "-" for a trial that never got one


@dataclasses.dataclass(frozen=True, kw_only=True)
class Digest:
    """One study, read once: what `cutsearch show` prints and the report draws."""

    study: str
    layer: Layer
    measured: tuple[TrialRecord, ...]  # completed trials, in trial order
    failed: tuple[FailedTrial, ...]    # evaluated trials that failed
    rejected: dict[str, int]           # proposals a space rule refused, by reason: not trials
    pending: int                       # asked, not yet told (waiting or running)
    builds: tuple[float, ...]          # compile seconds of kernels built for this study
    cached_builds: int
    sources: tuple[str, ...]           # "measured", "recorded", "predicted"
    race: dict | None = None           # the race that ended the last search (verdict.judge)
    gpu: str | None = None             # the GPU model its times were measured on (search.open_study)
    unserved: str | None = None        # why no config of the space can compute the layer (Space.unserved)

    @property
    def trials(self) -> int:
        return len(self.measured) + len(self.failed)

    @functools.cached_property
    def verdict(self) -> Verdict:
        return judge(list(self.measured), self.race)

    @property
    def best(self) -> TrialRecord | None:
        """The best kernel as judged: its times are the race's where one stands."""
        return self.verdict.best

    @property
    def cublas_runs(self) -> list[float]:
        """cuBLAS is timed next to every measured trial (a replayed trial repeats a timing)."""
        return cublas_runs(self.measured)

    @property
    def cublas_us(self) -> float | None:
        """The line to beat, as the search and the export judge it (verdict.judge)."""
        return self.verdict.cublas_us

    @property
    def cublas_basis(self) -> str:
        if self.verdict.raced_us is not None:
            return self.verdict.basis
        why = f"; the race was disturbed: {self.verdict.disturbed}" if self.verdict.disturbed else ""
        return f"lower of the run beside the best and the median of {_plural(len(self.cublas_runs), 'run')}{why}"

    @property
    def speedup(self) -> float | None:
        best = self.best
        return self.cublas_us / best.median_us if best and self.cublas_us else None

    @property
    def fraction_of_floor(self) -> float | None:
        best = self.best
        return self.layer.floor_us / best.median_us if best else None

    @property
    def failures(self) -> dict[str, int]:
        return dict(collections.Counter(f.kind for f in self.failed).most_common())

    def race_cell(self, number: int) -> str | None:
        """A trial's median in the race that stands, with the rounds it beat cuBLAS in ("-" if
        it did not race, "failed" if it failed its check there), or None where no race stands."""
        v = self.verdict
        if v.raced_us is None:
            return None
        if number in v.raced_us:
            return f"{v.raced_us[number]:.1f} ({v.rounds_won[number]}/{v.rounds})"
        return "failed" if number in self.race["trials"] else "-"

    def top(self, count: int) -> list[TrialRecord]:
        """The fastest trials, one per config (a replayed config is the same kernel)."""
        seen: set[str] = set()
        ranked = []
        for record in sorted(self.measured, key=lambda r: (r.median_us, r.number)):
            if record.config.key not in seen:
                seen.add(record.config.key)
                ranked.append(record)
        return ranked[:count]

    @property
    def note(self) -> str | None:
        if "predicted" in self.sources:
            return "times are model predictions, not measurements"
        if "recorded" in self.sources:
            return f"times are {replayed_from([self.gpu])}"
        return None


def digest(study: str, *, storage: str) -> Digest:
    return digest_of(load_study(study, storage))


def digest_of(study: optuna.Study) -> Digest:
    layer_attrs = study.user_attrs.get("layer")
    if layer_attrs is None:
        raise UserError(f"study {study.study_name!r} was not made by cutsearch: it records no layer")
    measured, failed = [], []
    rejected: collections.Counter[str] = collections.Counter()
    pending = cached = 0
    builds, sources = [], set()
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        if not trial.state.is_finished():
            pending += 1
            continue
        failure = attrs.get("failure") or (attrs.get("evaluation") or {}).get("failure")
        if attrs.get("rule_invalid"):
            rejected[(failure or {}).get("message", "rule")] += 1
            continue
        ev = attrs.get("evaluation")
        if ev is not None:
            sources.add(ev.get("source", "measured"))
            if ev.get("compile_s") is not None and not ev.get("replayed_from_study"):
                if ev.get("cached"):
                    cached += 1
                else:
                    builds.append(float(ev["compile_s"]))
        if trial.state == TrialState.COMPLETE:
            record = TrialRecord.from_trial(trial)
            if record is not None and record.median_us is not None:  # else not told by cutsearch
                measured.append(record)
        elif trial.state == TrialState.FAIL:
            failure = failure or {"kind": "unknown", "message": "the trial failed without a recorded reason"}
            failed.append(FailedTrial(number=trial.number, kind=failure.get("kind", "unknown"),
                                      message=failure.get("message", ""), log=failure.get("log", ""),
                                      config=_config_key(trial)))
    return Digest(study=study.study_name, layer=Layer.from_dict(layer_attrs, name=study.study_name),
                  measured=tuple(measured), failed=tuple(failed), rejected=dict(rejected.most_common()),
                  pending=pending, builds=tuple(builds), cached_builds=cached, sources=tuple(sorted(sources)),
                  race=study.user_attrs.get("race"), gpu=study.user_attrs.get("gpu"),
                  unserved=study.user_attrs.get("unserved"))


def _config_key(trial: FrozenTrial) -> str:
    ev = trial.user_attrs.get("evaluation")
    if ev is not None:
        return Config.from_dict(ev["config"]).key
    return trial.user_attrs.get("config", "-")


def build_report(study: str, *, storage: str, out: Path) -> Path:
    """Write the study's report to `out`, one HTML file with everything inlined; returns it."""
    import plotly.offline

    loaded = load_study(study, storage)
    d = digest_of(loaded)
    sections = [
        ("Optimization history", _figure(_history(d), "history")),
        ("Top trials", _top_table(d)),
        ("Parameter importances", _importances(loaded)),
        ("Time by tile, schedule and transform", _figure(_by_parameter(d), "parameters")),
        ("Best kernel on the H200 roofline", _figure(_roofline(d), "roofline")),
        ("Compile times", _figure(_compile_times(d), "compile")),
        ("Failures", _failures(d)),
    ]
    body = "\n".join(f"<section><h2>{html.escape(title)}</h2>\n{content}</section>" for title, content in sections)
    page = _PAGE.format(title=html.escape(f"cutsearch: {d.study}"), plotly=plotly.offline.get_plotlyjs(),
                        header=_header(d), body=body,
                        generated=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    out = Path(out)
    try:
        persist.write_text(out, page)  # renamed into place: never half a report
    except OSError as exc:
        raise UserError(f"cannot write the report {out}: {exc.strerror or exc}") from None
    return out


# -- figures: each returns a plotly figure, or a sentence saying why there is none ---------------

def _figure(fig: Any, name: str) -> str:
    if isinstance(fig, str):
        return f'<p class="empty">{html.escape(fig)}</p>'
    fig.update_layout(template="plotly_white", margin=dict(l=60, r=30, t=40, b=50), height=fig.layout.height or 420)
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{name}",
                       config={"displaylogo": False, "responsive": True})


def _hover(r: TrialRecord) -> str:
    speed = f"<br>{r.speedup:.2f}x cuBLAS" if r.speedup else ""
    return f"trial {r.number}<br>{r.config.key}<br>{r.median_us:.1f} µs{speed}"


def _history(d: Digest) -> Any:
    import plotly.graph_objects as go

    if not d.measured:
        return NOTHING
    # The budget's axis: refused proposals take trial numbers but cost nothing, so skip them.
    order = {n: i for i, n in enumerate(sorted([r.number for r in d.measured] + [f.number for f in d.failed]), 1)}
    xs = [order[r.number] for r in d.measured]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[r.median_us for r in d.measured], mode="markers", name="trial",
                             hovertext=[_hover(r) for r in d.measured], hoverinfo="text",
                             marker=dict(size=8, color="#4c78a8", opacity=0.75)))
    best, running = [], float("inf")
    for r in d.measured:
        running = min(running, r.median_us)
        best.append(running)
    fig.add_trace(go.Scatter(x=xs, y=best, mode="lines", line_shape="hv", name="best so far",
                             line=dict(color="#e45756", width=2.5)))
    span = [min(xs), max(xs)] if len(xs) > 1 else [xs[0] - 0.5, xs[0] + 0.5]
    if d.cublas_us:
        fig.add_trace(go.Scatter(x=span, y=[d.cublas_us] * 2, mode="lines", name=CUBLAS,
                                 hovertext=f"{CUBLAS}: {d.cublas_us:.1f} µs, {d.cublas_basis}", hoverinfo="text",
                                 line=dict(color="#54a24b", dash="dash", width=2)))
    fig.add_trace(go.Scatter(x=span, y=[d.layer.floor_us] * 2, mode="lines", name="roofline floor",
                             hovertext=f"roofline floor {d.layer.floor_us:.1f} µs", hoverinfo="text",
                             line=dict(color="#9d9d9d", dash="dot")))
    fig.update_layout(xaxis_title="evaluated trial (failures included, refused proposals not)",
                      yaxis_title="time (µs), lower is better", yaxis_rangemode="tozero")
    if max(xs) - min(xs) <= 12:
        fig.update_xaxes(dtick=1)
    return fig


def _importances(study: optuna.Study) -> str:
    import plotly.graph_objects as go

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    # A parameter that never varied among completed trials says nothing about its effect; one
    # that some trials lack (a study resumed under a changed space) cannot be compared.
    values: dict[str, set[str]] = collections.defaultdict(set)
    for t in complete:
        for name, value in t.params.items():
            values[name].add(repr(value))
    varied = sorted(name for name, seen in values.items()
                    if len(seen) > 1 and all(name in t.params for t in complete))
    if len(complete) < 2 or not varied:
        return _figure(f"Too few completed trials to rank parameters ({len(complete)} completed"
                       f"{', none of whose parameters differ' if len(complete) >= 2 else ''}).", "importances")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PED-ANOVA warns on small studies; the caption says so
            scores = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), params=varied)
    except Exception as exc:  # noqa: BLE001 - one optional view must not cost the whole report
        return _figure(f"Parameter importances are unavailable: {exc}", "importances")
    names = sorted(scores, key=scores.get)
    fig = go.Figure(go.Bar(x=[scores[n] for n in names], y=names, orientation="h", marker_color="#4c78a8"))
    fig.update_layout(xaxis_title="importance (PED-ANOVA, share)", height=max(260, 40 * len(names) + 120))
    fig.update_yaxes(automargin=True)
    caption = (f"<p class=\"caption\">From {len(complete)} completed trials; parameters that never varied are "
               "left out. With few trials this ranking is a hint, not a finding.</p>")
    return _figure(fig, "importances") + caption


def _transform(c: Config) -> str:
    parts = [name for name, on in (("swap A/B", c.swap_ab), ("pad", c.pad)) if on]
    return " + ".join(parts) or "none"


def _by_parameter(d: Digest) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not d.measured:
        return NOTHING
    # (title, label of a config, sort key of a label); the tile gets a whole row: up to 45 values.
    groups = [
        ("CTA tile (M x N x K)", lambda c: f"{c.tile_m}x{c.tile_n}x{c.tile_k}",
         lambda label: tuple(int(v) for v in label.split("x"))),
        ("schedule (kernel / epilogue / tile scheduler)",
         lambda c: f"{c.kernel_schedule}/{c.epilogue_schedule}/{c.tile_scheduler}", str),
        ("transform", _transform, lambda label: (label != "none", label)),
    ]
    fig = make_subplots(rows=2, cols=2, specs=[[{"colspan": 2}, None], [{}, {}]], vertical_spacing=0.2,
                        horizontal_spacing=0.06, subplot_titles=[title for title, _, _ in groups])
    for (title, label, key), (row, col) in zip(groups, [(1, 1), (2, 1), (2, 2)]):
        labels = [label(r.config) for r in d.measured]
        fig.add_trace(go.Box(x=labels, y=[r.median_us for r in d.measured], boxpoints="all", jitter=0.4, pointpos=0,
                             name=title, showlegend=False, hovertext=[_hover(r) for r in d.measured],
                             hoverinfo="text", marker=dict(color="#4c78a8", size=6), line=dict(color="#4c78a8")),
                      row=row, col=col)
        fig.update_xaxes(categoryorder="array", categoryarray=sorted(set(labels), key=key), tickangle=-30,
                         row=row, col=col)
        fig.update_yaxes(title_text="time (µs)" if col == 1 else None, rangemode="tozero", row=row, col=col)
    fig.update_annotations(font_size=12)
    if d.cublas_us:
        fig.add_hline(y=d.cublas_us, line=dict(color="#54a24b", dash="dash"), row="all", col="all",
                      annotation_text="cuBLAS", annotation_position="top left", annotation_font_color="#54a24b")
    fig.update_layout(height=760)
    return fig


def _roofline(d: Digest) -> Any:
    import plotly.graph_objects as go

    if d.best is None:
        return NOTHING
    layer = d.layer
    intensity = layer.flops / layer.bytes  # FLOP per byte of x, W, b and y moved once
    ridge = PEAK_FLOPS / PEAK_BYTES_PER_S
    lo, hi = min(intensity, ridge) / 8, max(intensity, ridge) * 8
    xs = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    fig = go.Figure()
    peaks = f"{PEAK_FLOPS / 1e12:.0f} TFLOP/s, {PEAK_BYTES_PER_S / 1e12:.1f} TB/s"
    fig.add_trace(go.Scatter(x=xs, y=[min(PEAK_FLOPS, x * PEAK_BYTES_PER_S) / 1e12 for x in xs], mode="lines",
                             name=f"H200 roofline ({peaks})", line=dict(color="#333333", width=2)))

    def tflops(us: float) -> float:
        return layer.flops / (us * 1e-6) / 1e12

    best = d.best
    others = [r for r in d.measured if best is None or r.number != best.number]
    if others:
        fig.add_trace(go.Scatter(x=[intensity] * len(others), y=[tflops(r.median_us) for r in others],
                                 mode="markers", name="other trials", hovertext=[_hover(r) for r in others],
                                 hoverinfo="text", marker=dict(color="#bab0ac", size=7)))
    if d.cublas_us:
        fig.add_trace(go.Scatter(x=[intensity], y=[tflops(d.cublas_us)], mode="markers", name=CUBLAS,
                                 hovertext=f"{CUBLAS}: {d.cublas_us:.1f} µs, {tflops(d.cublas_us):.0f} TFLOP/s",
                                 hoverinfo="text", marker=dict(color="#54a24b", size=13, symbol="diamond")))
    share = d.fraction_of_floor or 0.0
    fig.add_trace(go.Scatter(x=[intensity], y=[tflops(best.median_us)], mode="markers+text", name="best kernel",
                             text=[f"  best: {tflops(best.median_us):.0f} TFLOP/s, {100 * share:.0f}% of the roofline"],
                             textposition="middle right", hovertext=_hover(best), hoverinfo="text",
                             marker=dict(color="#e45756", size=14, symbol="star")))
    # A trace, not add_vline: on log axes plotly places a vline's annotation at 10**x.
    floor_tflops = min(PEAK_FLOPS, lo * PEAK_BYTES_PER_S) / 1e12
    fig.add_trace(go.Scatter(x=[ridge, ridge], y=[floor_tflops, PEAK_FLOPS / 1e12], mode="lines",
                             name=f"ridge point, {ridge:.0f} FLOP/byte", line=dict(color="#9d9d9d", dash="dot")))
    ticks = [m * 10.0 ** e for e in range(-3, 7) for m in (1, 2, 5)]  # 1-2-5 reads better than log minors
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks],
                     title_text=f"arithmetic intensity, FLOP/byte (this layer: {intensity:.0f})")
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks], title_text="TFLOP/s")
    fig.update_layout(height=460)
    return fig


def _compile_times(d: Digest) -> Any:
    import plotly.graph_objects as go

    if not d.builds:
        cached = f" ({d.cached_builds} came from the kernel cache)" if d.cached_builds else ""
        return f"No kernel was compiled for this study{cached}."
    size = max(1.0, math.ceil(max(d.builds) / 30))  # about 30 bins from zero, however few builds
    fig = go.Figure(go.Histogram(x=list(d.builds), xbins=dict(start=0, size=size), marker_color="#72b7b2",
                                 name="builds"))
    cached = f", {d.cached_builds} more from the cache" if d.cached_builds else ""
    count = _plural(len(d.builds), "build")
    fig.update_layout(xaxis_title="compile time (s)", yaxis_title="kernels", height=340, bargap=0.05,
                      title=dict(text=f"{count}, median {statistics.median(d.builds):.0f} s, "
                                      f"total {sum(d.builds) / 60:.1f} min of nvcc{cached}", font_size=13))
    fig.update_xaxes(range=[0, (math.floor(max(d.builds) / size) + 2) * size])
    return fig


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# -- tables --------------------------------------------------------------------------------------

def _header(d: Digest) -> str:
    layer = d.layer
    epilogue = (" + bias" if layer.bias else "") + ("" if layer.activation == "none" else f", {layer.activation}")
    best = d.best
    rows = [("layer", f"y = x @ W^T{epilogue}: M={layer.m}, N={layer.n}, K={layer.k}, {layer.dtype}")]
    if best is not None:
        rows += [("best kernel", f"{best.median_us:.1f} µs (trial {best.number}, {best.config.key})")]
    speedup = "-"
    if d.speedup:
        speedup = f"{d.speedup:.2f}x" + (" (cuBLAS is faster)" if d.speedup < 1 else
                                         f" (in {d.verdict.rounds_won[d.best.number]} of {d.verdict.rounds} "
                                         "rounds: a tie, the export calls cuBLAS)" if d.verdict.tie else "")
    rows += [
        (CUBLAS, f"{d.cublas_us:.1f} µs ({d.cublas_basis})" if d.cublas_us else "-"),
        ("speedup", speedup),
        *([("cuBLASLt, ReLU fused", f"{d.verdict.fallback_us:.1f} µs in the race (the fallback's library)"
            + ("; the export ships it" if d.verdict.fallback_wins else ""))] if d.verdict.fallback_us else []),
        ("roofline floor", ", ".join([f"{layer.floor_us:.1f} µs",
                                      *([f"{100 * d.fraction_of_floor:.0f}% reached"] if d.fraction_of_floor else []),
                                      *([note] if (note := floor_note(d.gpu)) else [])])),
        *([("measured on", d.gpu)] if d.gpu else []),
        ("trials", f"{d.trials} ({len(d.measured)} completed, {len(d.failed)} failed"
                   + (f", {d.pending} pending" if d.pending else "") + ")"),
        ("failures", ", ".join(f"{k} {v}" for k, v in d.failures.items()) or "none"),
        ("rejected proposals", f"{sum(d.rejected.values())} (refused by space rules, not counted as trials)"),
    ]
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    notice = ""
    if best is None:
        why = (d.verdict.basis if d.measured else unserved_line(d.unserved) if d.unserved
               else "nothing was measured yet")
        notice += f'<p class="notice">No kernel to ship in {html.escape(d.study)}: {html.escape(why)}.</p>'
    if d.note:
        notice += f'<p class="note">Note: {html.escape(d.note)}.</p>'
    return f'<table class="summary">{cells}</table>{notice}'


def _top_table(d: Digest, count: int = 10) -> str:
    if not d.measured:
        return f'<p class="empty">{NOTHING}</p>'
    raced = d.verdict.raced_us is not None
    head = "".join(f"<th>{h}</th>" for h in ("trial", "median µs", "p20-p80 µs", "cuBLAS beside µs", "speedup",
                                              *(["race µs"] if raced else []), "config", "compile s"))
    rows = []
    for r in d.top(count):
        t = r.evaluation["measurement"]["timing"]
        compile_s = r.evaluation.get("compile_s")
        cells = (str(r.number), f"{r.median_us:.1f}", f"{t['p20_us']:.1f}-{t['p80_us']:.1f}",
                 f"{r.cublas_us:.1f}" if r.cublas_us else "-", f"{r.speedup:.2f}x" if r.speedup else "-",
                 *([d.race_cell(r.number)] if raced else []), r.config.key,
                 f"{compile_s:.0f}" if compile_s is not None else "-")
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f'<table class="grid"><tr>{head}</tr>{"".join(rows)}</table>'


def trim_log(log: str) -> str:
    """The head (where nvcc puts the first error) and the tail of a log, lines capped."""
    lines = [line if len(line) <= LOG_LINE_CHARS else line[:LOG_LINE_CHARS] + " …" for line in log.splitlines()]
    if len(lines) > LOG_HEAD_LINES + LOG_TAIL_LINES:
        skipped = len(lines) - LOG_HEAD_LINES - LOG_TAIL_LINES
        lines = lines[:LOG_HEAD_LINES] + [f"… {skipped} lines left out …"] + lines[-LOG_TAIL_LINES:]
    return "\n".join(lines)


def _failures(d: Digest) -> str:
    parts = []
    if not d.failed:
        parts.append('<p class="empty">No evaluated trial failed.</p>')
    else:
        rows = "".join(f"<tr><td>{html.escape(kind)}</td><td>{count}</td></tr>" for kind, count in d.failures.items())
        parts.append(f'<table class="grid"><tr><th>kind</th><th>trials</th></tr>{rows}</table>')
        for kind in d.failures:
            examples = [f for f in d.failed if f.kind == kind][:EXAMPLES_PER_KIND]
            items = []
            for f in examples:
                log = (f"<details><summary>log</summary><pre>{html.escape(trim_log(f.log))}</pre></details>"
                       if f.log.strip() else "")
                items.append(f"<li><b>trial {f.number}</b> <code>{html.escape(f.config)}</code>: "
                             f"{html.escape(f.message)}{log}</li>")
            parts.append(f"<h3>{html.escape(kind)}</h3><ul class=\"examples\">{''.join(items)}</ul>")
    if d.rejected:
        rows = "".join(f"<tr><td>{html.escape(reason)}</td><td>{count}</td></tr>"
                       for reason, count in list(d.rejected.items())[:REJECTED_SHOWN])
        parts.append("<h3>Proposals refused by space rules (not trials)</h3>"
                     f'<table class="grid"><tr><th>reason</th><th>proposals</th></tr>{rows}</table>')
    return "\n".join(parts)


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }}
h1 {{ margin-bottom: 0.3em; }}
section {{ margin-top: 2.2em; }}
table {{ border-collapse: collapse; }}
table.summary th {{ text-align: left; padding: 0.2em 1.2em 0.2em 0; }}
table.grid th, table.grid td {{ border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; }}
table.grid th {{ background: #f4f4f4; }}
.notice {{ font-size: 1.2em; color: #b03a2e; font-weight: bold; }}
.note {{ color: #8a6d00; }}
.empty, .caption {{ color: #666; font-style: italic; }}
pre {{ background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }}
footer {{ margin-top: 3em; color: #888; font-size: 0.85em; }}
</style>
<script type="text/javascript">{plotly}</script>
</head>
<body>
<h1>{title}</h1>
{header}
{body}
<footer>Written by cutsearch at {generated}.</footer>
</body>
</html>
"""
