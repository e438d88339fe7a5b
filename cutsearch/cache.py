"""A content-addressed store of built kernels, safe for concurrent processes.

An entry is a directory named by its key. It is built in a private temporary directory and
renamed into place, so readers never see a torn entry; the rename is atomic on one file
system, and the first writer wins.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from cutsearch.persist import fsync_file

MANIFEST = "entry.json"


def default_cache_dir() -> Path:
    """$CUTSEARCH_CACHE, else the user's cache directory: built kernels outlive any one study."""
    return Path(os.environ.get("CUTSEARCH_CACHE") or Path.home() / ".cache" / "cutsearch" / "kernels")


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> Path | None:
        entry = self.path(key)
        return entry if (entry / MANIFEST).is_file() else None

    def manifest(self, key: str) -> dict[str, Any] | None:
        entry = self.get(key)
        if entry is None:
            return None
        try:
            return json.loads((entry / MANIFEST).read_text())
        except (OSError, ValueError):
            # Torn by a crash of the machine before its pages reached the disk: build it again.
            shutil.rmtree(entry, ignore_errors=True)
            return None

    def staging(self) -> Path:
        """A private directory to build an entry in, on the cache's file system."""
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=".build-", dir=self.root))

    def commit(self, key: str, staged: Path, manifest: dict[str, Any]) -> Path:
        """Publish `staged` as entry `key`; if another process published it first, keep theirs."""
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        for built in staged.iterdir():  # on the disk before the rename publishes them
            if built.is_file():
                fsync_file(built)
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staged, target)
        except OSError:
            if self.get(key) is None:
                raise
            shutil.rmtree(staged, ignore_errors=True)
        return target

    def discard(self, staged: Path) -> None:
        shutil.rmtree(staged, ignore_errors=True)

    def sweep_staging(self, older_than_s: float = 3600.0) -> None:
        """Remove builds that a killed process left half-done (old enough not to be live)."""
        if self.root.is_dir():
            now = time.time()
            for stale in self.root.glob(".build-*"):
                if now - stale.stat().st_mtime > older_than_s:
                    shutil.rmtree(stale, ignore_errors=True)
