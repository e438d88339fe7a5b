"""A test-only C++ harness around the per-call kernels (templates/copy.cuh, reduce.cuh), built by
the compiler the search uses, so that those kernels can be checked without a CUTLASS kernel."""

from __future__ import annotations

from pathlib import Path

from cutsearch import codegen
from cutsearch.cache import Cache
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain


def build_harness(source: Path, cache_dir: Path) -> CompiledKernel:
    """`source` with the per-call kernels inlined where it says `${copy_kernels}`, built."""
    text = source.read_text().replace("${copy_kernels}", codegen.copy_kernels())
    kernel = codegen.KernelSource(operation_name=source.stem, code=text, cutlass_version="none")
    built = Compiler(Cache(cache_dir), Toolchain.find("none")).compile(kernel)
    assert isinstance(built, CompiledKernel), built
    return built
