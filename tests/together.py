"""Processes held at a start line and released together, to race on one file or study."""

from __future__ import annotations

import multiprocessing
import time
from typing import Callable


def run_together(target: Callable[..., None], arg_lists: list[tuple], *, timeout_s: float = 120) -> list[int | None]:
    """Run `target(*args, go)` in a fresh process per args, all released at once; their exit codes.

    `target` must wait on `go` (a multiprocessing Event) before it starts racing.
    """
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=target, args=(*args, go)) for args in arg_lists]
    for p in procs:
        p.start()
    time.sleep(3)  # long enough for every spawned interpreter to reach the start line
    go.set()
    for p in procs:
        p.join(timeout_s)
    return [p.exitcode for p in procs]
