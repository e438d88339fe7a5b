"""The study's durable outputs: `studies/<study>/best/` and `studies/results/<study>.json`.

Both are written to a temporary name and renamed into place, so a killed run leaves either
the old version or the new one, never half of one. A directory's writers, and its readers that
need all of its files at once, hold its lock: workers sharing a study write the same `best/`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

BEST = "best"
META = "meta.json"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: Path) -> Any:
    """A JSON file's data, or None where it is missing or unreadable (an optional file)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write `text` to a temporary name and rename it into place: the old file or the new one.

    An OSError names `path`, never the temporary name.
    """
    path = Path(path)
    if path.is_dir() or not path.name:
        raise IsADirectoryError(errno.EISDIR, "is a directory, not a file", str(path))
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the published file is not
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str | None) -> None:
    if tmp is not None:
        Path(tmp).unlink(missing_ok=True)  # a failed write leaves the old file and nothing else


@contextlib.contextmanager
def locked(target: Path) -> Iterator[None]:
    """Hold directory `target`'s lock (a file beside it, so that it outlives the directory)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        lock = open(target.parent / f".{target.name}.lock", "a")
    except PermissionError:  # a read-only folder: nobody can write it either
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_dir(target: Path, files: dict[str, Path | bytes | str], meta: dict[str, Any]) -> Path:
    """Replace directory `target` with `files` plus a meta.json holding every file's sha256."""
    with locked(target):
        return _write_dir(Path(target), files, meta)


def _write_dir(target: Path, files: dict[str, Path | bytes | str], meta: dict[str, Any]) -> Path:
    staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        staged.chmod(0o755)  # mkdtemp makes it private; the published directory is not
        hashes = {}
        for name, content in files.items():
            dest = staged / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, dest)
            elif isinstance(content, bytes):
                dest.write_bytes(content)
            else:
                dest.write_text(content)
            hashes[name] = sha256(dest)
        (staged / META).write_text(json.dumps({**meta, "files": hashes}, indent=2) + "\n")
        for written in (*hashes, META):  # on the disk before the rename publishes them
            fsync_file(staged / written)
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.rename(target, old)
        os.rename(staged, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return target


def recover_dir(target: Path) -> None:
    """Put back a directory a killed `write_dir` had moved aside but not yet replaced."""
    target = Path(target)
    if not target.parent.is_dir() or not any(p.is_dir() for p in target.parent.glob(f".{target.name}.*")):
        return  # the common case: nothing was left behind, and nothing to lock
    with locked(target):
        _recover_dir(target)


def _recover_dir(target: Path) -> None:
    if not target.exists():
        olds = sorted(target.parent.glob(f".{target.name}.old-*"), key=lambda p: p.stat().st_mtime)
        if olds:
            os.rename(olds[-1], target)
    for leftover in target.parent.glob(f".{target.name}.*"):
        # Staged copies never published, and old versions the one in place replaced.
        if leftover.is_dir() and (".old-" not in leftover.name or target.exists()):
            shutil.rmtree(leftover, ignore_errors=True)


def verify_dir(target: Path) -> dict[str, Any]:
    """meta.json of `target` after checking that every file it names is there, unchanged."""
    from cutsearch.errors import UserError

    meta_path = Path(target) / META
    if not meta_path.is_file():
        raise UserError(f"{target} has no {META}: not a cutsearch kernel directory")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{meta_path} is not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("files", {}), dict):
        raise UserError(f"{meta_path} is not a cutsearch {META}: it needs a table of files and their sha256")
    for name, digest in meta.get("files", {}).items():
        path = Path(target) / name
        if not path.is_file():
            raise UserError(f"{target}: {name} is missing")
        if sha256(path) != digest:
            raise UserError(f"{target}: {name} does not match its sha256 in {META}: refusing to load it")
    return meta
