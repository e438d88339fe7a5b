"""The study's durable outputs: written whole or not at all, and checked before they are used."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from cutsearch import persist
from cutsearch.errors import UserError
from tests.together import run_together


def test_write_json_writes_the_data_with_a_trailing_newline(tmp_path):
    target = tmp_path / "results" / "study.json"
    persist.write_json(target, {"best_us": 70.9, "layer": {"M": 16}})
    text = target.read_text()
    assert json.loads(text) == {"best_us": 70.9, "layer": {"M": 16}}
    assert text.endswith("}\n")


def test_write_json_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "study.json"
    persist.write_json(target, {"run": 1})
    inode = target.stat().st_ino
    persist.write_json(target, {"run": 2})
    assert json.loads(target.read_text()) == {"run": 2}
    assert target.stat().st_ino != inode, "a new file is renamed over the old one, never rewritten in place"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.json"]


def test_write_json_that_fails_keeps_the_previous_file_and_cleans_up(tmp_path):
    target = tmp_path / "study.json"
    persist.write_json(target, {"run": 1})
    with pytest.raises(TypeError):
        persist.write_json(target, {"run": object()})  # not serialisable, found midway through
    assert json.loads(target.read_text()) == {"run": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.json"]


def test_write_dir_records_the_sha256_of_every_file(tmp_path):
    library = tmp_path / "built.so"
    library.write_bytes(b"\x7fELF fake library")
    target = persist.write_dir(tmp_path / "best", {"kernel.so": library, "kernel.cu": "// source\n",
                                                  "data/blob.bin": b"\x00\x01"}, {"config": {"tile_m": 128}})
    assert target == tmp_path / "best"
    assert (target / "kernel.so").read_bytes() == library.read_bytes()
    assert (target / "kernel.cu").read_text() == "// source\n"
    assert (target / "data" / "blob.bin").read_bytes() == b"\x00\x01"
    meta = json.loads((target / persist.META).read_text())
    assert meta["config"] == {"tile_m": 128}
    assert meta["files"] == {name: hashlib.sha256((target / name).read_bytes()).hexdigest()
                             for name in ("kernel.so", "kernel.cu", "data/blob.bin")}


def test_write_dir_replaces_an_existing_directory_whole(tmp_path):
    target = tmp_path / "best"
    persist.write_dir(target, {"kernel.so": b"old", "stale.txt": "only in the old one"}, {"trial": 1})
    persist.write_dir(target, {"kernel.so": b"new"}, {"trial": 7})
    assert sorted(p.name for p in target.iterdir()) == ["kernel.so", persist.META]
    assert (target / "kernel.so").read_bytes() == b"new"
    assert persist.verify_dir(target)["trial"] == 7
    assert _left(tmp_path) == ["best"], "no staged or moved-aside directory is left"


def test_write_dir_that_fails_keeps_the_previous_directory(tmp_path):
    target = tmp_path / "best"
    persist.write_dir(target, {"kernel.so": b"good"}, {"trial": 1})
    with pytest.raises(FileNotFoundError):
        persist.write_dir(target, {"kernel.so": tmp_path / "does-not-exist.so"}, {"trial": 2})
    assert persist.verify_dir(target)["trial"] == 1
    assert (target / "kernel.so").read_bytes() == b"good"
    assert _left(tmp_path) == ["best"]


def test_recover_dir_restores_a_directory_moved_aside_by_a_killed_write(tmp_path):
    target = tmp_path / "best"
    persist.write_dir(target, {"kernel.so": b"good"}, {"trial": 3})
    # A write killed between its two renames: the old version moved aside, the new one staged.
    os.rename(target, tmp_path / ".best.old-4242")
    (tmp_path / ".best.abc123").mkdir()
    (tmp_path / ".best.abc123" / "kernel.so").write_bytes(b"half written")
    persist.recover_dir(target)
    assert persist.verify_dir(target)["trial"] == 3
    assert _left(tmp_path) == ["best"]


def test_recover_dir_leaves_a_complete_directory_alone(tmp_path):
    target = tmp_path / "best"
    persist.write_dir(target, {"kernel.so": b"current"}, {"trial": 9})
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    persist.recover_dir(target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before


def test_recover_dir_without_anything_to_recover_creates_nothing(tmp_path):
    persist.recover_dir(tmp_path / "best")
    assert list(tmp_path.iterdir()) == []


def test_verify_dir_returns_the_meta_of_an_intact_directory(tmp_path):
    target = persist.write_dir(tmp_path / "best", {"kernel.so": b"lib", "kernel.cu": "src"}, {"trial": 5})
    meta = persist.verify_dir(target)
    assert meta["trial"] == 5 and set(meta["files"]) == {"kernel.so", "kernel.cu"}


def test_verify_dir_refuses_a_tampered_file(tmp_path):
    target = persist.write_dir(tmp_path / "best", {"kernel.so": b"lib"}, {})
    (target / "kernel.so").write_bytes(b"lib, patched")
    with pytest.raises(UserError, match="kernel.so does not match its sha256"):
        persist.verify_dir(target)


def test_verify_dir_refuses_a_missing_file(tmp_path):
    target = persist.write_dir(tmp_path / "best", {"kernel.so": b"lib", "kernel.cu": "src"}, {})
    (target / "kernel.cu").unlink()
    with pytest.raises(UserError, match="kernel.cu is missing"):
        persist.verify_dir(target)


def test_verify_dir_refuses_a_directory_without_meta(tmp_path):
    (tmp_path / "best").mkdir()
    with pytest.raises(UserError, match="no meta.json"):
        persist.verify_dir(tmp_path / "best")


def test_verify_dir_refuses_unreadable_meta(tmp_path):
    target = persist.write_dir(tmp_path / "best", {"kernel.so": b"lib"}, {})
    (target / persist.META).write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        persist.verify_dir(target)


def _left(folder: Path) -> list[str]:
    """What a folder holds, less the lock file that outlives the directory it locks."""
    return sorted(p.name for p in folder.iterdir() if p.name != ".best.lock")


def _write_many(target: str, writer: int, count: int, go) -> None:
    go.wait()
    for i in range(count):
        persist.write_dir(Path(target), {"kernel.so": f"{writer}-{i}".encode()}, {"trial": writer * 1000 + i})


def test_two_processes_writing_one_directory_never_fail_nor_mix_their_files(tmp_path):
    target = tmp_path / "best"
    assert run_together(_write_many, [(str(target), w, 200) for w in (1, 2)]) == [0, 0]
    meta = persist.verify_dir(target)  # the files match their hashes: one writer's whole version
    assert (target / "kernel.so").read_bytes() == f"{meta['trial'] // 1000}-{meta['trial'] % 1000}".encode()
    assert _left(tmp_path) == ["best"]
