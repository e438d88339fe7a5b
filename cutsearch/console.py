"""Terminal views: live progress of a search, and the one-screen summary."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cutsearch.problem import Layer, floor_note
from cutsearch.space import GEMV_WARPS, Config, kernel_problem, unserved_line

if TYPE_CHECKING:  # report imports optuna: only `show` needs it, so it is imported there
    from cutsearch.report import Digest


class ProgressView:
    """Renders search events: compiled / measured / best so far."""

    def __init__(self, console: Console, *, trials: int) -> None:
        self.console = console
        self.trials = trials
        self.compiled = self.cached = self.measured = self.failed = 0
        self.best_us: float | None = None
        self.cublas_us: float | None = None
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[status]}"),
                                 console=console, transient=False)
        self.task = None
        # Into a file, rich draws the bar once, at the end: a log gets a line per batch and trial instead.
        self.lines = not console.is_terminal

    def __enter__(self) -> ProgressView:
        self.progress.__enter__()
        self.task = self.progress.add_task("trials", total=self.trials, status="starting")
        return self

    def __exit__(self, *exc: object) -> None:
        from cutsearch.errors import UserError

        if isinstance(exc[1], UserError):  # the error's one line is all there is to read: no bar
            self.progress.live.transient = True
            self.progress.live.stop()
            return
        self.progress.__exit__(*exc)

    def _status(self) -> str:
        best = f"best {self.best_us:.1f} µs" if self.best_us else "best -"
        if self.best_us and self.cublas_us:
            best += f" (cuBLAS {self.cublas_us:.1f} µs, {self.cublas_us / self.best_us:.2f}x)"
        return (f"compiled {self.compiled} (+{self.cached} cached) · measured {self.measured} · "
                f"failed {self.failed} · {best}")

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def event(self, name: str, data: dict[str, Any]) -> None:
        if name == "batch":
            self.progress.update(self.task, completed=data["done"])
            if self.lines:
                self._line(f"batch of {data['size']}: {data['done']} of {data['total']} trials done")
        elif name == "compiling":
            if self.lines:  # the first trial's line may be minutes away
                self._line(f"{data['count']} kernel(s) to build or take from the cache")
        elif name == "compiled":
            if data.get("cached"):
                self.cached += 1
            else:
                self.compiled += 1
        elif name == "measured":
            self.measured += 1
        elif name == "best":
            self.best_us, self.cublas_us = data["median_us"], data.get("cublas_us")
        elif name == "trial":
            self.failed += data.get("failure") is not None
            self.progress.advance(self.task)
            if self.lines:
                median = data.get("median_us")
                what = (f"failed ({data['failure']})" if data.get("failure") else
                        f"{median:.2f} µs" if median is not None else "no time")
                again = ", as measured before" if data.get("replayed") else ""
                self._line(f"trial {data['number']} {data['config']}: {what}{again}; {self._status()}")
        elif name == "reaped":
            told = [f"reaped {len(data['trials'])} trial(s) left RUNNING by a killed run"] if data["trials"] else []
            if data.get("requeued"):
                told.append(f"{len(data['requeued'])} config(s) an interrupted run left unfinished queued again")
            self._line("; ".join(told))
        elif name == "timeout":
            # Checked between batches: a batch already building is finished, so a run can pass its limit.
            self.console.print(f"time limit of {data['limit_s']:g} s passed (now {data['elapsed_s']:.0f} s): "
                               "no new batch")
        elif name == "unserved":
            self.console.print(f"[yellow]{unserved_line(data['reason'])}[/]")
        elif name == "exhausted":
            self.console.print("the sampler proposes only configs already tried: the space is exhausted")
        elif name == "racing":
            self.console.print(f"racing the {data['kernels']} fastest kernel(s) and cuBLAS again, "
                               f"{data['rounds']} interleaved rounds")
        elif name == "raced":
            self.best_us, self.cublas_us = data["median_us"], data["cublas_us"]
            for error in data.get("errors") or ():
                self.console.print(f"[yellow]a contender failed its check in the race: {error}[/]")
        elif name == "race disturbed":
            then = "racing again" if data["again"] else "judging by the trials"
            self.console.print(f"[yellow]the race was disturbed ({data['reason']}): {then}[/]")
        elif name == "race failed":
            self.console.print(f"[yellow]the race failed ({data['message']}): judging by the trials[/]")
        self.progress.update(self.task, status=self._status())


def _split_k_x_pitch(s: dict[str, Any]) -> int | None:
    """The best kernel's row pitch of x where split-K padded K past the pitch that `--input
    padded` gives x: its padded figures then hold for x at that pitch only."""
    best = s.get("best") or {}
    if not best.get("io_variants_us") or not best["config"].get("split_k"):
        return None
    layer = Layer.from_dict(s["layer"])
    pad_k = kernel_problem(layer, Config.from_dict(best["config"])).pad_k
    return pad_k if pad_k != dataclasses.replace(layer, input="padded").x_pitch else None


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} µs"


def print_summary(console: Console, s: dict[str, Any], result: Any = None) -> None:
    layer = s["layer"]
    act = "" if layer["activation"] == "none" else " " + layer["activation"]
    io = "".join(f" {k} {layer[k]}" for k in ("input", "output") if k in layer)
    title = (f"{s['study']}: {layer['M']}x{layer['N']}x{layer['K']} {layer['dtype']}"
             f"{' +bias' if layer['bias'] else ''}{act}{io}")
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("best kernel", _us(s["best_us"]))
    table.add_row("cuBLAS (F.linear)", _us(s["cublas_us"]))
    table.add_row("speedup", "-" if s["speedup"] is None else f"{s['speedup']:.2f}x")
    if s.get("fallback_us"):
        table.add_row("cuBLASLt, ReLU fused", f"{_us(s['fallback_us'])}" + (
            f" ({s['cublas_us'] / s['fallback_us']:.2f}x; the export's fallback library)" if s.get("cublas_us") else ""))
    if s.get("verdict"):
        table.add_row("judged by", s["verdict"])
    if s.get("ships"):
        table.add_row("the export ships", s["ships"])
    # The same kernel with the caller's buffers already padded: what the per-call copies cost.
    pitch = _split_k_x_pitch(s)
    for name, us in ((s.get("best") or {}).get("io_variants_us") or {}).items():
        table.add_row(f"  with {name}" if name != "kernel only" else "  with x and y padded",
                      _us(us) + (f" ({s['cublas_us'] / us:.2f}x)" if s.get("cublas_us") else "")
                      + (f"; x at split-K's pitch of {pitch}, not --input padded's" if pitch else ""))
    notes = [f"{100 * s['fraction_of_floor']:.0f}% reached"] if s["fraction_of_floor"] else []
    notes += [note] if (note := floor_note(s.get("gpu"))) else []
    table.add_row("roofline floor", f"{s['floor_us']:.1f} µs" + (f" ({'; '.join(notes)})" if notes else ""))
    if s.get("floor_with_launch_us"):
        # No call beats an empty kernel plus its bytes at peak: the most any kernel could gain.
        bound = f"; at most {s['cublas_us'] / s['floor_with_launch_us']:.2f}x" if s.get("cublas_us") else ""
        table.add_row("floor + empty kernel", f"{_us(s['floor_with_launch_us'])} "
                      f"(empty kernel {s['empty_kernel_us']:.1f} µs{bound})")
    table.add_row("trials", f"{s['trials']} ({s['new_trials']} new, {s['new_compiles']} compiled in this run)")
    failures = ", ".join(f"{k} {v}" for k, v in sorted(s["failures"].items())) or "none"
    table.add_row("failures", failures)
    if s["best"]:
        table.add_row("config", _config_line(s["best"]["config"], s["best"]["knobs"]))
    table.add_row("wall time", f"{s['wall_s']:.0f} s")
    if s.get("gpu"):
        table.add_row("GPU", s["gpu"])
    console.print(table)
    if s.get("note"):
        console.print(f"[yellow]{s['note']}[/]")
    if s.get("unserved"):
        console.print(f"[yellow]{unserved_line(s['unserved'])}[/]")
    elif s.get("ships") == "the fallback's fused cuBLASLt":
        console.print("[yellow]cuBLASLt with the ReLU fused won the race: an export will call the fallback's "
                      "library[/]")
    elif s.get("tie"):
        console.print(f"[yellow]the best kernel ran at {s['tie']} with cuBLAS: an export will call cuBLAS[/]")
    elif s["cublas_wins"]:
        console.print("[yellow]cuBLAS is faster for this layer: an export will call cuBLAS instead[/]")


def _config_line(c: dict[str, Any], knobs: dict[str, Any]) -> str:
    if c["kernel_schedule"] == "gemv":
        rows = "1 row" if c["tile_m"] == 1 else f"{c['tile_m']} rows"
        splits = knobs.get("splits", 1)
        shared = f", each row's K shared by {splits} warps" if splits > 1 else ""
        return (f"gemv kernel on CUDA cores: {rows} of x, {c['tile_n'] // splits} of W a block "
                f"({c['tile_n'] // GEMV_WARPS} a warp{shared}), K in steps of {c['tile_k']}")
    line = (f"CTA {c['tile_m']}x{c['tile_n']}x{c['tile_k']}, cluster {c['cluster_m']}x{c['cluster_n']}, "
            f"{c['kernel_schedule']}/{c['epilogue_schedule']}, stages {c['stages'] or 'auto'}, {c['tile_scheduler']}")
    if c["swap_ab"]:
        line += ", A/B swapped"
    if c["pad"]:
        line += ", x read in place through row views" if knobs.get("views") else ", padded"
    if c.get("split_k"):
        line += f", split-K in {knobs.get('splits', 2)} slices"
    if c["tile_scheduler"] == "grid":
        line += "; a CTA per tile and slice" if c.get("split_k") else "; a CTA per tile"  # nothing to raster
    else:
        raster = {0: "heuristic", 1: "along M", 2: "along N"}[knobs.get("raster", 0)]
        line += f"; raster {raster}, swizzle {knobs.get('swizzle', 1)}"
    if knobs.get("splits", 1) > 1 and not c.get("split_k"):
        line += f", splits {knobs['splits']}"
    if knobs.get("pdl"):
        line += ", overlapped launches"
    if knobs.get("prefetch"):
        line += ", W prefetched during the copy"
    if knobs.get("own_copy"):
        line += ", x copied by the GEMM itself, W prefetched meanwhile"
    return line


def print_study(console: Console, study: str, *, storage: str, top: int = 10) -> None:
    """`cutsearch show`: the fastest trials, and the best kernel against cuBLAS."""
    from cutsearch.errors import UserError
    from cutsearch.report import digest

    d = digest(study, storage=storage)
    if d.trials == 0 and d.unserved:
        console.print(f"[yellow]{study}: {unserved_line(d.unserved)}[/]")
        return
    if d.trials == 0:
        pending = f" ({d.pending} pending)" if d.pending else ""
        raise UserError(f"study {study!r} has no finished trial yet{pending}: nothing to show")
    layer = d.layer
    title = (f"{study}: {layer.m}x{layer.n}x{layer.k} {layer.dtype}"
             f"{' +bias' if layer.bias else ''}{'' if layer.activation == 'none' else ' ' + layer.activation}")
    if d.measured:
        console.print(_trials_table(d, title, top))
    console.print(_summary_table(d, title))
    for line in _verdict_lines(d, study):
        console.print(f"[yellow]{line}[/]")


def _trials_table(d: Digest, title: str, top: int) -> Table:
    """The `top` fastest measured trials, with their race times where a race stands."""
    table = Table(title=f"{title}: top {min(top, len(d.top(top)))} of {len(d.measured)} completed trials",
                  title_justify="left")
    raced = d.verdict.raced_us is not None
    for name, justify in (("trial", "right"), ("median µs", "right"), ("p20-p80 µs", "right"),
                          ("cuBLAS beside µs", "right"), ("speedup", "right"),
                          *([("race µs", "right")] if raced else []), ("config", "left"), ("compile s", "right")):
        table.add_column(name, justify=justify)
    for r in d.top(top):
        t = r.evaluation["measurement"]["timing"]
        compile_s = r.evaluation.get("compile_s")
        table.add_row(str(r.number), f"{r.median_us:.1f}", f"{t['p20_us']:.1f}-{t['p80_us']:.1f}",
                      "-" if r.cublas_us is None else f"{r.cublas_us:.1f}",
                      "-" if r.speedup is None else f"{r.speedup:.2f}x",
                      *([d.race_cell(r.number)] if raced else []), _config_short(r.config),
                      "-" if compile_s is None else f"{compile_s:.0f}")
    return table


def _summary_table(d: Digest, title: str) -> Table:
    """The best kernel against cuBLAS and the floor, and what the study's trials came to."""
    best = d.best
    summary = Table(title=f"{title}: best kernel against cuBLAS", show_header=False, title_justify="left")
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("best kernel", "none" if best is None else
                    f"{_us(best.median_us)} (trial {best.number})")
    summary.add_row("cuBLAS (F.linear)", "-" if d.cublas_us is None else f"{_us(d.cublas_us)} ({d.cublas_basis})")
    summary.add_row("speedup", "-" if d.speedup is None else f"{d.speedup:.2f}x")
    if d.verdict.fallback_us:
        summary.add_row("cuBLASLt, ReLU fused", f"{_us(d.verdict.fallback_us)} in the race (the fallback's library)")
    summary.add_row("roofline floor", f"{d.layer.floor_us:.1f} µs" + (
        "" if d.fraction_of_floor is None else f" ({100 * d.fraction_of_floor:.0f}% reached)"))
    if d.gpu:
        summary.add_row("measured on", d.gpu)
    summary.add_row("trials", f"{d.trials} ({len(d.measured)} completed, {len(d.failed)} failed"
                    + (f", {d.pending} pending" if d.pending else "") + ")"
                    + (f"; {sum(d.rejected.values())} proposals refused by space rules" if d.rejected else ""))
    summary.add_row("failures", ", ".join(f"{k} {v}" for k, v in d.failures.items()) or "none")
    if best is not None:
        summary.add_row("config", _config_line(best.config.to_dict(), best.evaluation["measurement"]["knobs"]))
    return summary


def _verdict_lines(d: Digest, study: str) -> list[str]:
    """What an export of the study would ship, where that is not its best kernel, and the study's note."""
    lines = []
    if d.best is None:
        why = d.verdict.basis if d.measured else "every finished trial failed"
        lines.append(f"no kernel to ship in {study}: {why}")
    if d.note:
        lines.append(d.note)
    if d.verdict.fallback_wins:
        lines.append(f"cuBLASLt with the ReLU fused ({_us(d.verdict.fallback_us)}) won the race: "
                     "an export will call the fallback's library")
    elif d.verdict.tie:
        lines.append(f"the best kernel ran at {d.verdict.tie} with cuBLAS: an export will call cuBLAS")
    elif d.speedup is not None and d.speedup < 1:
        lines.append("cuBLAS is faster for this layer: an export will call cuBLAS instead")
    return lines


def _config_short(c: Any) -> str:
    """A config in one table cell: tile, cluster, schedules, then what differs from defaults."""
    line = (f"{c.tile_m}x{c.tile_n}x{c.tile_k} c{c.cluster_m}x{c.cluster_n} "
            f"{c.kernel_schedule}/{c.epilogue_schedule}/{c.tile_scheduler}")
    if c.stages:
        line += f" s{c.stages}"
    if c.swap_ab:
        line += " swap"
    if c.pad:
        line += " pad"
    return line
