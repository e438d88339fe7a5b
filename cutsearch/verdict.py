"""The verdict: which kernel a study ships, and the cuBLAS time it is judged against.

A study's trials are each one draw of noise, and its fastest trial is the draw that favoured the
kernel most. A race (search._run_race) times the contenders and cuBLAS again, interleaved; where
an undisturbed one stands for the study's current contenders it decides, else the trials do. Only
reads: the search, the export, `show` and the report all judge through `judge`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Iterable, Sequence

import optuna

from cutsearch.space import Config

# The race's contenders: the fastest configs, up to RACE_SIZE, within RACE_WITHIN of the best.
RACE_SIZE = 4
RACE_WITHIN = 1.25
# A call whose slowest round took this many times its fastest was disturbed (another process on
# the GPU or its host). The recorded races spread at most 1.40x, a 1.7 ms kernel in a hot round,
# most under 1.15x (tests/test_race.py reads them all); timings on a disturbed GPU, 7.5x and more.
DISTURBED = 2.0
# A race whose median for a call strays this far from the call's trials, in the kernels' favour
# (cuBLAS slower, a kernel faster), was disturbed too, though each round agreed: the recorded
# races' medians lie within 0.91-1.12x of their trials'. On an H200 (2026-12-06) F.linear with
# SiLU took 18.4 µs in a race, rounds 9.8-19.6 µs, against a median of 9.8 µs in its trials and
# 9.3 µs from a fresh process; the kernels held their times. A stray the other way stands: the
# race then claims less than its trials would, and the trials are what a disturbed race leaves.
ASTRAY = 1.25


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    number: int
    config: Config
    median_us: float | None
    cublas_us: float | None
    failure_kind: str | None
    evaluation: dict[str, Any]

    @property
    def speedup(self) -> float | None:
        return self.cublas_us / self.median_us if self.median_us and self.cublas_us else None

    @property
    def empty_kernel_us(self) -> float | None:
        """An empty kernel, timed beside cuBLAS (see worker._floors)."""
        floors = ((self.evaluation.get("measurement") or {}).get("floors") or {})
        return floors["empty kernel"]["median_us"] if "empty kernel" in floors else None

    @classmethod
    def from_trial(cls, trial: optuna.trial.FrozenTrial) -> TrialRecord | None:
        ev = trial.user_attrs.get("evaluation")
        if ev is None:
            return None
        meas = ev.get("measurement")
        failure = trial.user_attrs.get("failure") or ev.get("failure")
        return cls(number=trial.number, config=Config.from_dict(ev["config"]),
                   median_us=meas["timing"]["median_us"] if meas else None,
                   cublas_us=(meas.get("baseline") or {}).get("median_us") if meas else None,
                   failure_kind=failure["kind"] if failure and not meas else None, evaluation=ev)


def cublas_runs(measured: Iterable[TrialRecord]) -> list[float]:
    """The study's own cuBLAS timings, one for each measured trial (a replayed trial repeats one,
    so it is left out)."""
    return [r.cublas_us for r in measured if r.cublas_us and not r.evaluation.get("replayed_from_study")]


def verdict_cublas_us(best: TrialRecord | None, measured: Iterable[TrialRecord]) -> float | None:
    """The cuBLAS time the best kernel is judged against: the lower of the timing taken beside it
    and the median of the study's cuBLAS timings (replayed trials repeat one, so they are left out).

    The best trial is the one whose draw of noise favoured the kernel most, against one draw of
    cuBLAS. Recorded on an H200: 8x382x6301 f16 won by 1.015x against the timing beside it, while
    the median of the study's 32 was 0.7 µs lower, and its export ran 0.92x F.linear.
    """
    if best is None or best.cublas_us is None:
        return None
    runs = cublas_runs(measured)
    return min(best.cublas_us, statistics.median(runs)) if runs else best.cublas_us


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    """The kernel that ships if it beats cuBLAS, and the cuBLAS time that decides it.

    `best` carries its times as judged: from the race where one stands, else its own trial's.
    `raced_us` holds the race's median of each raced trial that passed its check there (None:
    no race stands), and `rounds_won` the race's rounds in which it was faster than cuBLAS.
    `fallback_us` is the race's median of the export's cuBLAS fallback, where that library fuses
    the activation and raced. `disturbed` says why the study's race does not decide, where one
    ran for its contenders and was disturbed (see disturbance).
    """

    best: TrialRecord | None
    cublas_us: float | None
    basis: str
    raced_us: dict[int, float] | None = None
    rounds_won: dict[int, int] | None = None
    rounds: int | None = None
    fallback_us: float | None = None
    disturbed: str | None = None

    @property
    def speedup(self) -> float | None:
        """The best kernel's."""
        best = self.best
        return self.cublas_us / best.median_us if best and best.median_us and self.cublas_us else None

    @property
    def tie(self) -> str | None:
        """Why the best kernel does not ship though its median beat cuBLAS's, if so (see tie)."""
        won = self.rounds_won.get(self.best.number) if self.rounds_won is not None and self.best else None
        return tie(self.speedup, won, self.rounds)

    @property
    def kernel_ships(self) -> bool:
        """Whether an export ships the best kernel rather than a cuBLAS fallback."""
        return self.speedup is not None and self.speedup >= 1.0 and self.tie is None and not self.fallback_wins

    @property
    def fallback_wins(self) -> bool:
        return fallback_wins(self.best.median_us if self.best else None, self.cublas_us, self.fallback_us)


def tie(speedup: float | None, won: int | None, rounds: int | None) -> str | None:
    """A kernel faster than cuBLAS by the race's median, but not in every round: a tie, not a win.

    On the H200, 2792x64x256 won 3 of 5 rounds, 1.05x by the median, and its export ran at 0.96x
    from a fresh process; of 18 recorded races, every kernel that won all 5 rounds ran at 1.02x or
    more from a fresh process (studies/recorded/local-2026-12-02-race-rule/)."""
    if speedup is None or speedup < 1.0 or won is None or won == rounds:
        return None
    return f"{speedup:.2f}x cuBLAS by the race's median, but faster in only {won} of its {rounds} rounds: a tie"


def unsteady(label: str, rounds: Sequence[float]) -> str | None:
    """Why a call's round medians show a disturbed GPU, if they do (see DISTURBED)."""
    lo, hi = min(rounds, default=0.0), max(rounds, default=0.0)
    if lo <= 0 or hi < DISTURBED * lo:
        return None
    return f"{label}'s rounds took {lo:.1f}-{hi:.1f} µs, {hi / lo:.1f}x apart"


def astray(label: str, rounds: Sequence[float], trials_us: float | None, *, slower: bool) -> str | None:
    """Why a call's race median cannot stand beside its trials' median, if it cannot: it took
    over ASTRAY times as long (`slower`, cuBLAS), or under 1/ASTRAY times (a kernel)."""
    if not rounds or not trials_us:
        return None
    raced = statistics.median(rounds)
    ratio = raced / trials_us
    if (ratio <= ASTRAY) if slower else (ratio >= 1 / ASTRAY):
        return None
    return f"{label} took {raced:.1f} µs in the race, {ratio:.2f}x its {trials_us:.1f} µs in the trials"


def disturbance(race: dict[str, Any], measured: Iterable[TrialRecord] = ()) -> str | None:
    """Why a race's timings cannot be trusted, if they cannot: its most unsteady call, else the
    call that strayed furthest from its own trials in the kernels' favour (cuBLAS: against the
    median of the study's timings)."""
    calls = [("cuBLAS", race["cublas_us"]), ("the fallback", race.get("fallback_us") or ()),
             *((f"trial {n}", us or ()) for n, us in zip(race["trials"], race["kernel_us"]))]
    notes = [(max(us) / min(us), note) for label, us in calls if us and (note := unsteady(label, us))]
    if notes:
        return max(notes)[1]
    measured = list(measured)
    runs = cublas_runs(measured)
    by_number = {r.number: r.median_us for r in measured}
    against = [("cuBLAS", race["cublas_us"], statistics.median(runs) if runs else None, True),
               *((f"trial {n}", us, by_number.get(n), False) for n, us in zip(race["trials"], race["kernel_us"]))]
    strays = [(abs(math.log(statistics.median(us) / then)), note) for label, us, then, slower in against
              if (note := astray(label, us or (), then, slower=slower))]
    return max(strays)[1] if strays else None


def fallback_wins(kernel_us: float | None, cublas_us: float | None, fallback_us: float | None) -> bool:
    """Whether the fallback's library, its cuBLASLt call fusing the activation, beat both the best
    kernel and F.linear in the race: the export then ships it."""
    return (fallback_us is not None and cublas_us is not None and fallback_us < cublas_us
            and (kernel_us is None or fallback_us < kernel_us))


def contenders(measured: Iterable[TrialRecord], size: int = RACE_SIZE, within: float = RACE_WITHIN,
               ) -> list[TrialRecord]:
    """What the race times again: the first trial of each of the `size` fastest configs, those
    within `within` times the fastest."""
    ranked: list[TrialRecord] = []
    for r in sorted((r for r in measured if r.median_us), key=lambda r: (r.median_us, r.number)):
        if ranked and r.median_us > within * ranked[0].median_us or len(ranked) == size:
            break
        if all(r.config.key != c.config.key for c in ranked):
            ranked.append(r)
    return ranked


def judge(measured: list[TrialRecord], race: dict[str, Any] | None) -> Verdict:
    """The study's verdict: by its race where the race timed the study's contenders and was not
    disturbed, else by the trials (the fastest, against verdict_cublas_us)."""
    if race and [c.number for c in contenders(measured)] != race.get("trials"):
        race = None  # trials told since the race changed the contenders
    disturbed = disturbance(race, measured) if race else None
    if race and not disturbed:
        return _race_verdict(measured, race)
    fastest = min((r for r in measured if r.median_us), key=lambda r: (r.median_us, r.number), default=None)
    basis = "the lower of the run beside the best and the median of the study's runs"
    return Verdict(best=fastest, cublas_us=verdict_cublas_us(fastest, measured), disturbed=disturbed,
                   basis=basis + (f" (the race was disturbed: {disturbed})" if disturbed else ""))


def _race_verdict(measured: list[TrialRecord], race: dict[str, Any]) -> Verdict:
    by_number = {r.number: r for r in measured}
    raced = {n: statistics.median(us) for n, us in zip(race["trials"], race["kernel_us"]) if us}
    cublas_us = statistics.median(race["cublas_us"])
    fallback_us = statistics.median(race["fallback_us"]) if race.get("fallback_us") else None
    rounds = f"{len(race['cublas_us'])} interleaved rounds"
    also = " and the fallback's fused cuBLASLt" if fallback_us is not None else ""
    if not raced:
        return Verdict(best=None, cublas_us=cublas_us, raced_us={}, fallback_us=fallback_us,
                       basis=f"every contender failed its check in the race{also}")
    won = {n: sum(k < c for k, c in zip(us, race["cublas_us"]))
           for n, us in zip(race["trials"], race["kernel_us"]) if us}
    # The fastest of those faster than cuBLAS in every round, if any is.
    steady = [n for n in raced if won[n] == len(race["cublas_us"])]
    number = min(steady or raced, key=lambda n: (raced[n], n))
    best = dataclasses.replace(by_number[number], median_us=raced[number], cublas_us=cublas_us)
    return Verdict(best=best, cublas_us=cublas_us, raced_us=raced, rounds_won=won, rounds=len(race["cublas_us"]),
                   fallback_us=fallback_us, basis=f"a race of {len(race['trials'])} kernels{also} and cuBLAS, {rounds}")


def records(study: optuna.Study) -> list[TrialRecord]:
    return [r for t in study.get_trials(deepcopy=False) if (r := TrialRecord.from_trial(t)) is not None]
