"""Planted faults on the GPU: each costs one candidate, typed, with its log; the next one runs.

The kernels are tests/fault/fault_launcher.cu (same C ABI as templates/launcher.cu, no CUTLASS,
built in about a second) compiled through the real Compiler and measured by the real worker
in a WorkerProcess. Tests marked `nvcc` only build them; those marked `gpu` run them on a
Hopper GPU and are skipped elsewhere.
"""

from __future__ import annotations

import ctypes
import dataclasses
import time

import pytest

from cutsearch.cache import Cache
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cutsearch.loader import ABI_VERSION
from cutsearch.outcome import Failure, FailureKind, Measurement, Race
from cutsearch.pool import WorkerProcess
from cutsearch.problem import Layer
from cutsearch.space import Knobs, Space
from cutsearch.worker import DeviceInfo, DeviceInfoRequest, MeasureRequest, RaceEntry, RaceRequest
from tests.fakes import FAULTS, fault_source

HANG_TIMEOUT_S = 15.0
SLACK_S = 5.0  # kill the hung child and reap it
START_TIMEOUT_S = 180.0  # a fresh child imports torch and creates a CUDA context
# (fault, kind, does the worker survive it)
EXPECTED = [
    ("hang", FailureKind.TIMEOUT, False),
    ("illegal_address", FailureKind.CRASH, False),
    ("wrong_result", FailureKind.WRONG_RESULT, True),
    ("smem", FailureKind.LAUNCH_ERROR, True),
]
LAYER = Layer(m=256, n=512, k=320)  # f16: the fault kernels read and write __half


@pytest.fixture(scope="module")
def built(kernel_cache) -> dict[str, CompiledKernel | Failure]:
    """Every fault variant, compiled in parallel by the real Compiler into the tests' cache."""
    compiler = Compiler(Cache(kernel_cache), Toolchain.find("fault-template"))
    return dict(compiler.compile_many((fault, fault_source(fault)) for fault in FAULTS))


def request(kernel: CompiledKernel, layer: Layer = LAYER, **overrides) -> MeasureRequest:
    r = MeasureRequest(library=str(kernel.library), m=layer.m, n=layer.n, k=layer.k, dtype=layer.dtype,
                       bias=layer.bias, activation=layer.activation, pad_n=layer.n, pad_k=layer.k,
                       knobs=(Knobs(raster=1), Knobs(raster=2)), reps=5, warmup=1, baseline=True)
    return dataclasses.replace(r, **overrides)


@pytest.mark.nvcc
def test_every_fault_but_the_compile_error_builds_and_exports_the_c_abi(built):
    for fault, mode in FAULTS.items():
        if fault == "compile_error":
            continue
        kernel = built[fault]
        assert isinstance(kernel, CompiledKernel), (fault, kernel)
        lib = ctypes.CDLL(str(kernel.library))  # loading needs no GPU: cudart is linked statically
        assert lib.cs_abi_version() == ABI_VERSION
        assert lib.cs_fault_mode() == mode
        for symbol in ("cs_create", "cs_workspace_size", "cs_bind", "cs_run", "cs_error", "cs_destroy"):
            assert hasattr(lib, symbol)


@pytest.mark.nvcc
def test_planted_compile_error_is_a_compile_error_with_its_log(built):
    failure = built["compile_error"]
    assert isinstance(failure, Failure) and failure.kind is FailureKind.COMPILE_ERROR
    assert "planted compile error" in failure.message
    assert "#error" in failure.log


# ---- on the GPU ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def worker():
    with WorkerProcess(0) as pool:
        info = pool.call(DeviceInfoRequest(), timeout_s=START_TIMEOUT_S)
        assert isinstance(info, DeviceInfo), info
        assert info.capability[0] == 9, info
        yield pool


def measure_correct(worker: WorkerProcess, built, layer: Layer = LAYER) -> Measurement:
    reply = worker.call(request(built["correct"], layer), timeout_s=START_TIMEOUT_S)
    assert isinstance(reply, Measurement), reply
    assert reply.rel_error < 1e-2 and reply.median_us > 0
    assert reply.baseline is not None and reply.baseline.median_us > 0
    return reply


@pytest.mark.gpu
@pytest.mark.parametrize("layer", [LAYER, dataclasses.replace(LAYER, bias=True)], ids=["plain", "bias"])
def test_correct_fault_kernel_measures_against_the_float64_reference(worker, built, layer):
    measure_correct(worker, built, layer)


@pytest.mark.gpu
@pytest.mark.parametrize(("fault", "kind", "survives"), EXPECTED, ids=[e[0] for e in EXPECTED])
def test_fault_costs_one_candidate_and_the_next_one_measures(worker, built, fault, kind, survives):
    measure_correct(worker, built)  # a warm child: the timeout below times the request only
    pid, restarts = worker.pid, worker.restarts
    started = time.monotonic()
    reply = worker.call(request(built[fault]), timeout_s=HANG_TIMEOUT_S)
    cost = time.monotonic() - started

    assert isinstance(reply, Failure), reply
    assert reply.kind is kind, (reply.kind, reply.message)
    assert reply.message and reply.log
    if survives:
        assert worker.restarts == restarts and worker.pid == pid
    else:
        assert worker.restarts == restarts + 1 and worker.pid is None
    if fault == "hang":
        assert cost < HANG_TIMEOUT_S + SLACK_S
    if fault == "illegal_address":
        assert "illegal" in reply.message.lower()
    if fault == "wrong_result":
        assert "relative error" in reply.message
    if fault == "smem":
        assert "launch" in reply.message

    measure_correct(worker, built)
    if not survives:
        assert worker.pid != pid


@pytest.mark.gpu
def test_a_race_times_each_correct_kernel_and_cublas_every_round_and_checks_them_first(worker, built):
    entry = RaceEntry(library=str(built["correct"].library), pad_n=LAYER.n, pad_k=LAYER.k, knobs=Knobs(raster=1))
    wrong = dataclasses.replace(entry, library=str(built["wrong_result"].library))
    race = worker.call(RaceRequest(entries=(entry, wrong, entry), m=LAYER.m, n=LAYER.n, k=LAYER.k, dtype="f16",
                                   bias=True, activation="none", rounds=3, reps=5, warmup=1),
                       timeout_s=START_TIMEOUT_S)
    assert isinstance(race, Race), race
    assert race.kernel_us[1] is None and "relative error" in race.errors[1]
    assert race.errors[0] is None and race.errors[2] is None
    for rounds in (race.kernel_us[0], race.kernel_us[2], race.cublas_us):
        assert len(rounds) == 3 and all(0 < us < 1e4 for us in rounds)
    measure_correct(worker, built)  # the worker serves on


@pytest.mark.gpu
def test_gpu_evaluator_types_every_planted_fault_and_measures_the_rest(tmp_path, monkeypatch):
    """The whole evaluator path (render, compile, measure), with the fault kernels as candidates."""
    import cutsearch.codegen as codegen
    from cutsearch.evaluator import GpuEvaluator

    configs = list(Space(LAYER))[:8]
    plan = dict(zip((c.key for c in configs), ["correct", "hang", "correct", "illegal_address", "wrong_result",
                                                 "compile_error", "smem", "correct"]))
    monkeypatch.setattr(codegen, "render", lambda layer, config: fault_source(plan[config.key], tag=config.key))
    evaluator = GpuEvaluator(cache_dir=tmp_path / "kernels", measure_timeout_s=HANG_TIMEOUT_S)
    try:
        evaluator.device()
        started = time.monotonic()
        outcomes = {ev.config.key: ev.outcome for ev in evaluator.evaluate(LAYER, configs)}
        wall = time.monotonic() - started
        restarts = evaluator.worker.restarts
    finally:
        evaluator.close()

    kinds = {"hang": FailureKind.TIMEOUT, "illegal_address": FailureKind.CRASH,
             "wrong_result": FailureKind.WRONG_RESULT, "compile_error": FailureKind.COMPILE_ERROR,
             "smem": FailureKind.LAUNCH_ERROR}
    for key, fault in plan.items():
        outcome = outcomes[key]
        if fault == "correct":
            assert isinstance(outcome, Measurement), (key, outcome)
        else:
            assert isinstance(outcome, Failure) and outcome.kind is kinds[fault], (fault, outcome)
            assert outcome.log
    assert restarts == 2  # the hang and the illegal address; the others keep the worker
    # One hang costs its timeout; the restarts after it and the crash cost a torch start each.
    assert wall < HANG_TIMEOUT_S + 2 * 60
