"""Shared test setup: private study and cache directories, and skips for GPU and nvcc tests.

Every test runs with $CUTSEARCH_STUDIES and $CUTSEARCH_CACHE pointed at its own temporary
directories, so no test reads or writes the user's studies or kernel cache (subprocesses
inherit them). The kernels that tests build directly, not through a search, go to a fresh
directory too, or to $CUTSEARCH_TEST_KERNELS where set (`kernel_cache`). Tests marked `gpu`
run only where torch sees a Hopper GPU; tests marked `nvcc` only where a CUDA toolkit is
installed. Both checks run once, lazily, so CI without torch or CUDA collects and skips cleanly.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

_HOPPER_PROBE = """
import sys
try:
    import torch
except ImportError:
    sys.exit("torch is not installed")
if not torch.cuda.is_available():
    sys.exit("torch sees no CUDA device")
major, minor = torch.cuda.get_device_capability(0)
if major != 9:
    sys.exit(f"GPU 0 is sm_{major}{minor}, not a Hopper (sm_90) GPU")
"""


@functools.cache
def _no_hopper_gpu() -> str | None:
    """Why GPU tests cannot run here, or None. Probed in a child: CUDA never starts in pytest."""
    try:
        probe = subprocess.run([sys.executable, "-c", _HOPPER_PROBE], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "probing torch for a GPU timed out"
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return lines[-1] if lines else f"GPU probe exited {probe.returncode}"


@functools.cache
def _no_nvcc() -> str | None:
    from cutsearch.compiler import Toolchain
    from cutsearch.errors import EnvironmentProblem

    try:
        Toolchain.find(cutlass_version="probe")
    except EnvironmentProblem as exc:
        return str(exc)
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("nvcc") is not None and (reason := _no_nvcc()):
        pytest.skip(f"needs nvcc: {reason}")
    if item.get_closest_marker("gpu") is not None and (reason := _no_hopper_gpu()):
        pytest.skip(f"needs torch with a Hopper GPU: {reason}")


@pytest.fixture(autouse=True)
def private_dirs(tmp_path, monkeypatch):
    """Point the studies and the kernel cache at this test's temporary directory."""
    studies, cache = tmp_path / "studies", tmp_path / "kernel-cache"
    monkeypatch.setenv("CUTSEARCH_STUDIES", str(studies))
    monkeypatch.setenv("CUTSEARCH_CACHE", str(cache))
    return studies, cache


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory) -> Path:
    """The cache of the kernels tests build directly: $CUTSEARCH_TEST_KERNELS where set, so
    that a second run, or one on a GPU machine given builds made without a GPU, compiles nothing
    again (the keys hash the source and the toolchain, so an entry built otherwise is never hit);
    else a fresh directory."""
    shared = os.environ.get("CUTSEARCH_TEST_KERNELS")
    return Path(shared) if shared else tmp_path_factory.mktemp("kernels")
