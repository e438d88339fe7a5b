"""One contract, every evaluator: replay (recorded H200 data), model (predictions), GPU (measured).

Each test below runs once per evaluator through the parametrized `case` fixture, as Optuna's
storage tests run against every storage. The GPU case is marked `gpu` and skipped where no
Hopper GPU is visible; it measures one small layer with two configs.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any, Callable

import pytest

from cutsearch.evaluator import Evaluation, Evaluator, GpuEvaluator, ModelEvaluator, ReplayEvaluator, save_recording
from cutsearch.outcome import Failure, FailureKind, Measurement
from cutsearch.problem import Layer
from cutsearch.space import Config, Space, invalid_reason

RECORDED = Path(__file__).resolve().parent.parent / "studies" / "recorded" / "h200-smoke"
SOURCES = {"replay": "recorded", "model": "predicted", "gpu": "measured"}


@dataclasses.dataclass
class Case:
    name: str
    layer: Layer
    configs: list[Config]
    make: Callable[[], Evaluator]

    @property
    def source(self) -> str:
        return SOURCES[self.name]


@dataclasses.dataclass
class Evaluated:
    case: Case
    evaluations: list[Evaluation]
    events: list[tuple[str, dict[str, Any]]]
    announced: list[int]  # per evaluation, the successful "measured" events told before it was yielded


def _replay_case() -> Case:
    # Recorded on an H200: one measured kernel and two compile errors; plus a config the
    # recording never measured, which must come back as a typed failure.
    path = RECORDED / "fc-3000x1001x999-bf16-bias-gelu.json"
    replay = ReplayEvaluator.load(path)
    layer = Layer(m=3000, n=1001, k=999, dtype="bf16", bias=True, activation="gelu")
    unrecorded = Config(tile_m=128, tile_n=128, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="tma",
                        pad=True)
    return Case(name="replay", layer=layer, configs=[*replay.configs(), unrecorded],
                make=lambda: ReplayEvaluator.load(path, layer))


def _model_case() -> Case:
    layer = Layer(m=4096, n=5000, k=1024)
    configs = list(Space(layer))
    picks = [configs[0], configs[len(configs) // 2], next(c for c in configs if c.tile_scheduler == "streamk")]
    return Case(name="model", layer=layer, configs=picks, make=ModelEvaluator)


def _gpu_case(cache_dir: Path) -> Case:
    layer = Layer(m=256, n=512, k=256)
    configs = [Config(tile_m=128, tile_n=128, tile_k=64, kernel_schedule="pingpong", epilogue_schedule="tma"),
               Config(tile_m=128, tile_n=64, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="tma")]
    assert all(invalid_reason(layer, c) is None for c in configs)
    return Case(name="gpu", layer=layer, configs=configs, make=lambda: GpuEvaluator(cache_dir=cache_dir, jobs=2))


@pytest.fixture(scope="module", params=["replay", "model", pytest.param("gpu", marks=pytest.mark.gpu)])
def case(request, tmp_path_factory) -> Case:
    if request.param == "replay":
        return _replay_case()
    if request.param == "model":
        return _model_case()
    return _gpu_case(tmp_path_factory.mktemp("kernel-cache"))


@pytest.fixture(scope="module")
def evaluated(case) -> Evaluated:
    """The case's configs evaluated once (a GPU run compiles and measures only here)."""
    events: list[tuple[str, dict[str, Any]]] = []
    evaluator = case.make()
    evaluations, announced = [], []
    try:
        for ev in evaluator.evaluate(case.layer, case.configs, lambda name, data: events.append((name, data))):
            evaluations.append(ev)
            announced.append(sum(data["ok"] for name, data in events if name == "measured"))
    finally:
        evaluator.close()
    return Evaluated(case=case, evaluations=evaluations, events=events, announced=announced)


def test_yields_exactly_one_evaluation_per_config(evaluated):
    got = collections.Counter(e.config.key for e in evaluated.evaluations)
    assert got == collections.Counter(c.key for c in evaluated.case.configs)


def test_preserves_each_config(evaluated):
    asked = {c.key: c for c in evaluated.case.configs}
    for ev in evaluated.evaluations:
        assert isinstance(ev, Evaluation)
        assert ev.config == asked[ev.config.key]


def test_labels_every_evaluation_with_its_source(evaluated):
    assert {e.source for e in evaluated.evaluations} == {evaluated.case.source}


def test_measurements_have_a_positive_median_between_p20_and_p80(evaluated):
    measured = [e.outcome for e in evaluated.evaluations if isinstance(e.outcome, Measurement)]
    assert measured, "every case includes at least one config that runs"
    for m in measured:
        assert m.median_us > 0
        assert m.timing.p20_us <= m.median_us <= m.timing.p80_us
        assert m.rel_error >= 0


def test_gpu_measurements_time_the_floors_beside_cublas(evaluated):
    if evaluated.case.name != "gpu":
        pytest.skip("only the GPU measures floors")
    measured = [e.outcome for e in evaluated.evaluations if isinstance(e.outcome, Measurement)]
    assert measured
    for m in measured:
        floors = dict(m.floors)
        assert set(floors) == {"empty kernel"}
        assert all(t.median_us > 0 for t in floors.values())
        assert Measurement.from_dict(m.to_dict()).floors == m.floors


def test_every_outcome_is_a_measurement_or_a_typed_failure(evaluated):
    for ev in evaluated.evaluations:
        assert isinstance(ev.outcome, (Measurement, Failure))
        if isinstance(ev.outcome, Failure):
            assert isinstance(ev.outcome.kind, FailureKind)
            assert isinstance(ev.outcome.message, str) and ev.outcome.message.strip()


def test_reports_a_measured_event_for_each_measurement(evaluated):
    measured = [data for name, data in evaluated.events if name == "measured"]
    assert all(isinstance(d.get("ok"), bool) for d in measured)
    assert sum(d["ok"] for d in measured) == sum(isinstance(e.outcome, Measurement) for e in evaluated.evaluations)


def test_tells_each_measurement_before_yielding_it(evaluated):
    """The search prints a trial's line as its evaluation arrives: its count must include it."""
    yielded = 0
    for ev, announced in zip(evaluated.evaluations, evaluated.announced):
        yielded += isinstance(ev.outcome, Measurement)
        assert announced == yielded, f"{ev.config.key}: {announced} measurements told, {yielded} yielded"


def test_evaluations_replay_identically_from_a_recording(evaluated, tmp_path):
    """What any evaluator yields can be saved and replayed: the recording loses no outcome."""
    path = tmp_path / "recording.json"
    save_recording(path, evaluated.case.layer, evaluated.evaluations, note="test")
    replay = ReplayEvaluator.load(path, evaluated.case.layer)
    again = {e.config.key: e for e in replay.evaluate(evaluated.case.layer, [e.config for e in evaluated.evaluations])}
    for ev in evaluated.evaluations:
        assert again[ev.config.key].source == "recorded"
        assert again[ev.config.key].outcome == ev.outcome


def test_evaluate_returns_an_iterator(case):
    evaluator = case.make()
    try:
        result = evaluator.evaluate(case.layer, [])
        assert iter(result) is result
    finally:
        evaluator.close()


def test_an_empty_batch_yields_nothing(case):
    evaluator = case.make()
    events: list[str] = []
    try:
        assert list(evaluator.evaluate(case.layer, [], lambda name, data: events.append(name))) == []
    finally:
        evaluator.close()
    assert "measured" not in events


def test_close_is_idempotent(case):
    evaluator = case.make()
    if case.name == "gpu":
        evaluator.device()  # starts the worker, so that there is one to stop
    evaluator.close()
    evaluator.close()  # must not raise
    if case.name == "gpu":
        assert evaluator.worker.pid is None


def test_works_without_an_events_callback(case):
    if case.name == "gpu":
        pytest.skip("the GPU case measures once, in the `evaluated` fixture")
    evaluator = case.make()
    try:
        assert len(list(evaluator.evaluate(case.layer, case.configs))) == len(case.configs)
    finally:
        evaluator.close()
