"""What evaluating one candidate yields: a Measurement or a typed Failure, each with its log."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from cutsearch.space import Knobs


class FailureKind(str, enum.Enum):
    INVALID = "invalid"            # rejected by a space rule or by the CUTLASS interface
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"  # can_implement, initialize or launch refused it
    WRONG_RESULT = "wrong_result"  # NaN, or relative error over the tolerance
    TIMEOUT = "timeout"            # a hang: the worker was killed and replaced
    CRASH = "crash"                # the worker died (illegal address poisons the context)
    DEFECT = "defect"              # built, but ptxas serialized wgmma or spilled registers
    INTERRUPTED = "interrupted"    # its process was killed; reaped on resume, may be retried


@dataclasses.dataclass(frozen=True, kw_only=True)
class Failure:
    kind: FailureKind
    message: str
    log: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "message": self.message, "log": self.log[-20000:]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Failure:
        return cls(kind=FailureKind(d["kind"]), message=d["message"], log=d.get("log", ""))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timing:
    """Cold-L2 CUDA-event timing of one call, in microseconds."""

    median_us: float
    p20_us: float
    p80_us: float
    reps: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timing:
        return cls(**{k: d[k] for k in ("median_us", "p20_us", "p80_us", "reps")})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """A correct candidate's best run-time variant, with every variant it tried."""

    timing: Timing
    knobs: Knobs
    rel_error: float
    variants: tuple[tuple[Knobs, float], ...] = ()  # (knobs, median_us) of the second level
    baseline: Timing | None = None                  # cuBLAS, same process, same inputs
    mm: Timing | None = None                        # torch.mm(x, W.t()), bias-free layers only
    # The best variant again with the caller handing over padded x ("x padded") or padded x and
    # y ("kernel only"): what the per-call copies cost. Only where the kernel pads.
    io_variants: tuple[tuple[str, Timing], ...] = ()
    # Beside the baseline: an empty kernel, the part of any call's time that no kernel avoids.
    floors: tuple[tuple[str, Timing], ...] = ()

    @property
    def median_us(self) -> float:
        return self.timing.median_us

    @property
    def speedup(self) -> float | None:
        return self.baseline.median_us / self.timing.median_us if self.baseline else None

    def to_dict(self) -> dict[str, Any]:
        return {"timing": self.timing.to_dict(), "knobs": self.knobs.to_dict(), "rel_error": self.rel_error,
                "variants": [[k.to_dict(), t] for k, t in self.variants],
                "baseline": self.baseline.to_dict() if self.baseline else None,
                "mm": self.mm.to_dict() if self.mm else None,
                **({"io_variants": {k: t.to_dict() for k, t in self.io_variants}} if self.io_variants else {}),
                **({"floors": {k: t.to_dict() for k, t in self.floors}} if self.floors else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        return cls(timing=Timing.from_dict(d["timing"]), knobs=Knobs(**d["knobs"]), rel_error=d["rel_error"],
                   variants=tuple((Knobs(**k), t) for k, t in d.get("variants", [])),
                   baseline=Timing.from_dict(d["baseline"]) if d.get("baseline") else None,
                   mm=Timing.from_dict(d["mm"]) if d.get("mm") else None,
                   io_variants=tuple((k, Timing.from_dict(t)) for k, t in d.get("io_variants", {}).items()),
                   floors=tuple((k, Timing.from_dict(t)) for k, t in d.get("floors", {}).items()))


Outcome = Measurement | Failure


@dataclasses.dataclass(frozen=True, kw_only=True)
class Race:
    """Contending kernels and cuBLAS timed again in interleaved rounds: one median per round.

    `kernel_us[i]` is None where contender i failed its correctness check (`errors[i]` says why).
    """

    kernel_us: tuple[tuple[float, ...] | None, ...]
    cublas_us: tuple[float, ...]
    errors: tuple[str | None, ...]
    reps: int
    # The export's cuBLAS fallback library, where it fuses the activation (Layer.fallback_fuses_activation).
    fallback_us: tuple[float, ...] | None = None
