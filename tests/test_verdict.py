"""Kernel or cuBLAS: the verdict weighs more than the one cuBLAS timing beside the best trial.

studies/recorded/h200-2026-12-01-random/random1.json is a default search of 8x382x6301 f16 with
bias and ReLU, measured on one H200. Replaying it measures nothing.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from cutsearch import model
from cutsearch.evaluator import ReplayEvaluator
from cutsearch.problem import Layer
from cutsearch.search import search
from cutsearch.verdict import TrialRecord, verdict_cublas_us
from cutsearch.space import Config, Space
from cutsearch.suite import record

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "studies" / "recorded" / "h200-2026-12-01-random" / "random1.json"
LAYER = Layer(m=8, n=382, k=6301, bias=True, activation="relu")


def _evaluations() -> list[dict]:
    return [e for e in json.loads(RECORDING.read_text())["evaluations"] if e.get("measurement")]


def _record(number: int, median_us: float, cublas_us: float | None, **evaluation) -> TrialRecord:
    config = Config(tile_m=128, tile_n=128, tile_k=64, kernel_schedule="pingpong", epilogue_schedule="tma")
    return TrialRecord(number=number, config=config, median_us=median_us, cublas_us=cublas_us, failure_kind=None,
                       evaluation=evaluation)


def test_the_recorded_winner_by_the_timing_beside_it_loses_to_the_studys_median():
    evs = _evaluations()
    records = [_record(i, e["measurement"]["timing"]["median_us"], e["measurement"]["baseline"]["median_us"], **e)
               for i, e in enumerate(evs)]
    best = min(records, key=lambda r: r.median_us)
    assert len(records) == 32 and best.speedup > 1.01  # 19.30 µs beside 19.01 µs
    median = statistics.median(r.cublas_us for r in records)
    assert verdict_cublas_us(best, records) == median < best.cublas_us
    assert median / best.median_us < 0.99


def test_the_verdict_is_never_above_the_timing_beside_the_best():
    best = _record(0, 9.0, 10.0)
    assert verdict_cublas_us(best, [best, _record(1, 12.0, 20.0), _record(2, 13.0, 21.0)]) == 10.0


def test_replayed_trials_do_not_weigh_in_the_median():
    best = _record(0, 9.0, 30.0)
    replays = [_record(i, 15.0, 10.0, replayed_from_study=True) for i in range(1, 6)]
    records = [best, _record(6, 15.0, 10.0), _record(7, 16.0, 20.0), *replays]
    assert verdict_cublas_us(best, records) == 20.0  # median of 30, 10, 20; 10 with the replays


def test_a_best_without_cublas_timing_has_no_verdict():
    assert verdict_cublas_us(None, []) is None
    assert verdict_cublas_us(_record(0, 9.0, None), [_record(1, 10.0, 12.0)]) is None


def test_the_replayed_search_of_the_recording_ends_in_the_cublas_fallback(tmp_path, monkeypatch):
    recorded = {Config.from_dict(e["config"]).key: e for e in _evaluations()}
    ranked = model.rank
    monkeypatch.setattr(model, "rank", lambda layer, configs, coeff=model.DEFAULT: sorted(
        ranked(layer, configs, coeff), key=lambda tc: tc[1].key not in recorded))
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))
    result = search(LAYER, evaluator=ReplayEvaluator.load(RECORDING, LAYER), storage=storage, study_name="random1",
                    trials=len(recorded), sampler="model", batch=len(recorded), space=Space(LAYER))
    fastest = min(recorded.values(), key=lambda e: e["measurement"]["timing"]["median_us"])
    assert result.best.config == Config.from_dict(fastest["config"])
    assert result.best.speedup > 1.0 > result.speedup
    line = record("random1", result)
    assert line["fallback"] and line["speedup"] == 1.0 and line["cutsearch_us"] == line["cublas_us"]
    assert line["cublas_beside_us"] == fastest["measurement"]["baseline"]["median_us"] > line["cublas_us"]
