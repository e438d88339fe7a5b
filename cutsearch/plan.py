"""Which fully-connected layers of a model are worth a search: the arithmetic, with no GPU.

A profile (what `cutsearch profile` measured) holds each nn.Linear call site with the shape it
saw and the time it took inside one forward pass. From that and the roofline floor:

- share:  the call site's time / the forward pass time;
- saving: the largest fraction of the forward pass a kernel at the floor could remove,
          share * (1 - floor / measured). Savings add up across layers, gains do not;
- gain:   the Amdahl end-to-end speedup if that saving were made, 1 / (1 - saving), which is
          1 / (1 - share + share * floor / measured).

The planner groups call sites by the math they do, (M, N, K, dtype, bias), sums their savings,
and proposes the shapes whose summed saving reaches a threshold, as a suite TOML file.
"""

from __future__ import annotations

import dataclasses
import math
import json
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from cutsearch.errors import UserError
from cutsearch.problem import DTYPES, Layer

FORMAT = "cutsearch-profile/1"
DEFAULT_THRESHOLD = 0.01
TORCH, CUTSEARCH = "torch", "cutsearch"  # what runs a call site: nn.Linear, or an applied export


class Shape(NamedTuple):
    """The math one Linear call does: x [M, K] @ W[N, K]^T (+ b), M = product of x's leading dims."""

    m: int
    n: int
    k: int
    dtype: str
    bias: bool

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k} {self.dtype}{' +bias' if self.bias else ''}"

    def layer(self) -> Layer:
        """The search problem for this shape; UserError where cutsearch cannot search it."""
        return Layer(m=self.m, n=self.n, k=self.k, dtype=self.dtype, bias=self.bias)

    def floor_us(self) -> float | None:
        """Roofline floor, or None for a shape cutsearch does not search (f32, too large...)."""
        if self.dtype not in DTYPES:
            return None
        try:
            return self.layer().floor_us
        except UserError:
            return None

    def to_dict(self) -> dict[str, Any]:
        return {"M": self.m, "N": self.n, "K": self.k, "dtype": self.dtype, "bias": self.bias}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Shape:
        try:
            return cls(int(data["M"]), int(data["N"]), int(data["K"]), str(data["dtype"]),
                       bool(data.get("bias", False)))
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"a layer entry lacks a valid M, N, K or dtype ({exc})") from None


def saving(total_us: float, calls: int, floor_us: float | None, forward_us: float) -> float:
    """Fraction of the forward pass that `calls` calls at the floor would save (never negative:
    a call already under the HBM floor, its operands in L2, has nothing to gain)."""
    if floor_us is None or forward_us <= 0:
        return 0.0
    return max(0.0, total_us - calls * floor_us) / forward_us


def amdahl(share: float, floor_us: float, measured_us: float) -> float:
    """End-to-end speedup if a part taking `share` of the time ran at its floor instead."""
    ratio = min(1.0, floor_us / measured_us) if measured_us > 0 else 1.0
    return 1.0 / (1.0 - share + share * ratio)


def gain(total_saving: float) -> float:
    return 1.0 / (1.0 - min(total_saving, 0.999999))


def percentiles(samples: Iterable[float]) -> dict[str, float]:
    import numpy as np

    xs = np.asarray(list(samples), dtype=float)
    if xs.size == 0:
        raise ValueError("no samples")
    return {"median_us": float(np.median(xs)), "p20_us": float(np.percentile(xs, 20)),
            "p80_us": float(np.percentile(xs, 80)), "reps": int(xs.size)}


@dataclasses.dataclass(frozen=True)
class CallTiming:
    """One Linear call in the forward pass (the n-th call of module `name`), over repetitions."""

    name: str
    shape: Shape
    samples_us: tuple[float, ...]
    kind: str = TORCH
    export: str | None = None
    export_speedup: float | None = None


@dataclasses.dataclass(frozen=True)
class Row:
    """One call site: a module and the shape it was called with, summed over its calls."""

    name: str
    shape: Shape
    calls: int
    total_us: float
    kind: str = TORCH
    export: str | None = None
    export_speedup: float | None = None  # the export's kernel vs cuBLAS, as its search measured

    @property
    def per_call_us(self) -> float:
        return self.total_us / self.calls


def aggregate(calls: Iterable[CallTiming]) -> list[Row]:
    """Per-call medians summed per (module, shape): calls of one module in one forward add up."""
    import statistics

    rows: dict[tuple[str, Shape, str], list[Any]] = {}
    for call in calls:
        key = (call.name, call.shape, call.kind)
        entry = rows.setdefault(key, [0, 0.0, call.export, call.export_speedup])
        entry[0] += 1
        entry[1] += statistics.median(call.samples_us)
    return [Row(name=name, shape=shape, kind=kind, calls=n, total_us=total, export=export, export_speedup=speedup)
            for (name, shape, kind), (n, total, export, speedup) in rows.items()]


@dataclasses.dataclass(frozen=True)
class Profile:
    """What one `cutsearch profile` run measured (or, for test fixtures, what a file says it did)."""

    name: str
    forward: dict[str, float]  # GPU time of the whole forward pass: median_us, p20_us, p80_us, reps
    rows: tuple[Row, ...]
    model: str = ""
    inputs: tuple[dict[str, Any], ...] = ()
    dtype: str = ""
    latency: dict[str, float] | None = None  # the forward as called, CPU launch overhead included
    not_called: tuple[str, ...] = ()
    info: dict[str, Any] = dataclasses.field(default_factory=dict)  # device, command, date, method, note

    @property
    def forward_us(self) -> float:
        return float(self.forward["median_us"])

    def share(self, row: Row) -> float:
        return row.total_us / self.forward_us

    def saving(self, row: Row) -> float:
        return saving(row.total_us, row.calls, row.shape.floor_us(), self.forward_us) if row.kind == TORCH else 0.0

    def efficiency(self, row: Row) -> float | None:
        floor = row.shape.floor_us()
        return None if floor is None else floor / row.per_call_us

    def ranked(self) -> list[Row]:
        return sorted(self.rows, key=lambda r: (-self.saving(r), -r.total_us, r.name))

    @property
    def linear_share(self) -> float:
        return sum(r.total_us for r in self.rows) / self.forward_us

    def row_dict(self, row: Row) -> dict[str, Any]:
        floor = row.shape.floor_us()
        out = {"name": row.name, "kind": row.kind, **row.shape.to_dict(), "calls": row.calls,
               "per_call_us": round(row.per_call_us, 3), "total_us": round(row.total_us, 3),
               "share": round(self.share(row), 5), "floor_us": None if floor is None else round(floor, 3),
               "efficiency": None if floor is None else round(self.efficiency(row), 4),
               "saving": round(self.saving(row), 5), "best_gain": round(gain(self.saving(row)), 5)}
        if row.kind == CUTSEARCH:
            out.update(export=row.export, export_speedup=row.export_speedup)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "name": self.name, "model": self.model, "inputs": list(self.inputs),
                "dtype": self.dtype, **self.info, "forward_us": self.forward, "latency_us": self.latency,
                "linear_share": round(self.linear_share, 5),
                "layers": [self.row_dict(r) for r in self.ranked()], "not_called": list(self.not_called)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "profile") -> Profile:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UserError(f"{source} is not a cutsearch profile (expected \"format\": \"{FORMAT}\")")
        try:
            forward = dict(data["forward_us"])
            if float(forward["median_us"]) <= 0:
                raise ValueError("forward time must be positive")
            rows = tuple(Row(name=str(r["name"]), shape=Shape.from_dict(r), calls=int(r["calls"]),
                             total_us=float(r["total_us"]), kind=r.get("kind", TORCH), export=r.get("export"),
                             export_speedup=r.get("export_speedup")) for r in data["layers"])
            if any(r.calls < 1 or r.total_us < 0 for r in rows):
                raise ValueError("every layer needs calls >= 1 and a total_us >= 0")
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{source} is not a valid cutsearch profile: {exc!r}") from None
        known = {"format", "name", "model", "inputs", "dtype", "forward_us", "latency_us", "linear_share",
                 "layers", "not_called"}
        return cls(name=str(data.get("name") or "model"), forward=forward, rows=rows, model=data.get("model", ""),
                   inputs=tuple(data.get("inputs", ())), dtype=data.get("dtype", ""), latency=data.get("latency_us"),
                   not_called=tuple(data.get("not_called", ())),
                   info={k: v for k, v in data.items() if k not in known})

    @classmethod
    def load(cls, path: Path) -> Profile:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise UserError(f"profile {path} does not exist: write one with `cutsearch profile`") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"cannot read profile {path}: {exc}") from None
        return cls.from_dict(data, source=str(path))


# -- planning -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Target:
    """One shape to search, with every call site that would use its kernel."""

    shape: Shape
    names: tuple[str, ...]
    calls: int
    total_us: float
    share: float
    saving: float
    efficiency: float

    @property
    def gain(self) -> float:
        return gain(self.saving)

    @property
    def slug(self) -> str:
        return self.shape.layer().slug


@dataclasses.dataclass(frozen=True)
class Skip:
    what: str
    names: tuple[str, ...]
    reason: str
    saving: float = 0.0


@dataclasses.dataclass(frozen=True)
class Plan:
    profile: str
    threshold: float
    targets: tuple[Target, ...]
    skipped: tuple[Skip, ...]

    @property
    def saving(self) -> float:
        return sum(t.saving for t in self.targets)

    @property
    def bound(self) -> float:
        """End-to-end speedup if every proposed shape ran at its floor: an upper bound."""
        return gain(self.saving)


def plan(profile: Profile, threshold: float = DEFAULT_THRESHOLD) -> Plan:
    """Shapes worth a search, most promising first; every other call site with the reason why not."""
    if not 0 <= threshold < 1:
        raise UserError(f"--threshold is a fraction of the forward pass (0.01 = 1%), got {threshold}")
    skipped: list[Skip] = []
    groups: dict[tuple[Shape, str], list[Row]] = {}
    for row in profile.rows:
        groups.setdefault((row.shape, row.kind), []).append(row)
    targets: list[Target] = []
    for (shape, kind), rows in groups.items():
        names = tuple(sorted(r.name for r in rows))
        if kind != TORCH:
            skipped.append(Skip(shape.label, names, "already runs a cutsearch kernel"))
            continue
        if shape.dtype not in DTYPES:
            skipped.append(Skip(shape.label, names, f"{shape.dtype}: cutsearch searches {' and '.join(DTYPES)} "
                                "kernels (profile with --dtype f16 or bf16)"))
            continue
        try:
            floor = shape.layer().floor_us
        except UserError as exc:
            skipped.append(Skip(shape.label, names, str(exc)))
            continue
        calls = sum(r.calls for r in rows)
        total = sum(r.total_us for r in rows)
        target = Target(shape=shape, names=names, calls=calls, total_us=total, share=total / profile.forward_us,
                        saving=sum(profile.saving(r) for r in rows), efficiency=calls * floor / total)
        if target.saving < threshold or target.saving == 0:
            skipped.append(Skip(shape.label, names, _below(target, threshold), target.saving))
        else:
            targets.append(target)
    targets.sort(key=lambda t: (-t.saving, t.shape))
    skipped.sort(key=lambda s: (-s.saving, s.what))
    return Plan(profile=profile.name, threshold=threshold, targets=tuple(targets), skipped=tuple(skipped))


def _below(t: Target, threshold: float) -> str:
    if t.efficiency >= 1:
        return f"already at {100 * t.efficiency:.0f}% of the roofline floor: nothing to gain"
    return (f"could save at most {100 * t.saving:.2f}% of the forward pass, under the {100 * threshold:g}% "
            f"threshold (cuBLAS runs at {100 * t.efficiency:.0f}% of the floor, {100 * t.share:.1f}% of the time)")


def suite_toml(p: Plan, *, source: str = "") -> str:
    """A suite file that `cutsearch.problem.load_layers` reads: one table per shape to search."""
    lines = [f"# Layers of {p.profile} worth a search, planned from {source or 'a profile'}.",
             f"# Threshold: a shape must be able to save {100 * p.threshold:g}% of the forward pass.",
             f"# If every shape below ran at its roofline floor the forward pass would be at most "
             f"{p.bound:.3f}x faster.", ""]
    for t in p.targets:
        lines.append(f"# {names_label(t.names)}: {t.calls} call(s), {100 * t.share:.1f}% of the forward pass, "
                     f"cuBLAS at {100 * t.efficiency:.0f}% of the floor; could save {100 * t.saving:.2f}% "
                     f"({t.gain:.3f}x)")
        s = t.shape
        lines.append(f'{t.slug} = {{ M = {s.m}, N = {s.n}, K = {s.k}, dtype = "{s.dtype}", '
                     f'bias = {str(s.bias).lower()} }}')
    if p.skipped:
        lines += ["", "# Not proposed:"]
        lines += [f"#   {s.what} ({names_label(s.names)}): {s.reason}" for s in p.skipped]
    return "\n".join(lines) + "\n"


def names_label(names: tuple[str, ...], most: int = 4) -> str:
    names = tuple(n or "<model>" for n in names)
    return ", ".join(names) if len(names) <= most else f"{', '.join(names[:most])} and {len(names) - most} more"


# -- applying exports ----------------------------------------------------------------------------

def read_exports(paths: Iterable[Path]) -> tuple[dict[Shape, Path], list[str]]:
    """Exports by the shape they were searched for, and notes on those that cannot replace an
    nn.Linear. Each path is an export directory, or a directory of them."""
    from cutsearch import persist

    found: dict[Shape, Path] = {}
    notes: list[str] = []
    for path in paths:
        path = Path(path)
        if (path / persist.META).is_file():
            candidates, explicit = [path], True
        elif path.is_dir():
            candidates, explicit = sorted(p for p in path.iterdir() if (p / persist.META).is_file()), False
            if not candidates:
                raise UserError(f"{path} holds no cutsearch export (no */{persist.META}): "
                                "write one with `cutsearch export STUDY`")
        elif path.exists():
            raise UserError(f"{path} is a file: give the directory `cutsearch export` wrote, or one that holds several")
        else:
            raise UserError(f"export directory {path} does not exist")
        for export in candidates:
            meta = persist.verify_dir(export)
            layer = meta.get("layer")
            if meta.get("exported_by") != "cutsearch" or not isinstance(layer, dict):
                if explicit:
                    raise UserError(f"{export} is not a cutsearch export")
                continue
            if layer.get("activation", "none") != "none":
                note = f"{export} fuses {layer['activation']}: it replaces Linear+activation, not an nn.Linear"
                if explicit:
                    raise UserError(note)
                notes.append(note)
                continue
            shape = Shape.from_dict(layer)
            if shape in found:
                raise UserError(f"two exports for {shape.label}: {found[shape]} and {export}; pass only one")
            found[shape] = export
    return found, notes


def normalize_exports(exports: dict[Any, Any]) -> dict[Shape, Path]:
    """Accept plain (M, N, K, dtype, bias) tuples as keys, as a library caller would write them."""
    out = {}
    for key, path in exports.items():
        try:
            shape = key if isinstance(key, Shape) else Shape(*key)
        except TypeError:
            raise UserError(f"export key {key!r} must be (M, N, K, dtype, bias)") from None
        out[shape] = Path(path)
    return out


def match(seen: dict[str, set[Shape]], exports: dict[Shape, Path], *,
          any_m: bool = False) -> tuple[dict[str, Path], dict[str, str]]:
    """Which nn.Linear (by module name) takes which export, and why each other one does not.

    With `any_m`, a call with no export of its exact shape takes the export of the same N, K,
    dtype and bias whose M is nearest in ratio (the kernel is correct for any M, tuned for its own).
    """
    chosen: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    for name, shapes in sorted(seen.items()):
        if len(shapes) > 1:
            with_export = [s for s in shapes if s in exports]
            if with_export:
                skipped[name] = (f"called with {len(shapes)} shapes ({', '.join(sorted(s.label for s in shapes))}): "
                                 "one kernel is tuned for one M")
            continue
        (shape,) = shapes
        if shape in exports:
            chosen[name] = exports[shape]
        elif any_m:
            kin = [e for e in exports if (e.n, e.k, e.dtype, e.bias) == (shape.n, shape.k, shape.dtype, shape.bias)]
            if kin:
                chosen[name] = exports[min(kin, key=lambda e: (abs(math.log(e.m / shape.m)), e.m))]
    return chosen, skipped


# -- predicted against measured ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Replaced:
    name: str
    shape: Shape
    before_us: float  # per call, in the baseline's forward pass
    after_us: float
    export_speedup: float | None


@dataclasses.dataclass(frozen=True)
class Comparison:
    baseline_us: float
    current_us: float
    replaced: tuple[Replaced, ...]
    predicted: float | None  # each replaced call sped up by its export's searched speedup
    bound: float  # each replaced call at its roofline floor

    @property
    def measured(self) -> float:
        return self.baseline_us / self.current_us

    def to_dict(self) -> dict[str, Any]:
        return {"baseline_forward_us": round(self.baseline_us, 3), "forward_us": round(self.current_us, 3),
                "measured_speedup": round(self.measured, 4),
                "predicted_speedup": None if self.predicted is None else round(self.predicted, 4),
                "bound_speedup": round(self.bound, 4),
                "replaced": [{"name": r.name, **r.shape.to_dict(), "before_us": round(r.before_us, 3),
                              "after_us": round(r.after_us, 3), "export_speedup": r.export_speedup}
                             for r in self.replaced]}


def compare(baseline: Profile, current: Profile) -> Comparison:
    """The forward-pass speedup measured, next to what the baseline profile predicted for the
    call sites that now run cutsearch kernels."""
    before = {(r.name, r.shape): r for r in baseline.rows if r.kind == TORCH}
    replaced, predicted_saving, bound_saving, known = [], 0.0, 0.0, True
    for row in current.rows:
        old = before.get((row.name, row.shape))
        if row.kind != CUTSEARCH or old is None:
            continue
        replaced.append(Replaced(row.name, row.shape, old.per_call_us, row.per_call_us, row.export_speedup))
        bound_saving += baseline.saving(old)
        if row.export_speedup:
            predicted_saving += old.total_us * (1 - 1 / row.export_speedup) / baseline.forward_us
        else:
            known = False
    return Comparison(baseline_us=baseline.forward_us, current_us=current.forward_us, replaced=tuple(replaced),
                      predicted=gain(predicted_saving) if known else None, bound=gain(bound_saving))
