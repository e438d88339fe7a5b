"""Evaluators turn a batch of configs into Evaluations. All three pass one contract test suite.

- GpuEvaluator: generate, compile in parallel, and measure on the GPU in a killable worker.
- ReplayEvaluator: answer from recorded evaluations (labelled as recorded, with their GPU).
- ModelEvaluator: answer from the analytic cost model (labelled as predictions).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

from cutsearch import model, persist
from cutsearch.outcome import Failure, FailureKind, Measurement, Outcome, Race, Timing
from cutsearch.problem import Layer
from cutsearch.space import Config, Knobs, kernel_problem, knob_grid

log = logging.getLogger(__name__)

# Seconds a measurement may take before the worker is presumed hung and killed.
MEASURE_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Evaluation:
    config: Config
    outcome: Outcome
    source: str                     # "measured", "recorded" or "predicted"
    compile_s: float | None = None
    cached: bool = False            # the kernel was already built
    kernel_key: str | None = None
    ptxas: dict[str, Any] | None = None
    compile_log: str | None = dataclasses.field(default=None, repr=False)  # kept as an artifact only

    def to_dict(self) -> dict[str, Any]:
        body = {"config": self.config.to_dict(), "source": self.source, "compile_s": self.compile_s,
                "cached": self.cached, "kernel_key": self.kernel_key, "ptxas": self.ptxas}
        if isinstance(self.outcome, Measurement):
            body["measurement"] = self.outcome.to_dict()
        else:
            body["failure"] = self.outcome.to_dict()
        return body

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None) -> Evaluation:
        outcome = Measurement.from_dict(d["measurement"]) if d.get("measurement") else Failure.from_dict(d["failure"])
        return cls(config=Config.from_dict(d["config"]), outcome=outcome, source=source or d.get("source", "measured"),
                   compile_s=d.get("compile_s"), cached=d.get("cached", False), kernel_key=d.get("kernel_key"),
                   ptxas=d.get("ptxas"))


Events = Callable[[str, dict[str, Any]], None]


class Evaluator(Protocol):
    source: str

    def evaluate(self, layer: Layer, configs: list[Config], events: Events | None = None) -> Iterator[Evaluation]:
        """Yield one Evaluation per config, in any order, as each is ready."""

    def close(self) -> None: ...


def emit(events: Events | None, name: str, **data: Any) -> None:
    """Tell `events` (a progress view, say) of `name`, if anyone listens."""
    if events is not None:
        events(name, data)


class GpuEvaluator:
    source = "measured"

    def __init__(self, *, cache_dir: Path, gpu: int = 0, jobs: int | None = None,
                 measure_timeout_s: float = MEASURE_TIMEOUT_S, worker=None, toolchain=None) -> None:
        from cutsearch.cache import Cache
        from cutsearch.codegen import cutlass_version
        from cutsearch.compiler import Compiler, Toolchain
        from cutsearch.pool import WorkerProcess

        self.toolchain = toolchain or Toolchain.find(cutlass_version())
        cache = Cache(cache_dir)
        cache.sweep_staging()
        self.compiler = Compiler(cache, self.toolchain, jobs=jobs)
        self.worker = worker or WorkerProcess(gpu)
        self.gpu = gpu
        self.measure_timeout_s = measure_timeout_s
        self._device = None

    def device(self):
        """The GPU's identity, asked of the worker (the parent never touches the GPU)."""
        if self._device is None:
            from cutsearch.errors import EnvironmentProblem
            from cutsearch.worker import DeviceInfoRequest

            reply = self.worker.call(DeviceInfoRequest(), timeout_s=180)
            if isinstance(reply, Failure):
                raise EnvironmentProblem(f"cannot use GPU {self.gpu}: {reply.message}")
            if reply.capability[0] != 9:
                raise EnvironmentProblem(f"GPU {self.gpu} is {reply.name} (sm_{reply.capability[0]}{reply.capability[1]}): "
                                         "cutsearch's kernels need a Hopper GPU (sm_90a: H100, H200)")
            self._device = reply
        return self._device

    def evaluate(self, layer: Layer, configs: list[Config], events: Events | None = None) -> Iterator[Evaluation]:
        from cutsearch import codegen
        from cutsearch.compiler import CompiledKernel
        from cutsearch.worker import MeasureRequest

        self.device()
        sources = []
        for i, config in enumerate(configs):
            try:
                sources.append((i, codegen.render(layer, config)))
            except codegen.CodegenError as exc:
                yield Evaluation(config=config, source=self.source,
                                 outcome=Failure(kind=FailureKind.INVALID, message=str(exc)[:300], log=str(exc)))
        emit(events, "compiling", count=len(sources))
        for i, built in self.compiler.compile_many(sources):
            config = configs[i]
            if isinstance(built, Failure):
                emit(events, "compiled", ok=False, cached=False)
                yield Evaluation(config=config, outcome=built, source=self.source)
                continue
            info = dict(compile_s=built.compile_s, cached=built.cached, kernel_key=built.key,
                        ptxas=built.ptxas.to_dict(), compile_log=built.log)
            emit(events, "compiled", ok=True, cached=built.cached)
            if built.ptxas.defect:
                yield Evaluation(config=config, source=self.source, **info,
                                 outcome=Failure(kind=FailureKind.DEFECT, message=built.ptxas.defect))
                continue
            kp = kernel_problem(layer, config)
            request = MeasureRequest(**_layer_args(layer), library=str(built.library), pad_n=kp.pad_n,
                                     pad_k=kp.pad_k, knobs=tuple(knob_grid(config, layer)), seed=_input_seed(config))
            reply = self.worker.call(request, timeout_s=self.measure_timeout_s)
            emit(events, "measured", ok=isinstance(reply, Measurement))
            yield Evaluation(config=config, outcome=reply, source=self.source, **info)

    def race(self, layer: Layer, contenders: list[tuple[Config, Knobs]], rounds: int) -> Race | Failure:
        """Time built kernels (each with its trial's run-time arguments) and cuBLAS again, in
        interleaved rounds. The kernels come from the cache; one missing there is built again.

        Where the export's cuBLAS fallback fuses the layer's activation, its library races too
        (for the plain layouts, the ones its race entry lays out): it may beat both."""
        from cutsearch import codegen
        from cutsearch.worker import RaceEntry, RaceRequest

        self.device()
        try:
            sources = [(i, codegen.render(layer, config)) for i, (config, _) in enumerate(contenders)]
        except codegen.CodegenError as exc:
            return Failure(kind=FailureKind.INVALID, message=str(exc)[:300], log=str(exc))
        with_fallback = layer.fallback_fuses_activation and layer.input == layer.output == "contiguous"
        if with_fallback:
            sources.append(("fallback", codegen.render_fallback(layer)))
        built = dict(self.compiler.compile_many(sources))
        entries = []
        for i, (config, knobs) in enumerate(contenders):
            if isinstance(built[i], Failure):
                return built[i]
            kp = kernel_problem(layer, config)
            entries.append(RaceEntry(library=str(built[i].library), pad_n=kp.pad_n, pad_k=kp.pad_k, knobs=knobs))
        fallback = built.get("fallback")
        if isinstance(fallback, Failure):  # a toolkit without cuBLAS's headers: race the kernels alone
            log.warning("the cuBLAS fallback was not built, so it does not race: %s", fallback.message)
        elif fallback is not None:
            entries.append(RaceEntry(library=str(fallback.library), pad_n=layer.n, pad_k=layer.k, knobs=Knobs()))
        request = RaceRequest(**_layer_args(layer), entries=tuple(entries), rounds=rounds, seed=len(entries) + 1000)
        race = self.worker.call(request, timeout_s=self.measure_timeout_s * rounds)
        if not isinstance(race, Race) or len(entries) == len(contenders):
            return race
        return dataclasses.replace(race, kernel_us=race.kernel_us[:-1], errors=race.errors[:-1],
                                   fallback_us=race.kernel_us[-1])

    def close(self) -> None:
        self.worker.close()


def _layer_args(layer: Layer) -> dict[str, Any]:
    """A worker request's layer fields (worker.LayerRequest)."""
    return dict(m=layer.m, n=layer.n, k=layer.k, dtype=layer.dtype, bias=layer.bias, activation=layer.activation,
                input=layer.input, output=layer.output)


class ReplayEvaluator:
    """Replays recorded evaluations. Every outcome it gives was measured earlier, not now, on
    `recorded_gpu` where the recording names it."""

    source = "recorded"

    def __init__(self, recording: dict[str, Evaluation], *, delay_s: float = 0.0,
                 recorded_gpu: str | None = None) -> None:
        self.recording = recording
        self.delay_s = delay_s
        self.recorded_gpu = recorded_gpu

    @classmethod
    def load(cls, path: Path, layer: Layer | None = None) -> ReplayEvaluator:
        recorded, evals, meta = read_recording(path)
        if layer is not None and recorded.to_dict() != layer.to_dict():
            from cutsearch.errors import UserError

            raise UserError(f"recording {path} is for layer {recorded.to_dict()}, not {layer.to_dict()}")
        gpu = meta.get("gpu")
        return cls({e.config.key: e for e in evals}, recorded_gpu=gpu if isinstance(gpu, str) else None)

    def configs(self) -> list[Config]:
        return [e.config for e in self.recording.values()]

    def evaluate(self, layer: Layer, configs: list[Config], events: Events | None = None) -> Iterator[Evaluation]:
        for config in configs:
            if self.delay_s:
                time.sleep(self.delay_s)
            found = self.recording.get(config.key)
            # Told before it is yielded, as the GPU tells it: a trial's progress line counts it.
            emit(events, "measured", ok=found is not None and isinstance(found.outcome, Measurement))
            if found is None:
                yield Evaluation(config=config, source=self.source, outcome=Failure(
                    kind=FailureKind.INVALID, message="not in the recording: this config was not measured"))
            else:
                yield dataclasses.replace(found, source=self.source, cached=True)

    def close(self) -> None:
        pass


class ModelEvaluator:
    """Predictions of the analytic model: for planning a search on a machine without a GPU."""

    source = "predicted"

    def __init__(self, coeff: model.Coefficients = model.DEFAULT) -> None:
        self.coeff = coeff

    def evaluate(self, layer: Layer, configs: list[Config], events: Events | None = None) -> Iterator[Evaluation]:
        for config in configs:
            knobs, t = model.best_knobs(layer, config, knob_grid(config, layer), self.coeff)
            timing = Timing(median_us=t, p20_us=t, p80_us=t, reps=0)
            emit(events, "measured", ok=True)
            yield Evaluation(config=config, source=self.source,
                             outcome=Measurement(timing=timing, knobs=knobs, rel_error=0.0))

    def close(self) -> None:
        pass


def read_recording(path: Path | str) -> tuple[Layer, list[Evaluation], dict[str, Any]]:
    """A recording's layer, its evaluations and the rest of it, or a UserError that says what is wrong."""
    from cutsearch.errors import UserError

    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"recording {path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"recording {path} is not valid JSON: {exc}") from None
    except OSError as exc:
        raise UserError(f"cannot read recording {path}: {exc.strerror or exc}") from None
    if not isinstance(data, dict) or "layer" not in data or not isinstance(data.get("evaluations"), list):
        raise UserError(f"{path} is not a cutsearch recording: it needs 'layer' and a list of 'evaluations'")
    try:
        evals = [Evaluation.from_dict(e, source="recorded") for e in data["evaluations"]]
        layer = Layer.from_dict(data["layer"])
    except UserError as exc:
        raise UserError(f"recording {path}: {exc}") from None
    except KeyError as exc:
        raise UserError(f"recording {path} has an evaluation without {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"recording {path} has a malformed evaluation: {exc}") from None
    for i, ev in enumerate(evals):
        if (wrong := _mistyped(ev.config) or _mistyped(ev.outcome)) is not None:
            raise UserError(f"recording {path}: evaluation {i} has {wrong}")
    return layer, evals, {k: v for k, v in data.items() if k not in ("layer", "evaluations")}


_SCALARS = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def _mistyped(obj: Any) -> str | None:
    """The first field of a dataclass (and of those inside it) whose value is not of its type."""
    if isinstance(obj, (tuple, list)):
        return next((w for w in map(_mistyped, obj) if w is not None), None)
    if not dataclasses.is_dataclass(obj):
        return None
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        expected = _SCALARS.get(str(field.type))
        if expected and (not isinstance(value, expected) or (bool not in expected and isinstance(value, bool))):
            article = "an" if field.type == "int" else "a"
            return f"{type(obj).__name__}.{field.name} = {value!r}, not {article} {field.type}"
        if (wrong := _mistyped(value)) is not None:
            return wrong
    return None


def _input_seed(config: Config) -> int:
    """The seed of a config's random x, W and b: its own in every run, wherever it sits in a batch."""
    return int.from_bytes(hashlib.sha256(config.key.encode()).digest()[:4], "little") or 1


def save_recording(path: Path, layer: Layer, evaluations: Iterable[Evaluation], **meta: Any) -> None:
    """Write evaluations as a recording a ReplayEvaluator can load."""
    body = {"recorded": True, "layer": layer.to_dict(), **meta,
            "evaluations": [e.to_dict() for e in evaluations]}
    persist.write_text(Path(path), json.dumps(body, indent=1))  # replays trust it: never half-written
