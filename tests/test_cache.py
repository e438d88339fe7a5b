"""The compile cache under concurrency: processes racing on one kernel leave one whole entry.

Each racer is a fresh `spawn` process with its own Compiler on a shared cache directory, held
at a barrier so that all of them miss the cache and run nvcc at the same time. The kernel is
the tiny fault template (about a second to build), not a CUTLASS kernel.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from cutsearch.cache import MANIFEST, Cache
from cutsearch.compiler import LIBRARY, LOG, SOURCE
from cutsearch.loader import ABI_VERSION
from tests.fakes import fault_source

pytestmark = pytest.mark.nvcc


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _race(root: str, fault: str, tag: str, barrier, results) -> None:
    """One racer: compile the same source as the others, report what it got."""
    from cutsearch.compiler import CompiledKernel, Compiler, Toolchain

    compiler = Compiler(Cache(Path(root)), Toolchain.find("fault-template"), jobs=1)
    source = fault_source(fault, tag=tag)
    barrier.wait()
    result = compiler.compile(source)
    if isinstance(result, CompiledKernel):
        results.put({"pid": os.getpid(), "ok": True, "key": result.key, "library": str(result.library),
                     "sha256": sha256(result.library), "cached": result.cached})
    else:
        results.put({"pid": os.getpid(), "ok": False, "kind": result.kind.value, "log": result.log})


def race(root: Path, fault: str, tag: str, racers: int) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(racers), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(root), fault, tag, barrier, results)) for _ in range(racers)]
    for p in procs:
        p.start()
    out = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def entries(root: Path) -> list[Path]:
    return [p for p in root.glob("*/*") if p.is_dir()]


def staging_left(root: Path) -> list[Path]:
    return list(root.glob(".build-*"))


@pytest.mark.parametrize("racers", [2, 3])
def test_racing_compiles_of_one_source_publish_one_whole_entry(tmp_path, racers):
    root = tmp_path / "kernels"
    tag = f"race{racers}"
    got = race(root, "correct", tag, racers)

    assert all(r["ok"] for r in got), got
    assert len({r["key"] for r in got}) == 1 and len({r["library"] for r in got}) == 1
    assert sum(not r["cached"] for r in got) >= 1
    [entry] = entries(root)
    assert entry.name == got[0]["key"]
    # Nothing torn: the manifest, source, log and library are all there and agree.
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["ok"] is True and manifest["operation"] == "cs_fault_correct"
    assert (entry / LOG).is_file()
    assert sha256(entry / SOURCE) == hashlib.sha256(fault_source("correct", tag=tag).code.encode()).hexdigest()
    assert {r["sha256"] for r in got} == {sha256(entry / LIBRARY)}
    assert ctypes.CDLL(str(entry / LIBRARY)).cs_abi_version() == ABI_VERSION
    assert staging_left(root) == []


def test_racing_compiles_of_a_broken_source_record_one_compile_error(tmp_path):
    root = tmp_path / "kernels"
    got = race(root, "compile_error", "race-broken", 2)

    assert [r["kind"] for r in got] == ["compile_error", "compile_error"]
    assert all("planted compile error" in r["log"] for r in got)
    [entry] = entries(root)
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["ok"] is False
    assert not (entry / LIBRARY).exists()
    assert staging_left(root) == []


def test_a_finished_entry_is_found_by_every_later_process_without_nvcc(tmp_path):
    root = tmp_path / "kernels"
    first = race(root, "correct", "again", 1)[0]
    second = race(root, "correct", "again", 2)
    assert first["cached"] is False
    assert all(r["cached"] and r["sha256"] == first["sha256"] for r in second)
    assert len(entries(root)) == 1 and staging_left(root) == []


def test_sweep_removes_builds_a_killed_process_abandoned_but_not_live_ones(tmp_path):
    cache = Cache(tmp_path / "kernels")
    abandoned, live = cache.staging(), cache.staging()
    (abandoned / SOURCE).write_text("half a build")
    old = time.time() - 2 * 3600
    os.utime(abandoned, (old, old))
    cache.sweep_staging()
    assert not abandoned.exists() and live.exists()


@pytest.mark.parametrize("manifest", [b"", b'{"ok": tr'], ids=["empty", "torn"])
def test_an_entry_a_machine_crash_left_torn_is_built_again_not_an_error(tmp_path, manifest):
    cache = Cache(tmp_path / "kernels")
    staged = cache.staging()
    (staged / LIBRARY).write_bytes(b"\x7fELF")
    entry = cache.commit("ab" * 16, staged, {"ok": True})
    (entry / MANIFEST).write_bytes(manifest)  # its pages lost with the machine
    assert cache.manifest("ab" * 16) is None and cache.get("ab" * 16) is None
    rebuilt = cache.staging()
    cache.commit("ab" * 16, rebuilt, {"ok": True, "again": True})
    assert cache.manifest("ab" * 16) == {"ok": True, "again": True}
