"""Headless Chromium for the dashboard and report tests (CI installs Debian's chromium)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CUTSEARCH_TEST_CHROMIUM") or shutil.which("chromium")
needs_chromium = pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (CI installs it)")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def chromium(url: str, screenshot: Path, profile: Path, *, height: int) -> str:
    """The DOM of `url` once its scripts ran, with a PNG of the page kept at `screenshot`."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--hide-scrollbars",
                          f"--window-size=1280,{height}", f"--screenshot={screenshot}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout
