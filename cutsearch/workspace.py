"""Where a project's studies live on disk: `studies/` by default, or $CUTSEARCH_STUDIES."""

from __future__ import annotations

import os
import re
from pathlib import Path

from cutsearch.errors import UserError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class Workspace:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root or os.environ.get("CUTSEARCH_STUDIES") or "studies")

    @staticmethod
    def check_name(name: str) -> str:
        if not _NAME.match(name):
            raise UserError(f"study name {name!r} must be letters, digits, '.', '_' or '-' (at most 128)")
        return name

    def study_dir(self, name: str) -> Path:
        return self.root / self.check_name(name)

    def journal(self, name: str) -> Path:
        return self.study_dir(name) / "journal.log"

    def best_dir(self, name: str) -> Path:
        return self.study_dir(name) / "best"

    def artifacts(self, name: str) -> Path:
        return self.study_dir(name) / "artifacts"

    def result_json(self, name: str) -> Path:
        return self.root / "results" / f"{self.check_name(name)}.json"

    def storage_url(self, name: str, override: str | None = None) -> str:
        if override is not None and not override.strip():
            raise UserError("--storage is empty: give a storage URL or journal file, or leave it out")
        return override or str(self.journal(name))

    def writable(self) -> None:
        writable_dir(self.root, "the study directory")


def writable_dir(directory: Path, what: str) -> None:
    """Create `directory` and prove a file can be written there, before any long work starts."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"cannot write {what} {directory}: {exc.strerror or exc}") from None
