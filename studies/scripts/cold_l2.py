"""The measurement protocol's timer for the study scripts: cold L2, CUDA events, median."""

from __future__ import annotations

import statistics
import time

import torch

FLUSH_BYTES = 256 * 2**20  # over 4x the H200's 60 MB L2


def timed(call, reps: int = 30, warmup: int = 3) -> dict:
    """Median, p20 and p80 of `call` in µs, with 256 MiB zeroed before each repetition."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        call()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        call()
        e.record()
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    q = statistics.quantiles(us, n=10)
    return {"median_us": statistics.median(us), "p20_us": q[1], "p80_us": q[7], "reps": reps}


def host_us(call, calls: int = 200) -> float:
    """The host's time per call, the calls queued without waiting for the GPU."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    spent = time.perf_counter() - t0
    torch.cuda.synchronize()
    return spent / calls * 1e6


PROTOCOL = "cold L2 (256 MiB zeroed before each repetition), CUDA events, median of 30"


def save(out, command: str, records: list) -> None:
    """Write a study script's results: the GPU, torch, the command, the protocol and the records."""
    import json
    from pathlib import Path

    data = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "command": command,
            "protocol": PROTOCOL, "records": records}
    Path(out).write_text(json.dumps(data, indent=1))
