"""Search economy, replayed: how many trials and how much wall time each strategy needs.

A recording (`evaluator.save_recording`) of real H200 evaluations is treated as the whole
space. Every strategy may pick only recorded configs, and every outcome, compile time and
timing it meets was measured earlier: nothing is built or measured here, and every figure this
module reports is labelled as replayed.

Strategies, as `cutsearch search` runs them, restricted to the recorded configs:
- tpe+warm: Optuna TPE (the search's own sampler settings), after the model's diverse top
  `warm` configs (default: one batch).
- tpe: the same TPE, no warm start.
- random: uniformly random recorded configs.
- model: the model's ranking of the recorded configs, in order.

A TPE proposal outside the recording (or already evaluated) is told back as failed, which TPE
ignores as it ignores rule-invalid proposals in a real search, and the nearest unevaluated
recorded config is evaluated in its place. So TPE's belief shapes the order without wasting
budget on configs the recording cannot answer.

Wall time follows how `GpuEvaluator` spends it: the parent renders a batch's sources one after
another, `jobs` nvcc processes compile them, and the one GPU measures each kernel as it is
built; the next batch is asked once the whole batch is told.
"""

from __future__ import annotations

import dataclasses
import datetime
import heapq
import random
import statistics
from pathlib import Path
from typing import Any, Iterable, Sequence

from cutsearch import model, persist
from cutsearch.errors import UserError
from cutsearch.evaluator import MEASURE_TIMEOUT_S, Evaluation, read_recording, save_recording
from cutsearch.outcome import Failure, FailureKind, Measurement
from cutsearch.problem import Layer, replayed_from
from cutsearch.search import BATCH_PER_JOB
from cutsearch.space import Config, Space, invalid_reason

STRATEGIES = ("tpe+warm", "tpe", "random", "model")
TOLERANCE = 0.02


# --------------------------------------------------------------------------- recordings

@dataclasses.dataclass(frozen=True, kw_only=True)
class Recording:
    """A layer and the evaluations recorded for it, with where and how they were measured."""

    layer: Layer
    evaluations: tuple[Evaluation, ...]
    meta: dict[str, Any]
    path: Path | None = None

    @classmethod
    def load(cls, path: Path | str) -> Recording:
        layer, evals, meta = read_recording(path)
        return cls(layer=layer, evaluations=tuple(evals), meta=meta, path=Path(path))

    @property
    def name(self) -> str:
        return self.path.stem if self.path is not None else self.layer.slug

    def measured(self) -> list[Evaluation]:
        return [e for e in self.evaluations if isinstance(e.outcome, Measurement)]

    def best(self) -> Evaluation | None:
        measured = self.measured()
        return min(measured, key=lambda e: e.outcome.median_us) if measured else None


def load_recordings(paths: Iterable[Path | str]) -> list[Recording]:
    recordings = [Recording.load(p) for p in paths]
    if not recordings:
        raise UserError("give at least one recording (a JSON file written by `cutsearch record`)")
    return recordings


def recordings_among(paths: Iterable[Path | str], min_measured: int = 1) -> list[Recording]:
    """The recordings among these JSON files with at least `min_measured` measured configs; the
    summaries, wall times and use checks stored beside them are skipped."""
    recordings = []
    for path in paths:
        try:
            rec = Recording.load(path)
        except UserError:
            continue
        if len(rec.measured()) >= min_measured:
            recordings.append(rec)
    return recordings


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordSummary:
    path: Path
    layer: Layer
    evaluations: int
    measured: int
    skipped: dict[str, int]


def study_evaluations(study: Any) -> tuple[Layer, list[Evaluation], dict[str, int], str | None]:
    """The measured evaluations of a cutsearch study, once per config, in trial order.

    Skipped, and counted by reason: proposals that broke a space rule (never built), trials
    whose process was killed (interrupted), trials still waiting or running, trials closed
    without an evaluation, configs replayed from an earlier trial of the study, and outcomes
    that were not measured on a GPU (a model or replay run must never become a recording of
    measurements).
    """
    from optuna.trial import TrialState

    layer_dict = study.user_attrs.get("layer")
    if layer_dict is None:
        raise UserError(f"study {study.study_name!r} was not made by cutsearch: it records no layer")
    layer = Layer.from_dict(layer_dict)
    seen: set[str] = set()
    evaluations: list[Evaluation] = []
    skipped: dict[str, int] = {}
    first: datetime.datetime | None = None

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        ev = trial.user_attrs.get("evaluation")
        if trial.user_attrs.get("rule_invalid"):
            # Refused before any build: by a space rule, or as the cost model's hopeless tail.
            message = str((trial.user_attrs.get("failure") or {}).get("message", ""))
            skip("pruned" if message.startswith("pruned:") else "rule_invalid")
        elif not trial.state.is_finished() or trial.state == TrialState.PRUNED:
            skip("unfinished")
        elif (trial.user_attrs.get("failure") or {}).get("kind") == FailureKind.INTERRUPTED.value:
            skip("interrupted")
        elif ev is None:
            skip("no_evaluation")
        elif ev.get("replayed_from_study"):
            skip("replayed")
        elif (trial.user_attrs.get("source") or ev.get("source")) != "measured":
            skip("not_measured")
        else:
            evaluation = Evaluation.from_dict(ev, source="measured")
            if evaluation.config.key in seen:
                skip("replayed")
                continue
            seen.add(evaluation.config.key)
            evaluations.append(evaluation)
            if trial.datetime_start is not None and (first is None or trial.datetime_start < first):
                first = trial.datetime_start
    return layer, evaluations, skipped, first.date().isoformat() if first else None


def record_study(study_name: str, *, storage: str, out: Path, command: str | None = None,
                 results: Path | None = None) -> RecordSummary:
    """Write the measured trials of a study as a recording that `ReplayEvaluator` replays.

    Provenance comes from the study's summary (`studies/results/<study>.json`, when given and
    present): the GPU, driver, nvcc and CUTLASS versions, and the command that searched.
    """
    import optuna

    from cutsearch.storage import load_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = load_study(study_name, storage)
    layer, evaluations, skipped, date = study_evaluations(study)
    if not evaluations:
        detail = ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "no trials"
        raise UserError(f"study {study_name!r} holds no measured evaluation to record ({detail})")
    summary = persist.read_json(results) if results is not None else None
    summary = summary if isinstance(summary, dict) else {}
    toolchain = summary.get("toolchain") or {}
    gpu = toolchain.get("gpu") or {}
    meta = {
        "gpu": gpu.get("name") or summary.get("gpu"),
        "driver": gpu.get("driver"),
        "nvcc": toolchain.get("nvcc"),
        "cutlass": toolchain.get("cutlass"),
        "date": date,
        "study": study_name,
        "command": summary.get("command"),
        "recorded_by": command,
        "skipped": skipped,
        "note": "recorded measurements; replaying them measures nothing",
    }
    save_recording(out, layer, evaluations, **meta)
    return RecordSummary(path=Path(out), layer=layer, evaluations=len(evaluations),
                         measured=sum(isinstance(e.outcome, Measurement) for e in evaluations), skipped=skipped)


# --------------------------------------------------------------------------- wall-time model

@dataclasses.dataclass(frozen=True, kw_only=True)
class CostModel:
    """What an evaluation costs in wall time, from the recording plus a few constants.

    The constants were read off the timestamps of the first H200 smoke run (see
    studies/recorded/h200-smoke/journals): rendering took about 1.6 s a config, serially, in
    the parent, and a warm worker measured a kernel's 8 variants in 0.1-0.7 s.
    """

    jobs: int = 16                    # nvcc processes at once
    render_s: float = 1.6             # codegen of one config, serial, before the batch compiles
    measure_fixed_s: float = 0.15     # load, correctness check, cuBLAS baseline setup
    flush_us: float = 65.0            # zeroing 256 MiB before every repetition
    reps: int = 33                    # warm-up + timed repetitions of each variant
    restart_s: float = 15.0           # a crashed worker is replaced (torch import, CUDA init)
    timeout_s: float = MEASURE_TIMEOUT_S
    compile_fallback_s: float | None = None  # compile time of a failed build; default: recording median
    # Kernels sharing a translation unit, as Compiler.compile_many packs a backlog larger than
    # `jobs`: a unit of k costs (unit_fixed + unit_marginal * k) times its members' mean alone
    # time. Read off the H200 host's throughput run (studies/results/throughput-*.json): 32
    # kernels alone in 110.5 s (two rounds of 16), 128 in units of 8 in 102.0 s (one round).
    max_unit: int = 8
    unit_fixed: float = 0.879
    unit_marginal: float = 0.121

    def measure_s(self, ev: Evaluation) -> float:
        """The GPU time of one evaluation (0 when nothing reached the GPU)."""
        if isinstance(ev.outcome, Measurement):
            m = ev.outcome
            variants = [t for _, t in m.variants] or [m.median_us]
            if m.baseline is not None:
                variants.append(m.baseline.median_us)
            return self.measure_fixed_s + sum(self.reps * (t + self.flush_us) for t in variants) * 1e-6
        kind = ev.outcome.kind
        if kind == FailureKind.TIMEOUT:
            return self.timeout_s + self.restart_s
        if kind == FailureKind.CRASH:
            return self.measure_fixed_s + self.restart_s
        if kind in (FailureKind.LAUNCH_ERROR, FailureKind.WRONG_RESULT):
            return self.measure_fixed_s
        return 0.0  # invalid, compile error, defect: the GPU never saw it

    def compile_s(self, ev: Evaluation, fallback_s: float) -> float:
        if ev.compile_s is not None:
            return ev.compile_s
        if isinstance(ev.outcome, Failure) and ev.outcome.kind == FailureKind.INVALID:
            return 0.0  # refused by the CUTLASS interface before nvcc ran
        return self.compile_fallback_s if self.compile_fallback_s is not None else fallback_s

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def simulate_batch(start_s: float, evaluations: Sequence[Evaluation], cost: CostModel,
                   fallback_compile_s: float) -> tuple[list[tuple[float, Evaluation]], float]:
    """When each evaluation of a batch is known, and when the batch ends.

    The parent renders every source first, `jobs` nvcc compile them in ask order as slots
    free, and results are handled in the order builds finish: a built kernel waits for the
    GPU, a failed build is known as soon as the handler reaches it.
    """
    ready = start_s + cost.render_s * len(evaluations)
    jobs = max(1, cost.jobs)
    slots = [ready] * jobs
    # Refused configs never reach nvcc; the rest share units when they outnumber the slots.
    to_build = [i for i, ev in enumerate(evaluations) if cost.compile_s(ev, fallback_compile_s) > 0]
    size = max(1, min(cost.max_unit, -(-len(to_build) // jobs)))
    built = [(ready, i, ev) for i, ev in enumerate(evaluations) if i not in set(to_build)]
    for u in range(0, len(to_build), size):
        unit = to_build[u:u + size]
        alone = statistics.fmean(cost.compile_s(evaluations[i], fallback_compile_s) for i in unit)
        factor = 1.0 if len(unit) == 1 else cost.unit_fixed + cost.unit_marginal * len(unit)
        begin = heapq.heappop(slots)
        done = begin + alone * factor
        heapq.heappush(slots, done)
        built += [(done, i, evaluations[i]) for i in unit]
    cursor = ready
    known = []
    for done, _, ev in sorted(built, key=lambda b: (b[0], b[1])):
        cursor = max(cursor, done) + cost.measure_s(ev)
        known.append((cursor, ev))
    return known, cursor


# --------------------------------------------------------------------------- strategies

def covering_space(layer: Layer, configs: Iterable[Config]) -> Space:
    """The layer's space, widened so that every recorded config is one of its points."""
    configs = list(configs)
    base = Space(layer)
    dims = base.dimensions()

    def union(name: str, values: Iterable[Any]) -> tuple[Any, ...]:
        return tuple(dict.fromkeys([*dims[name], *values]))

    clusters = tuple(dict.fromkeys([*base.clusters, *((c.cluster_m, c.cluster_n) for c in configs)]))
    schedules = union("schedule", (Space.params_from_config(c)["schedule"] for c in configs))
    return Space(layer, tile_m=union("tile_m", (c.tile_m for c in configs)),
                 tile_n=union("tile_n", (c.tile_n for c in configs)),
                 tile_k=union("tile_k", (c.tile_k for c in configs)), clusters=clusters, schedules=schedules,
                 stages=union("stages", (c.stages for c in configs)),
                 swap_ab=union("swap_ab", (c.swap_ab for c in configs)),
                 pad=union("pad", (c.pad for c in configs)),
                 split_k=union("split_k", (c.split_k for c in configs)))


def _distance(a: dict[str, Any], b: dict[str, Any], dims: dict[str, tuple[Any, ...]]) -> float:
    """Mismatch over the search dimensions; ordered ones count their distance in steps."""
    d = 0.0
    for name, choices in dims.items():
        if a[name] == b[name]:
            continue
        ordered = all(isinstance(v, int) and not isinstance(v, bool) for v in choices) and len(choices) > 1
        d += abs(choices.index(a[name]) - choices.index(b[name])) / (len(choices) - 1) if ordered else 1.0
    return d


class _Proposer:
    def ask(self, n: int) -> list[Config]:
        raise NotImplementedError

    def tell(self, ev: Evaluation) -> None:
        pass


class _OrderProposer(_Proposer):
    def __init__(self, order: list[Config]) -> None:
        self.order = list(order)

    def ask(self, n: int) -> list[Config]:
        taken, self.order = self.order[:n], self.order[n:]
        return taken


class _TpeProposer(_Proposer):
    """The search's TPE sampler, with proposals snapped onto unevaluated recorded configs."""

    def __init__(self, layer: Layer, candidates: list[Config], *, seed: int, batch: int, first: list[Config]) -> None:
        import optuna

        from cutsearch import search

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = covering_space(layer, candidates)
        self.dims = self.space.dimensions()
        self.dists = search.distributions(self.space)
        sampler = search.make_sampler("tpe", seed=seed, batch=batch, trials=len(candidates))
        self.study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), sampler=sampler,
                                         direction="minimize")
        self.remaining = {c.key: c for c in candidates}
        self.pending: dict[str, Any] = {}
        self.rng = random.Random(seed)
        self.snapped = 0
        for config in first:
            self.study.enqueue_trial(Space.params_from_config(config))

    def ask(self, n: int) -> list[Config]:
        from optuna.trial import TrialState

        taken = []
        while len(taken) < n and self.remaining:
            trial = self.study.ask(self.dists)
            config = Space.config_from_params(trial.params)
            if config.key not in self.remaining:
                trial.set_user_attr("snapped", True)
                self.study.tell(trial, state=TrialState.FAIL)
                config = self._nearest(Space.params_from_config(config))
                self.snapped += 1
                self.study.enqueue_trial(Space.params_from_config(config))
                trial = self.study.ask(self.dists)
            del self.remaining[config.key]
            self.pending[config.key] = trial
            taken.append(config)
        return taken

    def _nearest(self, params: dict[str, Any]) -> Config:
        scored = [(_distance(params, Space.params_from_config(c), self.dims), self.rng.random(), c)
                  for c in self.remaining.values()]
        return min(scored, key=lambda s: (s[0], s[1]))[2]

    def tell(self, ev: Evaluation) -> None:
        from optuna.trial import TrialState

        trial = self.pending.pop(ev.config.key)
        if isinstance(ev.outcome, Measurement):
            self.study.tell(trial, ev.outcome.median_us)
        else:
            self.study.tell(trial, state=TrialState.FAIL)


def _proposer(strategy: str, layer: Layer, candidates: list[Config], *, seed: int, batch: int,
              warm: int | None) -> _Proposer:
    if strategy == "tpe+warm":
        # The default search: the model's warm start (a new study's, less the priors a recording
        # has none of), and its hopeless tail, less what the warm start chose, never built.
        first = model.warm_start(layer, candidates, batch if warm is None else warm)
        hopeless = model.hopeless(layer, candidates) - {c.key for c in first}
        return _TpeProposer(layer, [c for c in candidates if c.key not in hopeless], seed=seed, batch=batch,
                            first=first)
    if strategy == "tpe":
        return _TpeProposer(layer, candidates, seed=seed, batch=batch, first=[])
    if strategy == "random":
        order = sorted(candidates, key=lambda c: c.key)
        random.Random(seed).shuffle(order)
        return _OrderProposer(order)
    if strategy == "model":
        return _OrderProposer([c for _, c in model.rank(layer, candidates)])
    raise UserError(f"unknown strategy {strategy!r}: choose from {', '.join(STRATEGIES)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run:
    """One replayed search: when it first came within the tolerance of the recording's best."""

    strategy: str
    seed: int
    trials: int | None      # evaluations known when the target was reached (None: never)
    wall_s: float | None    # replayed wall time at that moment
    best_us: float | None   # best time found by then
    snapped: int = 0        # TPE proposals replaced by their nearest recorded config
    order: tuple[str, ...] = ()  # config keys, in the order their results were known


def candidates_of(recording: Recording) -> tuple[list[Evaluation], int]:
    """The recorded evaluations a search today could make, once per config.

    Configs that break today's space rules are left out (and counted): a search would never
    build them, whatever they measured when they were recorded.
    """
    kept: dict[str, Evaluation] = {}
    dropped = 0
    for ev in recording.evaluations:
        if invalid_reason(recording.layer, ev.config) is not None:
            dropped += 1
        else:
            kept.setdefault(ev.config.key, ev)
    return list(kept.values()), dropped


def replay_strategy(recording: Recording, strategy: str, *, seed: int = 0, batch: int | None = None,
                    cost: CostModel = CostModel(), tolerance: float = TOLERANCE, warm: int | None = None) -> Run:
    """Replay one strategy over the recording until it finds a config within `tolerance` of the best."""
    evaluations, _ = candidates_of(recording)
    by_key = {e.config.key: e for e in evaluations}
    measured = [e.outcome.median_us for e in evaluations if isinstance(e.outcome, Measurement)]
    if not measured:
        raise UserError(f"recording {recording.name} has no measured config a search could reach")
    target = min(measured) * (1 + tolerance)
    compiles = [e.compile_s for e in evaluations if e.compile_s is not None]
    fallback = statistics.median(compiles) if compiles else 30.0
    batch = max(1, batch or BATCH_PER_JOB * cost.jobs)
    proposer = _proposer(strategy, recording.layer, [e.config for e in evaluations], seed=seed, batch=batch,
                         warm=warm)
    clock = 0.0
    order: list[str] = []
    best: float | None = None
    while True:
        configs = proposer.ask(batch)
        if not configs:
            return Run(strategy=strategy, seed=seed, trials=None, wall_s=None, best_us=best,
                       snapped=getattr(proposer, "snapped", 0), order=tuple(order))
        known, clock_end = simulate_batch(clock, [by_key[c.key] for c in configs], cost, fallback)
        hit: tuple[int, float, float] | None = None  # (trials, wall time, best) when first within target
        for when, ev in known:
            order.append(ev.config.key)
            proposer.tell(ev)
            if isinstance(ev.outcome, Measurement):
                best = ev.outcome.median_us if best is None else min(best, ev.outcome.median_us)
                if hit is None and ev.outcome.median_us <= target:
                    hit = (len(order), when, best)
        if hit is not None:
            return Run(strategy=strategy, seed=seed, trials=hit[0], wall_s=hit[1], best_us=hit[2],
                       snapped=getattr(proposer, "snapped", 0), order=tuple(order))
        clock = clock_end


def exhaustive_wall_s(recording: Recording, *, batch: int | None = None, cost: CostModel = CostModel()) -> float:
    """Replayed wall time of evaluating every candidate, one batch after another."""
    evaluations, _ = candidates_of(recording)
    compiles = [e.compile_s for e in evaluations if e.compile_s is not None]
    fallback = statistics.median(compiles) if compiles else 30.0
    batch = max(1, batch or BATCH_PER_JOB * cost.jobs)
    clock = 0.0
    for i in range(0, len(evaluations), batch):
        _, clock = simulate_batch(clock, evaluations[i:i + batch], cost, fallback)
    return clock


def _mean(values: list[float | int | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.fmean(got) if got and len(got) == len(values) else None


def benchmark(recordings: Sequence[Recording], *, strategies: Sequence[str] = STRATEGIES, repeats: int = 5,
              batch: int | None = None, cost: CostModel = CostModel(), tolerance: float = TOLERANCE,
              warm: int | None = None, command: str | None = None) -> dict[str, Any]:
    """Every strategy on every recording, over `repeats` seeds: the efficiency report, as data."""
    if repeats <= 0:
        raise UserError(f"--repeats must be positive, got {repeats}")
    if batch is not None and batch <= 0:
        raise UserError(f"--batch must be positive, got {batch}")
    if warm is not None and warm < 0:
        raise UserError(f"--warm must be 0 or more, got {warm}")
    for s in strategies:
        if s not in STRATEGIES:
            raise UserError(f"unknown strategy {s!r}: choose from {', '.join(STRATEGIES)}")
    batch = max(1, batch or BATCH_PER_JOB * cost.jobs)
    report: dict[str, Any] = {
        "recorded": True,
        "source": "recorded",
        "note": f"{replayed_from(r.meta.get('gpu') for r in recordings)}: nothing was built or measured to make "
                "these figures",
        "date": datetime.date.today().isoformat(),
        "command": command,
        "tolerance": tolerance,
        "batch": batch,
        "repeats": repeats,
        "cost_model": cost.to_dict(),
        "recordings": [],
    }
    for rec in recordings:
        evaluations, dropped = candidates_of(rec)
        best = min((e for e in evaluations if isinstance(e.outcome, Measurement)),
                   key=lambda e: e.outcome.median_us, default=None)
        entry: dict[str, Any] = {
            "recording": str(rec.path) if rec.path else rec.name, "name": rec.name, "layer": rec.layer.to_dict(),
            "gpu": rec.meta.get("gpu"), "recorded_on": rec.meta.get("date"),
            "evaluations": len(rec.evaluations), "candidates": len(evaluations), "rule_invalid_dropped": dropped,
            "measured": sum(isinstance(e.outcome, Measurement) for e in evaluations),
            "best_us": best.outcome.median_us if best else None, "best_config": best.config.key if best else None,
            "target_us": best.outcome.median_us * (1 + tolerance) if best else None,
            "exhaustive": {"trials": len(evaluations), "wall_s": exhaustive_wall_s(rec, batch=batch, cost=cost)},
            "strategies": {},
        }
        if best is None:
            entry["skipped"] = "no measured config a search could reach"
            report["recordings"].append(entry)
            continue
        for strategy in strategies:
            seeds = [0] if strategy == "model" else list(range(repeats))  # the model's order has no seed
            runs = [replay_strategy(rec, strategy, seed=s, batch=batch, cost=cost, tolerance=tolerance, warm=warm)
                    for s in seeds]
            trials = [r.trials for r in runs]
            walls = [r.wall_s for r in runs]
            entry["strategies"][strategy] = {
                "seeds": seeds, "trials": trials, "wall_s": walls,
                "trials_mean": _mean(trials), "trials_median": statistics.median(trials) if None not in trials else None,
                "trials_max": max(trials) if None not in trials else None,
                "wall_s_mean": _mean(walls), "snapped": [r.snapped for r in runs],
            }
        report["recordings"].append(entry)
    report["markdown"] = markdown(report)
    return report


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def markdown(report: dict[str, Any]) -> str:
    """The README table: trials and replayed wall time to come within the tolerance of the best."""
    pct = f"{100 * report['tolerance']:g}%"
    lines = [
        f"{_sentence(replayed_from(r['gpu'] for r in report['recordings']))}, not measured in this run: trials "
        f"(and replayed wall time, {report['cost_model']['jobs']} nvcc jobs, batches of {report['batch']}) until "
        f"a kernel within {pct} of the recording's best, mean over {report['repeats']} seeds (the model's ranking "
        f"has one order).",
        "",
        f"| recording | configs | best (µs) | strategy | trials to {pct} | replayed wall time |",
        "| --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for rec in report["recordings"]:
        head = (f"{rec['name']}", f"{rec['candidates']}",
                "-" if rec["best_us"] is None else f"{rec['best_us']:.1f}")
        rows = [(name, s["trials_mean"], s["wall_s_mean"]) for name, s in rec["strategies"].items()]
        rows.append(("exhaustive", rec["exhaustive"]["trials"], rec["exhaustive"]["wall_s"]))
        for i, (name, trials, wall) in enumerate(rows):
            cells = head if i == 0 else ("", "", "")
            shown = "-" if trials is None else (f"{trials:.1f}" if isinstance(trials, float) else str(trials))
            lines.append(f"| {' | '.join(cells)} | {name} | {shown} | {_duration(wall)} |")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], out: Path) -> Path:

    persist.write_json(Path(out), report)
    return Path(out)


def default_report_path(root: Path | None = None) -> Path:
    from cutsearch.workspace import Workspace

    return Workspace(root).root / "results" / f"efficiency-{datetime.date.today().isoformat()}.json"
