"""A killable child process that serves GPU requests: a hang or a crash costs one request.

The child is started with `spawn` (a fresh interpreter: CUDA must never be initialised in
a forked parent). A reply that does not come within the timeout gets the child killed, and a
child that dies shows as EOF; either way the request becomes a typed Failure and the next
request starts a new child.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from typing import Any, Callable

from cutsearch.outcome import Failure, FailureKind

log = logging.getLogger(__name__)

Serve = Callable[[Any, int], None]


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

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=self._serve, args=(child, self.gpu), daemon=True,
                                       name=f"cutsearch-gpu{self.gpu}")
        self._proc.start()
        child.close()
        self._conn = parent

    def call(self, request: Any, timeout_s: float) -> Any:
        """The child's reply, or a Failure of kind TIMEOUT or CRASH."""
        if self._proc is None or not self._proc.is_alive():
            self._reap()
            self._start()
        started = time.monotonic()
        try:
            self._conn.send(request)
            if self._conn.poll(timeout_s):
                return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.restarts += 1
            code = self._reap()
            return Failure(kind=FailureKind.CRASH, message=f"the GPU worker died (exit code {code})",
                           log=f"request: {request!r}")
        waited = time.monotonic() - started
        self.restarts += 1
        self.kill()
        return Failure(kind=FailureKind.TIMEOUT, message=f"no reply in {waited:.1f} s: killed and replaced the worker",
                       log=f"request: {request!r}")

    def _reap(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        return proc.exitcode

    def kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._reap()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    close = kill

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
