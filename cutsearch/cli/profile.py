"""`cutsearch profile`, `plan` and `apply`: from a whole model to the layers worth a search, and back."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from cutsearch import persist
from cutsearch.cli.app import app, err, invocation, out
from cutsearch.errors import UserError

_MODEL = typer.Argument(..., help="MODULE:FACTORY or path/to/file.py:FACTORY; FACTORY() returns the torch.nn.Module.")
_INPUTS = typer.Option(None, "--input-shape", help="One positional input of the forward pass, sizes separated by "
                       "commas: 8,512,80. Repeat for several inputs; add :i64 (or :i32, :bool, :f32) for a non-"
                       "floating input, e.g. 8,512:i64 (integer inputs are zeros).")
_DTYPE = typer.Option("f16", help="f16 or bf16: the model and its floating inputs are cast to it.")
_NAME = typer.Option(None, help="Name for the files written (default: the model's module or file name).")
_GPU = typer.Option(0, help="GPU index to run on.")
_WARMUP = typer.Option(3, help="Forward passes before timing.")
_REPS = typer.Option(20, help="Timed forward passes; every figure is their median.")
_TOP = typer.Option(30, help="Rows of the table shown (the JSON file holds every layer).")
_STUDIES = typer.Option(None, "--studies-dir", envvar="CUTSEARCH_STUDIES", help="Where studies live.")


@app.command("profile")
def profile_cmd(
    model: str = _MODEL,
    input_shape: Optional[list[str]] = _INPUTS,
    dtype: str = _DTYPE,
    out_path: Optional[Path] = typer.Option(None, "--out",
                                            help="JSON file to write (default: studies/<name>-profile.json)."),
    baseline: Optional[Path] = typer.Option(None, help="An earlier profile to compare the forward pass with, e.g. of "
                                            "the model before its Linear layers were replaced."),
    name: Optional[str] = _NAME,
    gpu: int = _GPU,
    warmup: int = _WARMUP,
    reps: int = _REPS,
    top: int = _TOP,
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """Time every nn.Linear call of a model's forward pass on the GPU, ranked by what a faster kernel could gain."""
    from cutsearch import plan, profiler

    specs, name, target = _setup(model, input_shape, dtype, name, out_path, studies_dir, "profile.json")
    before = plan.Profile.load(baseline) if baseline is not None else None
    net, inputs = profiler.place(profiler.build_model(model, gpu=gpu), specs, dtype=dtype, gpu=gpu)
    result = _stamp(profiler.profile(net, inputs, name=name, warmup=warmup, reps=reps), model, dtype)
    data = result.to_dict()
    comparison = None
    if before is not None:
        comparison = plan.compare(before, result)
        data["comparison"] = {"baseline": str(baseline), "baseline_date": before.info.get("date"),
                              "note": "the baseline was measured in another run", **comparison.to_dict()}
    _write(target, data)
    print_profile(out, result, top=top)
    if comparison is not None:
        if before.model != model or list(before.inputs) != list(result.inputs):
            err.print(f"[yellow]the baseline profiled {before.model or 'another model'} on {_inputs(before)}: "
                      "compare like with like[/]")
        print_comparison(out, comparison, note=f"baseline from {baseline}, measured in another run")
    out.print(f"wrote {target}")


@app.command("plan")
def plan_cmd(
    profile_path: Path = typer.Argument(..., metavar="PROFILE.json", help="A profile written by `cutsearch profile`."),
    threshold: float = typer.Option(0.01, help="Propose a shape only if a kernel at its roofline floor would save "
                                    "at least this fraction of the forward pass (0.01 = 1%), summed over the "
                                    "layers that share it."),
    out_path: Optional[Path] = typer.Option(None, "--out",
                                            help="Suite TOML to write (default: studies/<name>-suite.toml)."),
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """Propose which layer shapes to search, as a suite TOML file, and say why the others are left out."""
    from cutsearch import plan
    from cutsearch.workspace import Workspace

    prof = plan.Profile.load(profile_path)
    proposal = plan.plan(prof, threshold)
    target = out_path or Workspace(studies_dir).root / f"{Workspace.check_name(prof.name)}-suite.toml"
    print_plan(out, prof, proposal)
    if not proposal.targets:
        out.print(f"no shape can save {100 * threshold:g}% of the forward pass: nothing to search, no file written")
        return
    persist.write_text(target, plan.suite_toml(proposal, source=profile_path.name))
    out.print(f"wrote {target} ({len(proposal.targets)} shape(s)). Search each, export it, then apply:")
    for t in proposal.targets:
        s = t.shape
        out.print(f"  cutsearch search --m {s.m} --n {s.n} --k {s.k} --dtype {s.dtype}{' --bias' if s.bias else ''}"
                  f" && cutsearch export {t.slug}", highlight=False, soft_wrap=True)
    inputs = " ".join(f"--input-shape {_spec(i)}" for i in prof.inputs)
    out.print(f"  cutsearch apply {prof.model or 'MODULE:FACTORY'} {inputs} --dtype {prof.dtype or 'f16'} "
              "--exports exports", highlight=False, soft_wrap=True)


@app.command("apply")
def apply_cmd(
    model: str = _MODEL,
    input_shape: Optional[list[str]] = _INPUTS,
    exports: Optional[list[Path]] = typer.Option(None, "--exports", help="An export directory (cutsearch export), or a directory "
                                       "of them. Repeat for several."),
    dtype: str = _DTYPE,
    tolerance: float = typer.Option(1e-2, help="Largest relative Frobenius error of the model's output accepted."),
    any_m: bool = typer.Option(False, "--any-m", help="Let kernels run for an M they were not searched for "
                               "(correct, not tuned)."),
    out_path: Optional[Path] = typer.Option(None, "--out", help="JSON file to write (default: "
                                            "studies/<name>-applied-profile.json)."),
    name: Optional[str] = _NAME,
    gpu: int = _GPU,
    warmup: int = _WARMUP,
    reps: int = _REPS,
    top: int = _TOP,
    studies_dir: Optional[Path] = _STUDIES,
) -> None:
    """Replace the model's nn.Linear layers that have an export, check the outputs, and measure the speedup.

    The model is profiled before and after in this one process, so the measured forward-pass
    speedup and the one predicted from each kernel's searched speedup are comparable.
    """
    from cutsearch import plan, profiler

    specs, name, target = _setup(model, input_shape, dtype, name, out_path, studies_dir, "applied-profile.json")
    if not exports:
        raise UserError("give the exported kernels as --exports DIR (an export, or a directory of them)")
    found, notes = plan.read_exports(exports)
    for note in notes:
        err.print(f"[yellow]skipped: {note}[/]", highlight=False)
    if not found:
        raise UserError("no export that replaces an nn.Linear under " + ", ".join(map(str, exports)))
    net, inputs = profiler.place(profiler.build_model(model, gpu=gpu), specs, dtype=dtype, gpu=gpu)
    err.print("profiling the model as it is...")
    before = _stamp(profiler.profile(net, inputs, name=name, warmup=warmup, reps=reps), model, dtype)
    reference = profiler.forward(net, inputs)
    seen = profiler.record_shapes(net, inputs)
    chosen, skipped = plan.match(seen, found, any_m=any_m)
    if not chosen:
        calls = sorted({s for shapes in seen.values() for s in shapes})
        raise UserError(f"none of the {len(found)} export(s) ({', '.join(s.label for s in found)}) matches a Linear "
                        f"call of the model ({', '.join(s.label for s in calls[:6])}"
                        f"{' ...' if len(calls) > 6 else ''})")
    net = profiler.swap(net, chosen, any_m=any_m)
    error = profiler.rel_error(reference, profiler.forward(net, inputs, what="the forward pass with the exports"))
    if not error <= tolerance:
        raise UserError(f"with the exports the model's output differs from the original by {error:.2e} (relative "
                        f"Frobenius), over --tolerance {tolerance:g}: not applied (check that each export was searched for "
                        "this model's weights' layout and dtype)")
    print_replacements(out, chosen, skipped, seen, found, error)
    err.print("profiling the model with the exports...")
    after = _stamp(profiler.profile(net, inputs, name=name, warmup=warmup, reps=reps), model, dtype)
    comparison = plan.compare(before, after)
    data = after.to_dict()
    data["comparison"] = {"baseline": "measured in this run, before the replacement", "output_rel_error": error,
                          **comparison.to_dict()}
    data["baseline"] = before.to_dict()
    _write(target, data)
    print_profile(out, after, top=top)
    print_comparison(out, comparison, note="before and after measured in this run")
    out.print(f"wrote {target}")


# -- shared steps -----------------------------------------------------------------------------------

def _setup(model, input_shape, dtype, name, out_path, studies_dir, suffix):
    from cutsearch.profiler import MODEL_DTYPES, InputSpec, model_name
    from cutsearch.workspace import Workspace

    if dtype not in MODEL_DTYPES:
        raise UserError(f"--dtype {dtype}: choose {' or '.join(MODEL_DTYPES)} (cutsearch searches those kernels)")
    specs = [InputSpec.parse(s) for s in input_shape or []]
    if not specs:
        raise UserError("give the model's input as --input-shape, e.g. --input-shape 8,512,80 (repeat for several)")
    try:
        name = Workspace.check_name(name or model_name(model))
    except UserError:
        raise UserError(f"--name {name or model_name(model)!r} must be letters, digits, '.', '_' or '-' "
                        "(it names the profile's files)") from None
    return specs, name, out_path or Workspace(studies_dir).root / f"{name}-{suffix}"


def _stamp(prof, model: str, dtype: str):
    info = {**prof.info, "command": invocation(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    return dataclasses.replace(prof, model=model, dtype=dtype, info=info)


def _write(target: Path, data: dict) -> None:
    from cutsearch.persist import write_json

    try:
        write_json(target, data)
    except OSError as exc:
        raise UserError(f"cannot write {target}: {exc.strerror or exc}") from None


def _spec(entry: dict) -> str:
    shape = ",".join(map(str, entry.get("shape", ())))
    return shape if entry.get("dtype") in ("f16", "bf16") else f"{shape}:{entry.get('dtype')}"


def _inputs(prof) -> str:
    return " ".join(_spec(i) for i in prof.inputs) or "unknown inputs"


# -- views --------------------------------------------------------------------------------------------

def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def print_profile(console: Console, prof, *, top: int = 30) -> None:
    from cutsearch.plan import CUTSEARCH, gain

    dev = prof.info.get("device") or {}
    table = Table(title=f"{prof.name}: nn.Linear calls in one forward pass ({dev.get('gpu', 'GPU')}, {prof.dtype}, "
                  f"inputs {_inputs(prof)})", title_justify="left")
    for col, justify in (("#", "right"), ("layer", "left"), ("M x N x K", "left"), ("calls", "right"),
                         ("µs/call", "right"), ("share", "right"), ("of floor", "right"), ("best gain", "right")):
        table.add_column(col, justify=justify)
    ranked = prof.ranked()
    for i, row in enumerate(ranked[:top], 1):
        eff = prof.efficiency(row)
        label = row.name or "<model>"
        if row.kind == CUTSEARCH:
            label += " [green](cutsearch)[/]"
        table.add_row(str(i), label, row.shape.label, str(row.calls), f"{row.per_call_us:.1f}", _pct(prof.share(row)),
                      _pct(eff), f"{gain(prof.saving(row)):.3f}x" if row.kind != CUTSEARCH else "-")
    console.print(table)
    if len(ranked) > top:
        console.print(f"... and {len(ranked) - top} more call sites (all in the JSON file)")
    f = prof.forward
    console.print(f"forward pass: {f['median_us']:.1f} µs of GPU time (median of {f['reps']}, p20-p80 "
                  f"{f['p20_us']:.1f}-{f['p80_us']:.1f}); nn.Linear calls are {_pct(prof.linear_share)} of it")
    total = sum(prof.saving(r) for r in prof.rows)
    console.print(f"if every Linear ran at its roofline floor: at most {gain(total):.3f}x end to end")
    if prof.latency and prof.latency["median_us"] > 1.2 * f["median_us"]:
        console.print(f"[yellow]as called (launch overhead included) the forward pass takes "
                      f"{prof.latency['median_us']:.1f} µs: it is launch-bound, and faster kernels only shorten the "
                      "GPU part (CUDA graphs shorten the rest)[/]")
    if prof.not_called:
        shown = ", ".join(prof.not_called[:4]) + (" ..." if len(prof.not_called) > 4 else "")
        console.print(f"{len(prof.not_called)} nn.Linear module(s) never called through forward() (e.g. used by "
                      f"weight, as nn.MultiheadAttention's out_proj is): {shown}")


def print_plan(console: Console, prof, proposal) -> None:
    from cutsearch.plan import names_label

    table = Table(title=f"{prof.name}: shapes worth a search (threshold {100 * proposal.threshold:g}% of the "
                  f"{prof.forward_us:.0f} µs forward pass)", title_justify="left")
    for col, justify in (("#", "right"), ("shape", "left"), ("layers", "left"), ("calls", "right"),
                         ("share", "right"), ("of floor", "right"), ("could save", "right"), ("best gain", "right")):
        table.add_column(col, justify=justify)
    for i, t in enumerate(proposal.targets, 1):
        table.add_row(str(i), t.shape.label, names_label(t.names, 2), str(t.calls), _pct(t.share), _pct(t.efficiency),
                      f"{100 * t.saving:.2f}%", f"{t.gain:.3f}x")
    if proposal.targets:
        console.print(table)
        console.print(f"all {len(proposal.targets)} at their floor: at most {proposal.bound:.3f}x end to end")
    for s in proposal.skipped:
        console.print(f"skipped {s.what} ({names_label(s.names, 2)}): {s.reason}", highlight=False)


def print_replacements(console: Console, chosen, skipped, seen, found, error: float) -> None:
    table = Table(title="nn.Linear layers replaced", title_justify="left")
    for col in ("layer", "M x N x K", "export"):
        table.add_column(col)
    for name, export in chosen.items():
        (shape,) = seen[name]
        table.add_row(name or "<model>", shape.label, str(export))
    console.print(table)
    for name, reason in skipped.items():
        console.print(f"kept {name}: {reason}", highlight=False)
    used = set(chosen.values())
    for shape, export in found.items():
        if export not in used:
            console.print(f"unused export {export} ({shape.label}): no Linear call of this model has that shape",
                          highlight=False)
    console.print(f"output check: relative error {error:.2e} against the original model")


def print_comparison(console: Console, c, *, note: str) -> None:
    predicted = "-" if c.predicted is None else f"{c.predicted:.3f}x"
    console.print(f"forward pass {c.baseline_us:.1f} µs -> {c.current_us:.1f} µs: measured [bold]{c.measured:.3f}x"
                  f"[/], predicted {predicted} (each replaced call at its kernel's searched speedup), bound "
                  f"{c.bound:.3f}x (at the roofline floor); {note}")
    for r in c.replaced:
        console.print(f"  {r.name}: {r.before_us:.1f} -> {r.after_us:.1f} µs per call ({r.before_us / r.after_us:.2f}x"
                      f"{'' if r.export_speedup is None else f', searched {r.export_speedup:.2f}x'})", highlight=False)
