"""A kernel searched and exported for a GPU test, where the test was given no export to run."""

from __future__ import annotations

from pathlib import Path

import pytest

import cutsearch
from cutsearch.export import export
from cutsearch.problem import Layer


def search_and_export(layer: Layer, out: Path) -> Path:
    """A two-trial search's kernel, exported; a skip where cuBLAS won (the export would be its
    fallback, which test_fallback_gpu covers)."""
    study = f"export-{layer.slug}"
    result = cutsearch.tune(layer, trials=2, evaluator="gpu", study=study, command="pytest search and export")
    assert result.best is not None, f"no candidate ran correctly: {result.failures}"
    if result.best.median_us >= result.cublas_us:
        pytest.skip(f"cuBLAS won ({result.cublas_us:.1f} against {result.best.median_us:.1f} µs)")
    return export(study, out=out)
