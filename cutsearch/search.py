"""The search: Optuna ask/tell over the space, a batch at a time.

A batch is asked together so that it compiles in parallel while the GPU measures what is
built. The sampler only proposes, the storage only persists, the evaluator only evaluates:
this module orchestrates them. The study's trials are the record; nothing else is needed to
resume a killed run.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from cutsearch import model, storage as storage_mod
from cutsearch.compiler import usable_cpus
from cutsearch.errors import StudyTaken, UserError
from cutsearch.evaluator import Evaluation, Evaluator, Events, emit
from cutsearch.outcome import Failure, Measurement
from cutsearch.problem import Layer
from cutsearch.space import GEMV_PARAM, Config, Knobs, Space, invalid_reason
from cutsearch.verdict import TrialRecord, Verdict, contenders, disturbance, judge, records, verdict_cublas_us

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "random", "model")
# Trials asked per nvcc process: two kernels a translation unit build about 1.6 times faster
# than alone, and in replays of the recorded asr_out search (studies/results/efficiency-*-batch*.json)
# the default strategy reached 2% of the best in 107 s instead of 163 s; decode was unchanged.
BATCH_PER_JOB = 2
MAX_ASKS_PER_SLOT = 200  # proposals tried per batch slot before the space counts as exhausted
# The race at the end of a search: its contenders (verdict.contenders) and cuBLAS, timed again
# in RACE_ROUNDS interleaved rounds.
RACE_ROUNDS = 5
RACE_ATTEMPTS = 3  # races run where each one before was disturbed (verdict.DISTURBED)
RETRIES = 2  # times a config that killed runs left unfinished is queued again (_requeue)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchResult:
    study_name: str
    layer: Layer
    verdict: Verdict
    trials: int
    new_trials: int
    new_compiles: int
    failures: dict[str, int]
    wall_s: float
    source: str  # "measured", "recorded" or "predicted"
    batch: int = 0  # trials asked at a time: with the seed, what makes a run repeatable
    unserved: str | None = None  # why no config of the space can compute the layer
    gpu: str | None = None  # the GPU model the study measures on, where one does

    @property
    def best(self) -> TrialRecord | None:
        """The best kernel, its times as judged (Verdict.best)."""
        return self.verdict.best

    @property
    def cublas_us(self) -> float | None:
        """What decides between the kernel and cuBLAS."""
        return self.verdict.cublas_us

    @property
    def speedup(self) -> float | None:
        return self.verdict.speedup


def distributions(space: Space) -> dict[str, CategoricalDistribution]:
    return {name: CategoricalDistribution(list(choices)) for name, choices in space.dimensions().items()}


def check_sampler(name: str) -> None:
    if name not in SAMPLERS:
        raise UserError(f"unknown sampler {name!r}: choose one of {', '.join(SAMPLERS)}")


def make_sampler(name: str, *, seed: int, batch: int, trials: int, grouped: bool = False) -> optuna.samplers.BaseSampler:
    """`grouped`: the study also holds gemv trials, whose one parameter is none of the CUTLASS
    dimensions; TPE then models the CUTLASS trials' dimensions jointly among themselves (group)."""
    check_sampler(name)
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # `group`
            # constant_liar keeps the members of one batch apart while their results are pending.
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True, group=grouped,
                                              n_startup_trials=max(batch, min(16, trials // 4)))
    return optuna.samplers.RandomSampler(seed=seed)  # "model" orders its own trials


def open_study(layer: Layer, *, study_name: str, storage: optuna.storages.BaseStorage,
               sampler: optuna.samplers.BaseSampler, source: str | None = None,
               device_name: str | None = None) -> optuna.Study:
    """Create the study, or resume it for the same layer and, given `source`, the same kind of
    evaluator: measured, recorded and predicted times are never ranked together. Given
    `device_name`, also on the same GPU model: a study's first GPU names it, and hosts with
    another GPU cannot join (their times would be ranked with its)."""
    study = optuna.create_study(study_name=study_name, storage=storage, sampler=sampler,
                                direction="minimize", load_if_exists=True)
    recorded = study.user_attrs.get("layer")
    if recorded is None:
        if study.get_trials(deepcopy=False):
            raise StudyTaken(f"study {study_name!r} was not made by cutsearch")
        study.set_user_attr("layer", layer.to_dict())
        study.set_user_attr("floor_us", layer.floor_us)
    elif recorded != layer.to_dict():
        raise StudyTaken(f"study {study_name!r} holds layer {recorded}, not {layer.to_dict()}")
    if source is not None:
        held = {t.user_attrs["source"] for t in study.get_trials(deepcopy=False) if "source" in t.user_attrs}
        if held - {source}:
            raise StudyTaken(f"study {study_name!r} holds {' and '.join(sorted(held))} times, and this run's would "
                             f"be {source}")
    if device_name is not None:
        with storage_mod.budget_lock(study):  # two hosts starting together must not both claim it
            measured_on = study.user_attrs.get("gpu")
            if measured_on is None:
                study.set_user_attr("gpu", device_name)
            elif measured_on != device_name:
                raise StudyTaken(f"study {study_name!r} is measured on {measured_on}, and this GPU is {device_name}: "
                                 "times of different GPUs are never ranked together",
                                 "give this GPU a study of its own (another --study, or another --studies-dir)")
    return study


def _hopeless(study: optuna.Study, layer: Layer, space: Space) -> set[str]:
    """The model's hopeless tail, less the configs enqueued on purpose (warm start, priors)."""
    enqueued = {Space.config_from_params(t.system_attrs["fixed_params"]).key
                for t in study.get_trials(deepcopy=False)
                if t.state == TrialState.WAITING and "fixed_params" in t.system_attrs}
    return model.hopeless(layer, list(space)) - enqueued


def _recorded_space(study: optuna.Study, space: Space) -> Space:
    """A resumed study keeps the choices it was made with: Optuna refuses changed choices, and
    a newer cutsearch may offer more (a new epilogue schedule, say, or padding where split-K
    copies x to its pitch)."""
    fields = {"tile_m": "tile_m", "tile_n": "tile_n", "tile_k": "tile_k", "cluster": "clusters",
              "schedule": "schedules", "stages": "stages", "swap_ab": "swap_ab", "pad": "pad",
              "split_k": "split_k"}
    kept: dict[str, tuple] = {}
    for trial in study.get_trials(deepcopy=False):
        for name, field in fields.items():
            if name in trial.distributions and field not in kept:
                choices = tuple(trial.distributions[name].choices)
                if name == "cluster":
                    choices = tuple(tuple(int(v) for v in str(c).split("x")) for c in choices)
                kept[field] = choices
        if len(kept) == len(fields):
            break
    return dataclasses.replace(space, **kept)


def _started(study: optuna.Study) -> bool:
    """Whether any trial of the study was asked for (queued ones were not)."""
    return any(t.state != TrialState.WAITING for t in study.get_trials(deepcopy=False))


def gemv_distribution(study: optuna.Study, space: Space) -> CategoricalDistribution | None:
    """The gemv trials' parameter: as the study recorded it (Optuna refuses changed choices),
    else the space's gemv configs; None where there are none."""
    for trial in study.get_trials(deepcopy=False):
        if GEMV_PARAM in trial.distributions:
            return trial.distributions[GEMV_PARAM]
    choices = [Space.params_from_config(c)[GEMV_PARAM] for c in space.gemv_configs()]
    return CategoricalDistribution(choices) if choices else None


def enqueue_gemv(study: optuna.Study, space: Space, dist: CategoricalDistribution | None) -> int:
    """Queue each of the space's gemv configs that the study has not queued or run: a few, each
    built in seconds, so each is measured once rather than sampled."""
    params = [p for c in space.gemv_configs() if dist and (p := Space.params_from_config(c))[GEMV_PARAM] in dist.choices]
    with storage_mod.budget_lock(study):  # workers starting together queue each config once
        for p in params:
            study.enqueue_trial(p, skip_if_exists=True)
    return len(params)


def warm_start(study: optuna.Study, layer: Layer, space: Space, count: int,
               priors: tuple[Config, ...] = ()) -> int:
    """Enqueue `count` configs into a new study: valid priors first, then the model's picks."""
    if count <= 0 or _started(study):
        return 0
    top = first_configs(layer, space, count, priors)
    for config in top:
        study.enqueue_trial(Space.params_from_config(config), skip_if_exists=True)
    return len(top)


def first_configs(layer: Layer, space: Space, count: int, priors: tuple[Config, ...] = ()) -> list[Config]:
    """What a new study builds first: up to half from priors, each followed by its grid and direct
    twins, the rest from the model."""
    adapted = [_adapt(layer, space, p) for p in priors]
    followed = (t for a in adapted if a is not None
                for t in (a, _grid_twin(layer, space, a), _direct_twin(layer, space, a)))
    top = [c for c in dict.fromkeys(followed) if c is not None][: count // 2]
    return top + [c for c in model.warm_start(layer, list(space), count) if c not in top][: count - len(top)]


def _grid_twin(layer: Layer, space: Space, config: Config) -> Config | None:
    """The same tile on the ws schedule, a grid of all the tiles, where this space offers it. A
    winner found before that schedule existed is a persistent kernel; on one wave of tiles each of
    12 measured twins was faster."""
    twin = dataclasses.replace(config, kernel_schedule="ws", tile_scheduler="grid")
    return twin if not config.split_k and _offered(layer, space, twin) else None


def _direct_twin(layer: Layer, space: Space, config: Config) -> Config | None:
    """The same kernel with the direct epilogue in place of the nosmem one, where this space
    offers it. A winner found before that epilogue existed stores with nosmem; each of 8 measured
    twins was faster (studies/recorded/h200-2026-12-01-direct/)."""
    twin = dataclasses.replace(config, epilogue_schedule="direct")
    return twin if config.epilogue_schedule == "nosmem" and _offered(layer, space, twin) else None


def _offered(layer: Layer, space: Space, config: Config) -> bool:
    """Whether `config` is valid for `layer` and a choice of every dimension of `space`."""
    if config.gemv:
        return config in space.gemv_configs()
    params = Space.params_from_config(config)
    dims = space.dimensions()
    return invalid_reason(layer, config) is None and all(params[d] in dims[d] for d in dims)


def _adapt(layer: Layer, space: Space, config: Config) -> Config | None:
    """`config`, or its nearest valid form for this layer and space (an explicit schedule, the
    builder's stages, no split-K, say)."""
    dims = space.dimensions()
    if config.stages not in dims["stages"]:
        config = dataclasses.replace(config, stages=dims["stages"][0])
    if config.split_k not in dims["split_k"]:
        config = dataclasses.replace(config, split_k=False)
    # A grid of all the tiles is the ws schedule's alone: the others take the persistent scheduler.
    scheduler = "persistent" if config.tile_scheduler == "grid" else config.tile_scheduler
    for candidate in (config, dataclasses.replace(config, kernel_schedule="pingpong", epilogue_schedule="tma",
                                                  tile_scheduler=scheduler),
                      dataclasses.replace(config, kernel_schedule="cooperative", epilogue_schedule="tma",
                                          tile_scheduler=scheduler)):
        # A prior from a wider space (a cluster of four, say) is no choice of this one.
        if _offered(layer, space, candidate):
            return candidate
    return None


@dataclasses.dataclass(kw_only=True)
class _Run:
    """This process's part of a study: the settled configs it has learned of (told here or by
    any other worker), its best trial, and the trials it holds while they are built and measured."""
    study: optuna.Study
    layer: Layer
    evaluator: Evaluator
    events: Events | None
    on_best: Callable[[TrialRecord, float | None], None] | None
    artifacts: Any
    gemv: CategoricalDistribution | None = None  # the gemv trials' parameter (gemv_distribution)
    known: dict[str, Evaluation] = dataclasses.field(default_factory=dict)
    learned: set[int] = dataclasses.field(default_factory=set)  # trial ids already read into `known`
    best: TrialRecord | None = None
    new_trials: int = 0
    new_compiles: int = 0

    def learn(self, trials: list[optuna.trial.FrozenTrial]) -> None:
        """Add the settled configs among `trials` (those not read before) to `known`."""
        for t in trials:
            if t.state not in (TrialState.COMPLETE, TrialState.FAIL) or t._trial_id in self.learned:
                continue
            self.learned.add(t._trial_id)
            ev = t.user_attrs.get("evaluation")
            if ev is not None and _counts(t):
                self.known[Config.from_dict(ev["config"]).key] = Evaluation.from_dict(ev)

    def announce_standing(self) -> None:
        """Tell of the best that a resumed study, or a worker joining one, starts from."""
        if self.best is None:
            return
        standing = judge(records(self.study), self.study.user_attrs.get("race"))
        if standing.best is None:
            return
        emit(self.events, "best", median_us=standing.best.median_us, cublas_us=standing.cublas_us,
              config=standing.best.config.key)
        if self.on_best is not None:  # a killed run may have told its best and died before persisting it
            self.on_best(standing.best, standing.cublas_us)

    def run_trials(self, *, trials: int, timeout_s: float | None, start: float, batch: int,
                   dists: dict[str, CategoricalDistribution], hopeless: set[str]) -> None:
        """Ask, build and measure batches until the study holds `trials` evaluated trials (told by
        any worker), `timeout_s` has passed since `start`, or the sampler proposes nothing new."""
        stalled = 0
        hopeless = set(hopeless)
        with storage_mod.Heartbeat(self.study) as heartbeat:
            while True:
                reaped = storage_mod.reap_stale(self.study)  # trials of runs that died, here or elsewhere
                requeued = _requeue(self.study)
                hopeless -= set(requeued)  # chosen once already: the model's tail must not refuse them now
                if reaped or requeued:
                    emit(self.events, "reaped", trials=reaped, requeued=requeued)
                done = _evaluated(self.study)
                remaining = trials - done
                if remaining <= 0:
                    break
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    emit(self.events, "timeout", elapsed_s=time.monotonic() - start, limit_s=timeout_s)
                    break
                emit(self.events, "batch", size=min(batch, remaining), done=done, total=trials)
                fresh, taken, claimed = self.ask(heartbeat, dists, hopeless, budget=trials, size=min(batch, remaining),
                                                 max_asks=MAX_ASKS_PER_SLOT * batch)
                if claimed and not fresh:
                    break  # the rest of the budget is in flight, in this run or in another worker
                stalled = stalled + 1 if not fresh else 0
                if stalled >= 3 or taken == 0:
                    emit(self.events, "exhausted", done=done)
                    break
                self.measure(heartbeat, fresh)

    def ask(self, heartbeat: storage_mod.Heartbeat, dists: dict[str, CategoricalDistribution], hopeless: set[str],
            *, budget: int, size: int, max_asks: int) -> tuple[dict[str, list[optuna.Trial]], int, bool]:
        """Fill a batch of `size` with configs worth building: the new configs' trials by key, the
        slots taken, and whether the whole budget is told or in flight.

        Proposals that break a space rule are recorded with their reason but cost no budget;
        known configs replay their result. Every ask happens under the study's budget lock, after
        counting the trials told and in flight in every process: workers sharing the study stop
        exactly at `budget`."""
        study = self.study
        fresh: dict[str, list[optuna.Trial]] = collections.defaultdict(list)
        taken = asks = 0
        while taken < size and asks < max_asks:
            with storage_mod.budget_lock(study):
                snapshot = study.get_trials(deepcopy=False)
                running = [t for t in snapshot if t.state == TrialState.RUNNING]
                if sum(map(_counts, snapshot)) + len(running) >= budget:
                    return fresh, taken, True
                self.learn(snapshot)  # what other workers told meanwhile
                trial = self._ask(snapshot, dists)
                asks += 1
                heartbeat.claim(trial)
                config = Space.config_from_params(trial.params)
                reason = self._refusal(config, hopeless, running, fresh)
                if reason is not None:
                    _tell(study, trial, _invalid(config, reason, self.evaluator.source), rule_invalid=True)
                    heartbeat.release(trial)
                    continue
                taken += 1
                if config.key in self.known:
                    known = self.known[config.key]
                    _tell(study, trial, known, replayed=True)
                    heartbeat.release(trial)
                    emit(self.events, "trial", number=trial.number, config=config.key, replayed=True,
                          median_us=getattr(known.outcome, "median_us", None), failure=None)
                else:
                    fresh[config.key].append(trial)
        return fresh, taken, False

    def _ask(self, snapshot: list[optuna.trial.FrozenTrial], dists: dict[str, CategoricalDistribution]) -> optuna.Trial:
        """The next trial: the first queued one, else a new one, with its parameters suggested. A
        queued gemv trial takes its one parameter, not the CUTLASS dimensions."""
        trial = self.study.ask()
        fixed = next((t.system_attrs.get("fixed_params", {}) for t in snapshot if t.number == trial.number), {})
        if GEMV_PARAM in fixed and self.gemv is not None:
            trial.suggest_categorical(GEMV_PARAM, self.gemv.choices)
        else:
            for name, dist in dists.items():
                trial.suggest_categorical(name, dist.choices)
        return trial

    def _refusal(self, config: Config, hopeless: set[str], running: list[optuna.trial.FrozenTrial],
                 fresh: dict[str, list[optuna.Trial]]) -> str | None:
        """Why a proposal is not worth a slot: a space rule, the model's hopeless tail, or another
        run evaluating it now."""
        if (reason := invalid_reason(self.layer, config)) is not None:
            return reason
        if config.key in self.known:
            return None  # replayed, at no cost
        if config.key in hopeless:
            return f"pruned: the cost model predicts {model.PRUNE_RATIO:g}x its best or slower"
        if config.key not in fresh and (elsewhere := _in_flight(running, config.key)) is not None:
            return f"trial {elsewhere} of another run is evaluating this config"
        return None

    def measure(self, heartbeat: storage_mod.Heartbeat, fresh: dict[str, list[optuna.Trial]]) -> None:
        """Build and measure the batch's new configs, and tell each of their trials."""
        study = self.study
        configs = [Space.config_from_params(ts[0].params) for ts in fresh.values()]
        for ev in self.evaluator.evaluate(self.layer, configs, self.events):
            self.known[ev.config.key] = ev
            self.new_compiles += int(ev.kernel_key is not None and not ev.cached)
            for copy, trial in enumerate(fresh.pop(ev.config.key, [])):
                if self.artifacts is not None:
                    _upload_logs(self.artifacts, study, trial, ev)
                # A config asked twice in one batch is measured once: the second trial repeats it.
                _tell(study, trial, ev, replayed=copy > 0)
                heartbeat.release(trial)
                self.new_trials += copy == 0
                if isinstance(ev.outcome, Measurement):
                    self._consider(trial, ev.outcome)
                emit(self.events, "trial", number=trial.number, config=ev.config.key,
                      median_us=getattr(ev.outcome, "median_us", None),
                      failure=None if isinstance(ev.outcome, Measurement) else ev.outcome.kind.value,
                      best_us=self.best.median_us if self.best else None)
        for trials_left in fresh.values():  # an evaluator that skipped a config must not strand trials
            for trial in trials_left:
                study.tell(trial, state=TrialState.FAIL)
                heartbeat.release(trial)

    def _consider(self, trial: optuna.Trial, measurement: Measurement) -> None:
        """Take a measured trial as the best if it is faster, and tell of it."""
        # Equal medians (timings come in steps) go to the earlier trial, as in _best.
        if self.best is not None and (measurement.median_us, trial.number) >= (self.best.median_us, self.best.number):
            return
        self.best = TrialRecord.from_trial(self.study._storage.get_trial(trial._trial_id))
        cublas_us = verdict_cublas_us(self.best, records(self.study))
        emit(self.events, "best", median_us=self.best.median_us, cublas_us=cublas_us, config=self.best.config.key)
        if self.on_best is not None:
            self.on_best(self.best, cublas_us)


def search(layer: Layer, *, evaluator: Evaluator, storage: optuna.storages.BaseStorage, study_name: str,
           trials: int = 64, timeout_s: float | None = None, batch: int | None = None, sampler: str = "tpe",
           seed: int = 0, warm: int | None = None, space: Space | None = None, events: Events | None = None,
           on_best: Callable[[TrialRecord, float | None], None] | None = None,
           artifacts: Any = None, priors: tuple[Config, ...] = (), prune: bool = True,
           race_rounds: int = RACE_ROUNDS, device_name: str | None = None) -> SearchResult:
    """Run the study up to `trials` evaluated trials (resuming it), or until `timeout_s`.

    `on_best(best, cublas_us)` hears of each new best, with the cuBLAS time it is judged against.
    `artifacts` (an Optuna artifact store) receives each built trial's logs before it is told.
    `prune` (TPE only) refuses the proposals the cost model rates hopeless (`model.hopeless`)
    before they are built, as it refuses rule-breaking ones: the other samplers are baselines.
    At the end, an evaluator that can race times the contenders and cuBLAS again in
    `race_rounds` interleaved rounds (0: no race), and the race decides the verdict.
    `device_name` is the GPU the evaluator measures on (see `open_study`).
    A layer that no config of the space can compute is not searched: the result says why.
    """
    if trials <= 0:
        raise UserError(f"--trials must be positive, got {trials}")
    start = time.monotonic()
    space = space or Space(layer)
    batch = max(1, batch or usable_cpus())
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    grouped = bool(space.gemv_configs())
    study = open_study(layer, study_name=study_name, storage=storage, source=evaluator.source, device_name=device_name,
                       sampler=make_sampler(sampler, seed=seed, batch=batch, trials=trials, grouped=grouped))
    space = _recorded_space(study, space)
    run = _Run(study=study, layer=layer, evaluator=evaluator, events=events, on_best=on_best, artifacts=artifacts,
               best=_best(study), gemv=gemv_distribution(study, space))
    unserved = space.unserved()
    if unserved is not None:  # nothing to build: the verdict ships cuBLAS, and says why
        study.set_user_attr("unserved", unserved)
        emit(events, "unserved", reason=unserved)
    else:
        enqueue_gemv(study, space, run.gemv)
        if sampler == "model":
            _enqueue_model_order(study, layer, space, trials)
        else:
            warm_start(study, layer, space, batch if warm is None else warm, priors)
        run.learn(study.get_trials(deepcopy=False))
        run.announce_standing()
        run.run_trials(trials=trials, timeout_s=timeout_s, start=start, batch=batch, dists=distributions(space),
                       hopeless=_hopeless(study, layer, space) if prune and sampler == "tpe" else set())
        if race_rounds > 0 and hasattr(evaluator, "race"):
            _run_race(study, layer, evaluator, race_rounds, events)
    finished = [t for t in study.get_trials(deepcopy=False) if _counts(t)]
    failures = collections.Counter(
        (t.user_attrs.get("failure") or {}).get("kind", "unknown") for t in finished if t.state == TrialState.FAIL)
    return SearchResult(study_name=study_name, layer=layer, verdict=judge(records(study), study.user_attrs.get("race")),
                        trials=len(finished), new_trials=run.new_trials, new_compiles=run.new_compiles,
                        failures=dict(failures), wall_s=time.monotonic() - start, source=evaluator.source,
                        batch=batch, unserved=unserved,
                        gpu=study.user_attrs.get("gpu") or getattr(evaluator, "recorded_gpu", None))


def _run_race(study: optuna.Study, layer: Layer, evaluator: Any, rounds: int, events: Events | None) -> None:
    """Race the study's contenders, unless an undisturbed race of the same contenders stands; a
    disturbed race is run again, up to RACE_ATTEMPTS races in all."""
    measured = records(study)
    field = contenders(measured)
    standing = study.user_attrs.get("race")
    if not field or (standing and standing["trials"] == [c.number for c in field]
                     and not disturbance(standing, measured)):
        return
    for attempt in range(1, RACE_ATTEMPTS + 1):
        emit(events, "racing", kernels=len(field), rounds=rounds)
        outcome = evaluator.race(layer, [(c.config, Knobs(**c.evaluation["measurement"]["knobs"])) for c in field],
                                 rounds)
        if isinstance(outcome, Failure):
            # The trials' own verdict stands; a stale race of other contenders is ignored by judge().
            log.warning("the race of the top kernels failed (%s): judging by the trials", outcome.message)
            emit(events, "race failed", message=outcome.message)
            return
        race = {"trials": [c.number for c in field], "configs": [c.config.key for c in field],
                "kernel_us": [list(us) if us else None for us in outcome.kernel_us],
                "cublas_us": list(outcome.cublas_us), "errors": list(outcome.errors), "reps": outcome.reps,
                "fallback_us": list(outcome.fallback_us) if outcome.fallback_us else None}
        study.set_user_attr("race", race)  # kept even if disturbed: `show` says why it does not stand
        if not (disturbed := disturbance(race, measured)):
            break
        log.warning("the race was disturbed (%s)", disturbed)
        emit(events, "race disturbed", reason=disturbed, again=attempt < RACE_ATTEMPTS)
    verdict = judge(records(study), study.user_attrs["race"])
    emit(events, "raced", median_us=verdict.best.median_us if verdict.best else None, cublas_us=verdict.cublas_us,
          config=verdict.best.config.key if verdict.best else None, kernels=len(field), rounds=rounds,
          errors=[e for e in outcome.errors if e], fallback_us=verdict.fallback_us)


def _enqueue_model_order(study: optuna.Study, layer: Layer, space: Space, trials: int) -> None:
    """The 'model top-k' strategy: evaluate exactly the model's ranking, in order."""
    if not _started(study):
        for _, config in model.rank(layer, list(space))[:trials]:
            study.enqueue_trial(Space.params_from_config(config), skip_if_exists=True)


def _upload_logs(store: Any, study: optuna.Study, trial: optuna.Trial, ev: Evaluation) -> None:
    """The trial's compile log, ptxas report and failure log, as dashboard artifacts."""
    import json
    import tempfile

    from optuna.artifacts import upload_artifact

    files: dict[str, str] = {}
    if ev.ptxas is not None:
        files["ptxas.json"] = json.dumps(ev.ptxas, indent=1)
    if isinstance(ev.outcome, Failure) and ev.outcome.log:
        files[f"{ev.outcome.kind.value}.log"] = ev.outcome.log
    if ev.compile_log:
        files["nvcc.log"] = ev.compile_log
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            path = Path(tmp) / name
            path.write_text(text)
            try:
                upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial,
                                mimetype="text/plain", encoding="utf-8")
            except OSError as exc:  # logs are a convenience: never lose the trial over them
                log.warning("could not store artifact %s of trial %d: %s", name, trial.number, exc)


def _requeue(study: optuna.Study) -> list[str]:
    """Queue again the configs of interrupted trials (a killed run's, reaped, or a stopped run's)
    that nothing has evaluated, refused, queued or taken up since, and give their keys. The
    sampler learns nothing from a failed trial, so without this a run stopped mid-batch loses
    what it had chosen to build: a whole warm start, if stopped in the first. A config
    interrupted more than RETRIES times is left to the sampler."""
    if not any(_interrupted(t) for t in study.get_trials(deepcopy=False)):
        return []  # the common case, before every batch: no lock, no config parsed
    with storage_mod.budget_lock(study):  # two workers resuming at once queue each config once
        trials = study.get_trials(deepcopy=False)
        interrupted: dict[str, dict[str, Any]] = {}  # key -> the params to queue
        times: collections.Counter[str] = collections.Counter()
        handled = set()
        for t in trials:
            params = t.system_attrs.get("fixed_params", t.params)  # a queued trial may die before it samples
            key = _config_key(params)
            if key is None:
                continue
            if _interrupted(t):
                interrupted[key] = dict(params)
                times[key] += 1
            elif t.state in (TrialState.WAITING, TrialState.RUNNING) or _counts(t) or t.user_attrs.get("rule_invalid"):
                handled.add(key)
        requeued = [key for key in interrupted if key not in handled and times[key] <= RETRIES]
        for key in requeued:
            study.enqueue_trial(interrupted[key])
    return requeued


def _config_key(params: dict[str, Any]) -> str | None:
    """The key of the config a trial's params describe; None where it sampled none yet, or is
    not a cutsearch trial."""
    try:
        return Space.config_from_params(params).key
    except (KeyError, ValueError):
        return None


def _counts(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a finished trial used the budget: not a refused proposal, not a killed run's."""
    return trial.state.is_finished() and not trial.user_attrs.get("rule_invalid") and not _interrupted(trial)


def _interrupted(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a run stopped or killed before the trial finished (storage fails such trials)."""
    return (trial.user_attrs.get("failure") or {}).get("kind") == "interrupted"


def _evaluated(study: optuna.Study) -> int:
    """Finished trials that count toward the budget (see _counts)."""
    return sum(map(_counts, study.get_trials(deepcopy=False)))


def _in_flight(running: list[optuna.trial.FrozenTrial], key: str) -> int | None:
    """The number of a running trial (of any process) that evaluates config `key`."""
    return next((t.number for t in running if _config_key(t.params) == key), None)


def _invalid(config: Config, reason: str, source: str) -> Evaluation:
    from cutsearch.outcome import FailureKind

    return Evaluation(config=config, source=source, outcome=Failure(kind=FailureKind.INVALID, message=reason))


def _tell(study: optuna.Study, trial: optuna.Trial, ev: Evaluation, *, replayed: bool = False,
          rule_invalid: bool = False) -> None:
    record = ev.to_dict()
    if rule_invalid:
        trial.set_user_attr("rule_invalid", True)
    if replayed:
        record["replayed_from_study"] = True
    trial.set_user_attr("evaluation", record)
    trial.set_user_attr("config", ev.config.key)
    trial.set_user_attr("source", ev.source)
    if ev.compile_s is not None:
        trial.set_user_attr("compile_s", ev.compile_s)
    if isinstance(ev.outcome, Measurement):
        m = ev.outcome
        trial.set_user_attr("median_us", m.median_us)
        if m.baseline is not None:
            trial.set_user_attr("cublas_us", m.baseline.median_us)
            trial.set_user_attr("speedup", m.speedup)
        study.tell(trial, m.median_us)
    else:
        trial.set_user_attr("failure", ev.outcome.to_dict())
        # TPE ignores failed trials but ranks pruned ones last: rule-invalid proposals are told
        # as pruned so the sampler learns to leave that region, and cost no budget.
        study.tell(trial, state=TrialState.PRUNED if rule_invalid else TrialState.FAIL)


def _best(study: optuna.Study) -> TrialRecord | None:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    # The fastest; of equally fast trials the earliest, whatever order they were told in.
    return TrialRecord.from_trial(min(complete, key=lambda t: (t.value, t.number)))

