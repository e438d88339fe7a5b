"""Test doubles for the GPU side of cutsearch, and the planted-fault kernels.

- `serve(conn, gpu)`: a worker for `WorkerProcess(serve=tests.fakes.serve)` that runs the real
  request loop (`cutsearch.worker.serve_with`) around a handler that touches no GPU. It obeys
  `FakeRequest`s (answer, sleep, raise, exit, segfault, fatal) and answers the real
  `DeviceInfoRequest`, `MeasureRequest` and `RaceRequest` with made-up but well-formed replies.
- `fault_source(fault, tag)`: tests/fault/fault_launcher.cu rendered as a `KernelSource`, so
  the planted faults go through the real `Compiler`.
- `python -m tests.fakes drive ...`: a whole search through the real tuner, GpuEvaluator,
  Compiler (real nvcc, tiny kernels) and WorkerProcess, with this fake worker in place of the
  GPU. The kill-and-resume tests SIGKILL it at chosen moments.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import hashlib
import json
import os
import re
import string
import sys
import time
from pathlib import Path
from typing import Any

from cutsearch.codegen import KernelSource
from cutsearch.loader import ABI_VERSION
from cutsearch.outcome import Measurement, Race, Timing
from cutsearch.worker import DeviceInfo, DeviceInfoRequest, MeasureRequest, RaceRequest, _Fatal, serve_with

FAULT_TEMPLATE = Path(__file__).resolve().parent / "fault" / "fault_launcher.cu"
FAULTS = {"correct": 0, "hang": 1, "illegal_address": 2, "wrong_result": 3, "compile_error": 4, "smem": 5}

# Environment of the fake worker (it is a spawned child: it reads its settings from there).
MARKERS_ENV = "CUTSEARCH_FAKE_MARKERS"  # a directory: a file appears as each measurement starts
MEASURE_S_ENV = "CUTSEARCH_FAKE_MEASURE_S"  # seconds each measurement takes
EPOCH_ENV = "CUTSEARCH_FAKE_EPOCH"  # when set, each measurement is faster than the one before
GPU_NAME_ENV = "CUTSEARCH_FAKE_GPU_NAME"  # the GPU it claims to be


def fault_source(fault: str = "correct", tag: str = "") -> KernelSource:
    """The fault kernel as one translation unit; a new tag makes a new cache entry."""
    tag = tag or fault
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", tag):
        raise ValueError(f"tag {tag!r} must be a plain identifier")
    code = string.Template(FAULT_TEMPLATE.read_text()).substitute(fault=FAULTS[fault], tag=tag)
    return KernelSource(operation_name=f"cs_fault_{fault}", code=code, cutlass_version="fault-template")


@dataclasses.dataclass(frozen=True)
class FakeRequest:
    """Tells the fake worker what to do: the pool must survive every one of these."""

    action: str = "answer"  # answer | sleep | raise | exit | segfault | fatal
    seconds: float = 0.0    # sleep: how long before answering
    value: Any = None       # echoed in the reply


@dataclasses.dataclass(frozen=True)
class FakeReply:
    pid: int       # which child answered: a new pid means the worker was replaced
    served: int    # requests this child has answered, this one included
    value: Any = None


def serve(conn, gpu: int) -> None:
    """Child main loop of the fake worker (the real loop, a handler without a GPU)."""
    serve_with(conn, {"gpu": gpu, "served": 0}, _handle)


def serve_slow_start(conn, gpu: int) -> None:
    """A worker whose start (torch import, CUDA context) takes seconds before READY."""
    time.sleep(float(os.environ.get("CUTSEARCH_FAKE_START_S") or 2.0))
    serve(conn, gpu)


def serve_dead_on_start(conn, gpu: int) -> None:
    """A worker that dies before READY (a broken install)."""
    os._exit(5)


def _handle(request: Any, state: dict[str, Any]) -> Any:
    state["served"] += 1
    if isinstance(request, FakeRequest):
        if request.action == "sleep":
            time.sleep(request.seconds)
        elif request.action == "raise":
            raise ValueError(f"planted error in request {state['served']}")
        elif request.action == "fatal":
            raise _Fatal("planted: an illegal memory access was encountered")
        elif request.action == "exit":
            os._exit(7)
        elif request.action == "segfault":
            ctypes.string_at(0)
        elif request.action != "answer":
            raise ValueError(f"unknown fake action {request.action!r}")
        return FakeReply(pid=os.getpid(), served=state["served"], value=request.value)
    if isinstance(request, DeviceInfoRequest):
        return DeviceInfo(name=os.environ.get(GPU_NAME_ENV, "NVIDIA H200 (fake)"), capability=(9, 0), sm_count=132,
                          l2_bytes=60 * 2**20, memory_bytes=141 * 10**9, driver="fake", torch="none")
    if isinstance(request, MeasureRequest):
        return _fake_measure(request)
    if isinstance(request, RaceRequest):
        return _fake_race(request)
    raise TypeError(f"unknown request {type(request).__name__}")


def _fake_measure(r: MeasureRequest) -> Measurement:
    """A plausible Measurement of a library that really was built (it must load)."""
    markers = os.environ.get(MARKERS_ENV)
    if markers:
        Path(markers, f"measure-{time.time_ns()}-{os.getpid()}").write_text(r.library)
    _check_library(r.library)
    time.sleep(float(os.environ.get(MEASURE_S_ENV) or 0))
    median = _fake_median_us(r.library)
    timing = Timing(median_us=median, p20_us=median * 0.99, p80_us=median * 1.01, reps=r.reps)
    baseline = Timing(median_us=50.0, p20_us=49.5, p80_us=50.5, reps=r.reps)
    return Measurement(timing=timing, knobs=r.knobs[0], rel_error=1e-4, baseline=baseline,
                       variants=tuple((k, median) for k in r.knobs))


def _fake_race(r: RaceRequest) -> Race:
    """Each library's fake time again, round by round, against 50 µs for cuBLAS."""
    kernel_us = []
    for entry in r.entries:
        _check_library(entry.library)
        median = _fake_median_us(entry.library)
        kernel_us.append(tuple(median * (1 + 0.01 * (i % 2)) for i in range(r.rounds)))
    return Race(kernel_us=tuple(kernel_us), cublas_us=(50.0,) * r.rounds, errors=(None,) * len(r.entries),
                reps=r.reps)


def _check_library(path: str) -> None:
    lib = ctypes.CDLL(path)
    if lib.cs_abi_version() != ABI_VERSION:
        raise RuntimeError(f"{path} does not export the cutsearch C ABI")


def _fake_median_us(library: str) -> float:
    epoch = os.environ.get(EPOCH_ENV)
    if epoch:
        return max(1.0, 1000.0 - (time.time() - float(epoch)))
    return 10.0 + int(hashlib.sha256(library.encode()).hexdigest()[:6], 16) % 1000 / 10


# ---- the search driver of the kill-and-resume tests ---------------------------------------------

PERSIST_PAUSED = "persist-paused"


def _pause_inside_write_dir(markers: Path, nth: int) -> None:
    """Stop for good between write_dir's two renames (the old best moved aside, the new one not
    yet in place) the `nth` time this process replaces its best directory."""
    import cutsearch.persist as persist

    real = os.rename
    seen = 0

    def rename(src, dst, *args, **kwargs):
        nonlocal seen
        real(src, dst, *args, **kwargs)
        if Path(src).name == persist.BEST and Path(dst).name.startswith(f".{persist.BEST}.old-"):
            seen += 1
            if seen == nth:
                (markers / PERSIST_PAUSED).write_text(str(dst))
                time.sleep(3600)

    os.rename = rename


def drive(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes drive")
    parser.add_argument("--study", required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--pause-in-persist", type=int, default=0, metavar="N",
                        help="hang inside the Nth replacement of the best directory")
    args = parser.parse_args(argv)

    import cutsearch.codegen as codegen
    from cutsearch import tuner
    from cutsearch.evaluator import GpuEvaluator
    from cutsearch.pool import WorkerProcess
    from cutsearch.problem import Layer
    from cutsearch.cache import default_cache_dir

    markers = Path(os.environ[MARKERS_ENV])
    if args.pause_in_persist:
        _pause_inside_write_dir(markers, args.pause_in_persist)
    # The real pipeline, with the tiny fault kernel (correct mode) in place of CUTLASS's.
    codegen.render = lambda layer, config: fault_source("correct", tag=config.key)
    events = (markers / "events.jsonl").open("a", buffering=1)

    def event(name: str, data: dict[str, Any]) -> None:
        events.write(json.dumps({"pid": os.getpid(), "event": name, **data}, default=str) + "\n")

    from tests import fakes  # by its importable name, not __main__, for the spawned child

    evaluator = GpuEvaluator(cache_dir=default_cache_dir(), jobs=args.batch, worker=WorkerProcess(serve=fakes.serve))
    try:
        result = tuner.tune(Layer(m=64, n=64, k=64), trials=args.trials, study=args.study, evaluator=evaluator,
                            batch=args.batch, seed=0, events=event, command="tests.fakes drive")
    finally:
        evaluator.close()
    event("done", {"trials": result.trials, "new_trials": result.new_trials})


if __name__ == "__main__":
    if sys.argv[1:2] != ["drive"]:
        sys.exit("usage: python -m tests.fakes drive --study NAME --trials N [--batch B] [--pause-in-persist N]")
    drive(sys.argv[2:])
