"""A test-only C++ harness around the per-call kernels (templates/copy.cuh, reduce.cuh) or inside
a rendered kernel, built by the compiler the search uses, so that those parts can be checked
without a CUTLASS kernel."""

from __future__ import annotations

import re
from pathlib import Path

from cutsearch import codegen
from cutsearch.cache import Cache
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain


def build_harness(source: Path, cache_dir: Path, *, after: codegen.KernelSource | None = None) -> CompiledKernel:
    """`source` with the per-call kernels inlined where it says `${copy_kernels}`, built; or,
    `after` a rendered kernel, appended to it with `${namespace}` its namespace."""
    text = source.read_text().replace("${copy_kernels}", codegen.copy_kernels())
    if after is not None:
        namespace = re.search(r"^namespace (cs_[0-9a-f]+) \{", after.code, re.M)
        assert namespace, "a rendered kernel names its namespace"
        text = after.code + text.replace("${namespace}", namespace.group(1))
    kernel = codegen.KernelSource(operation_name=source.stem, code=text, cutlass_version="none")
    built = Compiler(Cache(cache_dir), Toolchain.find("none")).compile(kernel)
    assert isinstance(built, CompiledKernel), built
    return built
