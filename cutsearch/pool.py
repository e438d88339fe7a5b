"""A killable child process that serves GPU requests: a hang or a crash costs one request.

The child is started with `spawn` (a fresh interpreter: CUDA must never be initialised in
a forked parent). A reply that does not come within the timeout gets the child killed, and a
child that dies shows as EOF; either way the request becomes a typed Failure and the next
request starts a new child. A child that replies with a CRASH (an error it could not contain,
or one that may have poisoned its CUDA context) is replaced too: its state is no longer
trusted, and a child that is already exiting must not be handed the next request.

A child's first message is READY, sent once it has done its slow start (importing torch,
creating the CUDA context): a request's timeout times the request, never the start.

A child that dies of a signal, or is about to be killed for a hang, writes its threads' Python
stacks to a file of its own (faulthandler), and the Failure's log carries them.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from cutsearch.outcome import Failure, FailureKind

log = logging.getLogger(__name__)

Serve = Callable[[Any, int], None]
READY = "cutsearch-worker-ready"
TRACE_CHARS = 6000  # of a dead or hung child's stacks, the end: the frames nearest the fault
DUMP_WAIT_S = 2.0   # for a hung child to write its stacks before it is killed


def _child(serve: Serve, conn: Any, gpu: int, trace: str) -> None:
    """A child's entry: a fatal signal, or SIGUSR1 from the parent before it kills a hung
    request, writes every thread's Python stack to `trace` (even from inside a CUDA call)."""
    import faulthandler

    out = open(trace, "w")  # faulthandler keeps it open for the child's life
    faulthandler.enable(file=out, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)
    serve(conn, gpu)


class WorkerProcess:
    def __init__(self, gpu: int = 0, *, serve: Serve | None = None, start_timeout_s: float = 120.0) -> None:
        if serve is None:
            from cutsearch.worker import serve
        self.gpu = gpu
        self._serve = serve
        self._ctx = multiprocessing.get_context("spawn")
        self._proc = None
        self._conn = None
        self.restarts = 0
        self.start_timeout_s = start_timeout_s
        self._last_exit: int | None = None
        self._trace: Path | None = None  # the live child's stack file
        self._last_trace = ""            # what the last child reaped wrote there

    def _start(self) -> Failure | None:
        """Start a child and wait for its READY; a Failure if it dies or hangs on the way."""
        parent, child = self._ctx.Pipe()
        fd, trace = tempfile.mkstemp(prefix=f"cutsearch-gpu{self.gpu}-", suffix=".stacks")
        os.close(fd)
        self._trace = Path(trace)
        self._proc = self._ctx.Process(target=_child, args=(self._serve, child, self.gpu, trace), daemon=True,
                                       name=f"cutsearch-gpu{self.gpu}")
        self._proc.start()
        child.close()
        self._conn = parent
        try:
            if self._conn.poll(self.start_timeout_s):
                hello = self._conn.recv()
                if hello == READY:
                    return None
                problem, kind = f"sent {hello!r} instead of {READY!r}", FailureKind.CRASH
            else:
                problem, kind = f"did not start in {self.start_timeout_s:.0f} s", FailureKind.TIMEOUT
                self._dump_stacks()
        except (EOFError, OSError):
            self._reap()
            problem, kind = f"died while starting (exit code {self._last_exit})", FailureKind.CRASH
        self.kill()
        return Failure(kind=kind, message=f"the GPU worker {problem}", log=self._last_trace)

    def call(self, request: Any, timeout_s: float) -> Any:
        """The child's reply, or a Failure of kind TIMEOUT or CRASH."""
        if self._proc is None or not self._proc.is_alive():
            self._reap()
            self._close_conn()
            failed = self._start()
            if failed is not None:
                return dataclasses.replace(failed, log=_log(request, failed.log))
        started = time.monotonic()
        try:
            self._conn.send(request)
            if self._conn.poll(timeout_s):
                reply = self._conn.recv()
                if isinstance(reply, Failure) and reply.kind is FailureKind.CRASH:
                    self.restarts += 1
                    self.kill()
                return reply
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.restarts += 1
            code = self._reap()
            self._close_conn()
            return Failure(kind=FailureKind.CRASH, message=f"the GPU worker died (exit code {code})",
                           log=_log(request, self._last_trace))
        waited = time.monotonic() - started
        self.restarts += 1
        self._dump_stacks()
        self.kill()
        return Failure(kind=FailureKind.TIMEOUT, message=f"no reply in {waited:.1f} s: killed and replaced the worker",
                       log=_log(request, self._last_trace))

    def _dump_stacks(self) -> None:
        """Have the live child write its stacks (where it hangs) before it is killed."""
        if self._proc is None or self._trace is None or not self._proc.is_alive():
            return
        try:
            os.kill(self._proc.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return
        deadline, size = time.monotonic() + DUMP_WAIT_S, -1
        while time.monotonic() < deadline:  # until it has written, and stopped writing
            time.sleep(0.1)
            size, before = self._trace.stat().st_size if self._trace.exists() else 0, size
            if size and size == before:
                return

    def _reap(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        self._last_exit = proc.exitcode
        trace, self._trace = self._trace, None
        if trace is not None:
            self._last_trace = _read_tail(trace)
            trace.unlink(missing_ok=True)
        return proc.exitcode

    def _close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def pid(self) -> int | None:
        """The live child's process id (None before the first request or after a kill)."""
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._reap()
        self._close_conn()

    close = kill

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_tail(path: Path) -> str:
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    return text[-TRACE_CHARS:]


def _log(request: Any, stacks: str) -> str:
    """A failed request's log: the request, then the child's stacks where it wrote any."""
    return f"request: {request!r}" + (f"\n\nthe worker's Python stacks:\n{stacks}" if stacks.strip() else "")
