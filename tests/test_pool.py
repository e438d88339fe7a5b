"""WorkerProcess: a hang or a crash costs one request, never the search (no GPU needed).

The child is tests.fakes.serve: the real request loop of cutsearch.worker around a handler
that can be told to sleep, raise, exit, segfault or die as after a poisoned CUDA context.
"""

from __future__ import annotations

import time

import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from cutsearch import model
from cutsearch.evaluator import Evaluation
from cutsearch.outcome import Failure, FailureKind, Measurement, Timing
from cutsearch.pool import WorkerProcess
from cutsearch.problem import Layer
from cutsearch.search import search
from cutsearch.space import Knobs, Space
from tests import fakes
from tests.fakes import FakeReply, FakeRequest

TIMEOUT_S = 3.0
SLACK_S = 3.0  # killing and reaping a child; starting one is not counted here


@pytest.fixture
def pool():
    with WorkerProcess(serve=fakes.serve) as worker:
        yield worker


def answer(pool: WorkerProcess, value=None) -> FakeReply:
    reply = pool.call(FakeRequest("answer", value=value), timeout_s=60)
    assert isinstance(reply, FakeReply), reply
    return reply


def test_a_healthy_child_is_reused_for_every_request(pool):
    replies = [answer(pool, value=i) for i in range(3)]
    assert [r.value for r in replies] == [0, 1, 2]
    assert len({r.pid for r in replies}) == 1
    assert [r.served for r in replies] == [1, 2, 3]
    assert pool.restarts == 0


def test_sleep_past_the_timeout_is_a_timeout_that_costs_the_timeout_and_a_new_child(pool):
    first = answer(pool)  # the child is up: what follows times the request, not the start
    started = time.monotonic()
    reply = pool.call(FakeRequest("sleep", seconds=120), timeout_s=TIMEOUT_S)
    cost = time.monotonic() - started
    assert isinstance(reply, Failure) and reply.kind is FailureKind.TIMEOUT
    assert "killed and replaced" in reply.message and "sleep" in reply.log
    assert "in _handle" in reply.log  # where it hung, from the child's own stacks
    assert TIMEOUT_S <= cost < TIMEOUT_S + SLACK_S
    assert pool.restarts == 1
    after = answer(pool)
    assert after.pid != first.pid and after.served == 1


def test_a_sleep_within_the_timeout_is_just_slow(pool):
    reply = pool.call(FakeRequest("sleep", seconds=0.5, value="late"), timeout_s=30)
    assert isinstance(reply, FakeReply) and reply.value == "late"
    assert pool.restarts == 0


def test_an_exception_comes_back_as_a_crash_with_its_traceback_and_the_child_is_replaced(pool):
    first = answer(pool)
    reply = pool.call(FakeRequest("raise"), timeout_s=30)
    assert isinstance(reply, Failure) and reply.kind is FailureKind.CRASH
    assert reply.message.startswith("worker error: planted error")
    assert "Traceback" in reply.log and "ValueError: planted error" in reply.log
    # The design: a child that raised is no longer trusted (its CUDA state is unknown).
    assert pool.restarts == 1
    after = answer(pool)
    assert after.pid != first.pid and after.served == 1


@pytest.mark.parametrize(("action", "code"), [("exit", "7"), ("segfault", "-11")])
def test_a_dying_child_is_a_crash_and_the_next_request_gets_a_new_one(pool, action, code):
    first = answer(pool)
    reply = pool.call(FakeRequest(action), timeout_s=30)
    assert isinstance(reply, Failure) and reply.kind is FailureKind.CRASH
    assert f"exit code {code}" in reply.message
    assert action in reply.log  # the request that killed it
    if action == "segfault":  # where it died, from the child's own stacks
        assert "Segmentation fault" in reply.log and "in _handle" in reply.log
    assert pool.restarts == 1
    after = answer(pool)
    assert after.pid != first.pid and after.served == 1


def test_a_poisoned_context_replies_then_never_sees_another_request(pool):
    # The child answers a fatal error and exits; the next request must not be sent to it
    # while it is still exiting (that request would come back as a crash of its own).
    pids = set()
    for _ in range(3):
        pids.add(answer(pool).pid)
        reply = pool.call(FakeRequest("fatal"), timeout_s=30)
        assert isinstance(reply, Failure) and reply.kind is FailureKind.CRASH
        assert "illegal memory access" in reply.message and "_Fatal" in reply.log
        assert isinstance(pool.call(FakeRequest("answer"), timeout_s=30), FakeReply)
    assert len(pids) == 3
    assert pool.restarts == 3


def test_restarts_count_every_replacement_and_the_pool_keeps_answering(pool):
    faults = [FakeRequest("exit"), FakeRequest("raise"), FakeRequest("sleep", seconds=60), FakeRequest("segfault"),
              FakeRequest("fatal")]
    for i, fault in enumerate(faults, start=1):
        reply = pool.call(fault, timeout_s=TIMEOUT_S)
        assert isinstance(reply, Failure)
        assert pool.restarts == i
        assert answer(pool, value=i).value == i
    assert pool.restarts == len(faults)


def test_a_slow_start_is_not_charged_to_the_request():
    with WorkerProcess(serve=fakes.serve_slow_start) as worker:  # two seconds before READY
        reply = worker.call(FakeRequest("answer", value="ok"), timeout_s=1.0)
        assert isinstance(reply, FakeReply) and reply.value == "ok"
        assert worker.restarts == 0


def test_a_child_that_dies_while_starting_is_a_crash_not_a_hang():
    with WorkerProcess(serve=fakes.serve_dead_on_start, start_timeout_s=60) as worker:
        started = time.monotonic()
        reply = worker.call(FakeRequest("answer"), timeout_s=60)
        assert time.monotonic() - started < 30
        assert isinstance(reply, Failure) and reply.kind is FailureKind.CRASH
        assert "died while starting (exit code 5)" in reply.message and "answer" in reply.log


def test_a_child_that_never_says_ready_is_a_timeout_after_the_start_timeout():
    with WorkerProcess(serve=fakes.serve_slow_start, start_timeout_s=0.5) as worker:
        reply = worker.call(FakeRequest("answer"), timeout_s=60)
        assert isinstance(reply, Failure) and reply.kind is FailureKind.TIMEOUT
        assert "did not start in" in reply.message
        assert worker.pid is None


def test_closing_the_pool_ends_its_child():
    worker = WorkerProcess(serve=fakes.serve)
    answer(worker)
    proc = worker._proc
    worker.close()
    assert not proc.is_alive()
    assert worker.pid is None


# ---- the search goes on ---------------------------------------------------------------------------

LAYER = Layer(m=256, n=512, k=1024)


class FakeGpuEvaluator:
    """Measures through a WorkerProcess running the fake worker; `plan` says which configs fail."""

    source = "measured"

    def __init__(self, worker: WorkerProcess, plan: dict[str, FakeRequest], timeout_s: float) -> None:
        self.worker, self.plan, self.timeout_s = worker, plan, timeout_s
        self.costs: dict[str, float] = {}

    def evaluate(self, layer, configs, events=None):
        for config in configs:
            started = time.monotonic()
            reply = self.worker.call(self.plan.get(config.key, FakeRequest("answer")), timeout_s=self.timeout_s)
            self.costs[config.key] = time.monotonic() - started
            if isinstance(reply, Failure):
                yield Evaluation(config=config, outcome=reply, source=self.source)
            else:
                t = model.predict_us(layer, config)
                yield Evaluation(config=config, source=self.source, outcome=Measurement(
                    timing=Timing(median_us=t, p20_us=t, p80_us=t, reps=30), knobs=Knobs(), rel_error=1e-4))

    def close(self) -> None:
        self.worker.close()


def test_search_goes_on_past_a_hang_and_a_crash_and_records_their_kinds(tmp_path):
    order = [c for _, c in model.rank(LAYER, list(Space(LAYER)))[:6]]  # what sampler="model" asks, in order
    hang, crash = order[0].key, order[1].key
    plan = {hang: FakeRequest("sleep", seconds=120), crash: FakeRequest("exit")}
    evaluator = FakeGpuEvaluator(WorkerProcess(serve=fakes.serve), plan, timeout_s=TIMEOUT_S)
    evaluator.worker.call(FakeRequest("answer"), timeout_s=60)  # started before the clock runs
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))
    try:
        result = search(LAYER, evaluator=evaluator, storage=storage, study_name="faults", trials=6, batch=2,
                        sampler="model", warm=0)
    finally:
        evaluator.close()

    assert result.trials == 6 and result.new_trials == 6
    assert result.failures == {"timeout": 1, "crash": 1}
    assert evaluator.worker.restarts == 2
    assert evaluator.costs[hang] < TIMEOUT_S + SLACK_S
    import optuna

    trials = optuna.load_study(study_name="faults", storage=storage).get_trials()
    by_config = {t.user_attrs["config"]: t for t in trials}
    assert set(by_config) == {c.key for c in order}
    assert by_config[hang].state == TrialState.FAIL
    assert by_config[hang].user_attrs["failure"]["kind"] == "timeout"
    assert "sleep" in by_config[hang].user_attrs["failure"]["log"]
    assert by_config[crash].state == TrialState.FAIL
    assert by_config[crash].user_attrs["failure"]["kind"] == "crash"
    assert "exit code 7" in by_config[crash].user_attrs["failure"]["message"]
    rest = [t for key, t in by_config.items() if key not in (hang, crash)]
    assert all(t.state == TrialState.COMPLETE for t in rest)
    assert result.best is not None and result.best.config.key not in (hang, crash)
