"""Compiler + Cache: one real nvcc build of a CUTLASS kernel, then everything it must reuse.

One CUTLASS kernel is compiled for most of this file (about a minute on two cores): the
module-scoped `built` fixture shares it. One more test builds two kernels alone and sharing a
translation unit, and compares their machine code. The cache key and ptxas parsing are also checked
without nvcc.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cutsearch import codegen, loader
from cutsearch.abi import open_library
from cutsearch import compiler as compiler_module
from cutsearch.cache import MANIFEST, Cache
from cutsearch.codegen import KernelSource, cutlass_version, render
from cutsearch.fatbin import device_code
from cutsearch.compiler import LIBRARY, LOG, SOURCE, CompiledKernel, Compiler, PtxasReport, Toolchain
from cutsearch.outcome import Failure, FailureKind
from cutsearch.problem import Layer
from cutsearch.space import Config, invalid_reason

LAYER = Layer(m=16, n=64, k=64)
CONFIG = Config(tile_m=64, tile_n=16, tile_k=64, kernel_schedule="pingpong", epilogue_schedule="tma")
BROKEN = KernelSource(operation_name="broken", code="this is not C++;\nint main( {\n", cutlass_version="4.2.0")
ABI = ("cs_create", "cs_bind", "cs_run", "cs_workspace_size", "cs_error", "cs_destroy", "cs_abi_version",
       "cs_kernel_name")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(compiler, source, result) of the one real CUTLASS compile."""
    assert invalid_reason(LAYER, CONFIG) is None
    toolchain = Toolchain.find(cutlass_version())
    compiler = Compiler(Cache(tmp_path_factory.mktemp("kernels")), toolchain, jobs=1)
    source = render(LAYER, CONFIG)
    return compiler, source, compiler.compile(source)


@pytest.fixture(scope="module")
def broken(built):
    """The result of compiling a source that is not C++ (nvcc fails fast), in the same cache."""
    compiler = built[0]
    return compiler.compile(BROKEN)


@pytest.fixture
def no_nvcc(monkeypatch):
    """Make any nvcc run fail the test: what follows must come from the cache."""
    calls = []

    def refuse(cmd, *args, **kwargs):
        calls.append(cmd)
        raise AssertionError(f"nvcc ran on a cache hit: {cmd}")

    # Builds start nvcc with Popen and links with run: refuse both.
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    return calls


@pytest.mark.nvcc
def test_real_compile_builds_a_library_with_a_clean_ptxas_report(built):
    compiler, source, result = built
    assert isinstance(result, CompiledKernel), result
    assert result.cached is False
    assert result.library.is_file() and result.library.name == LIBRARY
    assert result.source.read_text() == source.code
    assert result.compile_s > 0
    assert "ptxas info" in result.log
    assert result.ptxas.registers is not None and result.ptxas.registers > 0
    assert result.ptxas.spill_bytes == 0
    assert result.ptxas.serialized_wgmma is False and "C7510" not in result.log
    assert result.ptxas.defect is None


@pytest.mark.nvcc
def test_library_exports_the_c_abi(built):
    compiler, source, result = built
    # cudart is linked statically and loads the driver lazily: the library loads without a GPU.
    lib = ctypes.CDLL(str(result.library))
    for symbol in ABI:
        assert hasattr(lib, symbol), symbol
    lib.cs_kernel_name.restype = ctypes.c_char_p
    assert lib.cs_abi_version() == loader.ABI_VERSION  # the version loaders and exports accept
    assert lib.cs_kernel_name().decode() == source.operation_name


@pytest.fixture(scope="module")
def fallback(built):
    """The cuBLAS fallback's library for a layer with a bias, or a skip where cuBLAS's headers are missing."""
    compiler = built[0]
    result = compiler.compile(codegen.render_fallback(Layer(m=16, n=64, k=64, bias=True)))
    if isinstance(result, Failure) and "cublasLt.h" in result.log:
        pytest.skip("this toolkit has no cuBLAS headers")
    assert isinstance(result, CompiledKernel), result
    return result.library


# (m, n, k, pad_n, pad_k, device, io) -> the reason cs_error(NULL) gives.
BAD_CREATES = [
    ((0, 64, 64, 64, 64, 0, 0), "cs_create: m, n and k must be positive, not 0, 64, 64"),
    ((16, 64, -1, 64, 64, 0, 0), "cs_create: m, n and k must be positive, not 16, 64, -1"),
    ((16, 64, 64, 56, 64, 0, 0), "cs_create: pad_n and pad_k (56, 64) must be at least n and k (64, 64)"),
    ((16, 64, 64, 64, 64, 0, 128), "cs_create: unknown io flags 0x80"),
    ((16, 64, 64, 64, 64, 0, 65), "cs_create: x comes at pitch pad_k (CS_IO_X_PADDED) or K's 16-byte rows "
                                  "(CS_IO_X_ALIGNED), not both"),
]


@pytest.mark.nvcc
@pytest.mark.parametrize("which", ["cutlass", "fallback"])
@pytest.mark.parametrize(("args", "reason"), BAD_CREATES)
def test_a_refused_cs_create_says_why_through_cs_error_of_null(built, which, args, reason, request):
    library = built[2].library if which == "cutlass" else request.getfixturevalue("fallback")
    lib = open_library(library)
    handle = ctypes.c_void_p(1)
    m, n, k, pad_n, pad_k, device, io = args
    assert lib.cs_create(ctypes.byref(handle), m, n, k, pad_n, pad_k, device, 0, 1, 1, 0, 0, io) == 1
    assert handle.value is None
    assert lib.cs_error(None).decode() == reason


@pytest.mark.nvcc
@pytest.mark.parametrize("which", ["cutlass", "fallback"])
def test_a_cs_create_on_a_device_that_is_not_there_says_so(built, which, request):
    library = built[2].library if which == "cutlass" else request.getfixturevalue("fallback")
    lib = open_library(library)
    handle = ctypes.c_void_p()
    assert lib.cs_create(ctypes.byref(handle), 16, 64, 64, 64, 64, 99, 0, 1, 1, 0, 0, 0) == 1
    assert handle.value is None
    reason = lib.cs_error(None).decode()
    # With a GPU, the count; without one, the runtime's own reason for having none.
    assert re.fullmatch(r"cs_create: (there is no device 99 \(\d+ devices\)|.*(device|driver).*)", reason), reason


@pytest.mark.nvcc
def test_manifest_records_the_toolchain_the_key_covers(built):
    compiler, source, result = built
    tc = compiler.toolchain
    assert result.key == tc.key(source)
    entry = compiler.cache.get(result.key)
    assert entry == result.library.parent
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["ok"] is True
    assert manifest["operation"] == source.operation_name
    assert (manifest["nvcc"], manifest["cutlass"], manifest["arch"]) == (tc.nvcc_version, tc.cutlass_version, "sm_90a")
    assert manifest["flags"] == list(tc.flags)
    assert (entry / LOG).read_text() == result.log
    assert not list(compiler.cache.root.glob(".build-*")), "the staging directory was renamed into place"


@pytest.mark.nvcc
def test_second_compile_is_a_cache_hit_without_nvcc(built, no_nvcc):
    compiler, source, first = built
    again = Compiler(Cache(compiler.cache.root), compiler.toolchain, jobs=1)  # a later process
    hit = again.compile(source)
    assert isinstance(hit, CompiledKernel)
    assert hit.cached is True
    assert (hit.key, hit.library, hit.ptxas) == (first.key, first.library, first.ptxas)
    assert again.lookup(source) == hit
    assert no_nvcc == []


@pytest.mark.nvcc
def test_compile_error_is_recorded_with_its_log_and_never_rebuilt(built, broken, no_nvcc):
    compiler, failed = built[0], broken
    assert isinstance(failed, Failure)
    assert failed.kind is FailureKind.COMPILE_ERROR
    assert "error" in failed.message
    assert "kernel.cu" in failed.log and "error" in failed.log
    entry = compiler.cache.get(compiler.toolchain.key(BROKEN))
    assert entry is not None, "the failure is cached like a success"
    assert json.loads((entry / MANIFEST).read_text())["ok"] is False
    assert not (entry / LIBRARY).exists()
    assert (entry / SOURCE).read_text() == BROKEN.code
    assert compiler.compile(BROKEN) == failed  # from the cache: no_nvcc fails any nvcc run
    assert compiler.lookup(BROKEN) == failed
    assert no_nvcc == []


@pytest.mark.nvcc
def test_the_no_nvcc_guard_refuses_a_build(built, no_nvcc):
    compiler = built[0]
    uncached = dataclasses.replace(BROKEN, code=BROKEN.code + "\n// not in the cache\n")
    with pytest.raises(AssertionError, match="nvcc ran"):
        compiler.compile(uncached)
    assert no_nvcc


@pytest.mark.nvcc
def test_compile_many_yields_each_tag_with_its_result(built, broken, no_nvcc):
    compiler, source, first = built
    results = dict(compiler.compile_many([("good", source), ("bad", BROKEN)]))
    assert set(results) == {"good", "bad"}
    assert isinstance(results["good"], CompiledKernel) and results["good"].key == first.key
    assert isinstance(results["bad"], Failure) and results["bad"].kind is FailureKind.COMPILE_ERROR
    assert no_nvcc == []


# --- without nvcc ---------------------------------------------------------------------------

TOOLCHAIN = Toolchain(nvcc="nvcc", nvcc_version="13.0", cutlass_version="4.2.0")
SOURCE_A = KernelSource(operation_name="k", code="// kernel A\n", cutlass_version="4.2.0")


@pytest.mark.parametrize("change", [
    {"flags": (*TOOLCHAIN.flags, "-lineinfo")},
    {"flags": tuple(f for f in TOOLCHAIN.flags if f != "-O3")},
    {"nvcc_version": "12.8"},
    {"cutlass_version": "4.1.0"},
    {"arch": "sm_100a"},
    {"build": "Cuda compilation tools, release 13.0, V13.0.88\ng++ (GCC) 13.2.0"},
    {"headers": "0" * 32},
], ids=["extra-flag", "dropped-flag", "nvcc", "cutlass", "arch", "nvcc-patch-or-host-compiler", "cutlass-headers"])
def test_cache_key_changes_with_everything_that_changes_the_binary(change):
    assert dataclasses.replace(TOOLCHAIN, **change).key(SOURCE_A) != TOOLCHAIN.key(SOURCE_A)


def test_cache_key_changes_with_the_source_and_only_with_it():
    assert TOOLCHAIN.key(SOURCE_A) == TOOLCHAIN.key(dataclasses.replace(SOURCE_A, operation_name="renamed"))
    assert TOOLCHAIN.key(SOURCE_A) != TOOLCHAIN.key(dataclasses.replace(SOURCE_A, code="// kernel B\n"))
    assert TOOLCHAIN.key(SOURCE_A) == dataclasses.replace(TOOLCHAIN, nvcc="/elsewhere/nvcc").key(SOURCE_A)


def test_a_build_stopped_from_outside_is_a_failure_that_is_not_remembered(tmp_path):
    """nvcc out of time, or killed (by the OOM killer, say): the next search builds it again."""
    slow = tmp_path / "nvcc"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    compiler = Compiler(Cache(tmp_path / "cache"), dataclasses.replace(TOOLCHAIN, nvcc=str(slow)), jobs=1,
                        timeout_s=1)
    failed = compiler.compile(SOURCE_A)
    assert isinstance(failed, Failure) and "did not finish in 1 s" in failed.message
    assert compiler.lookup(SOURCE_A) is None and compiler.cache.get(TOOLCHAIN.key(SOURCE_A)) is None
    killed = tmp_path / "killed"
    killed.write_text("#!/bin/sh\nkill -9 $$\n")
    killed.chmod(0o755)
    compiler = Compiler(Cache(tmp_path / "cache"), dataclasses.replace(TOOLCHAIN, nvcc=str(killed)), jobs=1)
    failed = compiler.compile(SOURCE_A)
    assert isinstance(failed, Failure) and "killed by signal 9" in failed.message
    assert compiler.lookup(SOURCE_A) is None


@pytest.mark.parametrize("said", [
    "nvcc error   : 'ptxas' died due to signal 9 (Kill signal)",
    "/usr/bin/ld: cannot find -lcublasLt: No such file or directory",
    "Could not open output file 'tmpxft_0001.cudafe1.cpp'",
])
def test_a_build_the_machine_failed_is_not_remembered(tmp_path, said):
    """A killed ptxas, a missing library, an unwritable temporary directory: the next search
    builds the kernel again, where a compile error is remembered."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho \"{said}\" >&2\nexit 1\n")
    nvcc.chmod(0o755)
    compiler = Compiler(Cache(tmp_path / "cache"), dataclasses.replace(TOOLCHAIN, nvcc=str(nvcc)), jobs=1)
    failed = compiler.compile(SOURCE_A)
    assert isinstance(failed, Failure) and failed.message == f"not built: {said}"
    assert compiler.lookup(SOURCE_A) is None
    nvcc.write_text("#!/bin/sh\necho \"nvcc error   : 'ptxas' died due to signal 11 (Invalid memory reference)\" >&2\n"
                    "exit 1\n")
    assert isinstance(compiler.compile(SOURCE_A), Failure)
    assert compiler.lookup(SOURCE_A) is not None  # a crash on this kernel is the kernel's: remembered


@pytest.mark.nvcc
@pytest.mark.parametrize("name", compiler_module.NVCC_ENVIRONMENT)
def test_the_variables_nvcc_reads_are_in_the_cache_key(monkeypatch, name):
    monkeypatch.setattr(compiler_module, "_headers_digest", lambda: "h")
    for var in compiler_module.NVCC_ENVIRONMENT:
        monkeypatch.delenv(var, raising=False)
    plain = Toolchain.find("4.2.0")
    monkeypatch.setenv(name, "-DSOMETHING" if "FLAGS" in name else "/opt/elsewhere")
    assert Toolchain.find("4.2.0").key(SOURCE_A) != plain.key(SOURCE_A)


def test_the_headers_digest_covers_every_cutlass_header(monkeypatch, tmp_path):
    include = tmp_path / "include" / "cute"
    include.mkdir(parents=True)
    (include / "tensor.hpp").write_text("// one\n")
    monkeypatch.setattr(compiler_module, "cutlass_include_dirs", lambda: [tmp_path / "include"])
    first = compiler_module._headers_digest.__wrapped__()
    (include / "tensor.hpp").write_text("// two\n")
    assert compiler_module._headers_digest.__wrapped__() != first


PTXAS_CLEAN = """ptxas info    : Compiling entry function '_ZN7cutlass13device_kernelI' for 'sm_90a'
ptxas info    : Function properties for _ZN7cutlass13device_kernelI
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 2 barriers
"""
PTXAS_BAD = """ptxas info    : Function properties for _ZN7cutlass13device_kernelI
    24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
ptxas /tmp/x.ptx, line 9; warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized
"""


def test_ptxas_report_reads_registers_spills_and_stack():
    clean = PtxasReport.parse(PTXAS_CLEAN)
    assert (clean.registers, clean.spill_bytes, clean.stack_bytes, clean.serialized_wgmma) == (168, 0, 0, False)
    assert clean.defect is None
    bad = PtxasReport.parse(PTXAS_BAD)
    assert (bad.registers, bad.spill_bytes, bad.stack_bytes) == (255, 24, 24)


# Measured: nvcc 13.0's report of a bf16 split-K kernel with GELU; its reduction kernel spills.
PTXAS_WITH_REDUCTION = """ptxas info    : Compiling entry function '_ZN16cutsearch_reduce10sum_splitsIN7cutlass10bfloat16_tELi2EEEvPT_PKfxxiPKS3_b' for 'sm_90a'
ptxas info    : Function properties for _ZN16cutsearch_reduce10sum_splitsIN7cutlass10bfloat16_tELi2EEEvPT_PKfxxiPKS3_b
    8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 38 registers, used 0 barriers
""" + PTXAS_CLEAN


def test_the_shared_copy_and_reduction_kernels_do_not_make_a_gemm_defective():
    """A translation unit shares them among its kernels: their spills were blamed on every GEMM
    built in a unit with a GELU or SiLU split-K kernel."""
    report = PtxasReport.parse(PTXAS_WITH_REDUCTION)
    assert (report.registers, report.spill_bytes, report.stack_bytes, report.defect) == (168, 0, 0, None)
    assert PtxasReport.parse(PTXAS_WITH_REDUCTION, helpers=True).spill_bytes == 16
    assert PtxasReport.parse(PTXAS_BAD + PTXAS_WITH_REDUCTION).spill_bytes == 24  # the GEMM's own still count


def test_a_kernel_of_a_shared_unit_keeps_its_own_and_the_shared_functions_report():
    from cutsearch.compiler import _own_ptxas_log

    def gemm(ns: str, spills: int) -> str:
        name = f"_ZN7cutlass13device_kernelIN{len(ns)}{ns}6KernelEEEvNT_6ParamsE"
        return (f"ptxas info    : Compiling entry function '{name}' for 'sm_90a'\n"
                f"ptxas info    : Function properties for {name}\n"
                f"    0 bytes stack frame, {spills} bytes spill stores, {spills} bytes spill loads\n"
                f"ptxas info    : Used 168 registers, used 2 barriers\n")

    mine, theirs = "cs_0123456789abcdef", "cs_fedcba9876543210"
    log = gemm(theirs, 40) + PTXAS_WITH_REDUCTION.replace(PTXAS_CLEAN, "") + gemm(mine, 0)
    own = _own_ptxas_log(log, f"namespace {mine} {{ }}")
    assert mine in own and theirs not in own and "sum_splits" in own  # the shared reduction stays
    assert PtxasReport.parse(own).spill_bytes == 0 and PtxasReport.parse(own, helpers=True).spill_bytes == 16
    assert PtxasReport.parse(_own_ptxas_log(log, f"namespace {theirs} {{ }}")).spill_bytes == 80


def test_serialized_wgmma_is_a_defect_even_with_spills():
    assert "C7510" in PtxasReport.parse(PTXAS_BAD).defect
    spills_only = PtxasReport.parse(PTXAS_BAD.replace("(C7510)", ""))
    assert spills_only.defect == "ptxas spilled 24 bytes of registers"


def test_no_ptxas_output_means_unknown_registers():
    assert PtxasReport.parse("").registers is None


@pytest.mark.nvcc
def test_kernels_sharing_a_translation_unit_are_the_same_machine_code_as_alone(tmp_path):
    """Batched builds parse the headers once; each kernel must come out byte for byte the same."""
    layer = Layer(m=256, n=1000, k=1000, bias=True, activation="gelu")
    configs = [Config(tile_m=64, tile_n=64, tile_k=64, kernel_schedule="pingpong", epilogue_schedule="tma", pad=True),
               Config(tile_m=128, tile_n=64, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="tma",
                      swap_ab=True, pad=True)]
    sources = [render(layer, c) for c in configs]
    toolchain = Toolchain.find(cutlass_version())
    alone = dict(Compiler(Cache(tmp_path / "alone"), toolchain, jobs=2, max_batch=1).compile_many(enumerate(sources)))
    shared = dict(Compiler(Cache(tmp_path / "shared"), toolchain, jobs=1).compile_many(enumerate(sources)))
    for i, source in enumerate(sources):
        assert isinstance(alone[i], CompiledKernel) and isinstance(shared[i], CompiledKernel)
        assert json.loads((shared[i].library.parent / "entry.json").read_text())["batch"] == 2
        mine, batched = device_code(alone[i].library), device_code(shared[i].library)
        gemm = [name for name in mine if "device_kernel" in name]
        assert len(gemm) == 1 and batched[gemm[0]] == mine[gemm[0]]
        # The library answers under the plain C ABI names, for its own kernel.
        lib = ctypes.CDLL(str(shared[i].library))
        lib.cs_kernel_name.restype = ctypes.c_char_p
        assert lib.cs_kernel_name().decode() == source.operation_name
        assert shared[i].ptxas.registers is not None and shared[i].ptxas.spill_bytes == 0


@pytest.mark.nvcc
def test_stream_k_and_persistent_kernels_build_in_units_of_their_own_kind(tmp_path):
    """Stream-K kernels are built without grid-dependency control (CUTLASS 4.2's stream-K
    scheduler does not compile with it), so they cannot share a unit with the others."""
    layer = Layer(m=256, n=1001, k=999, bias=True)
    coop = dict(tile_m=128, tile_n=64, tile_k=64, kernel_schedule="cooperative", pad=True)
    configs = [Config(**coop, epilogue_schedule="tma", tile_scheduler="streamk"),
               Config(**coop, epilogue_schedule="tma"),
               Config(**coop, epilogue_schedule="nosmem", tile_scheduler="streamk"),
               Config(**coop, epilogue_schedule="nosmem")]
    compiler = Compiler(Cache(tmp_path / "cache"), Toolchain.find(cutlass_version()), jobs=2)
    units = []
    shared = compiler._compile_batch
    compiler._compile_batch = lambda sources: units.append(sorted(s.code.count("StreamKScheduler") > 0
                                                                  for s in sources)) or shared(sources)
    results = dict(compiler.compile_many((c, render(layer, c)) for c in configs))
    assert sorted(units) == [[False, False], [True, True]]
    for config, built in results.items():
        assert isinstance(built, CompiledKernel), (config.key, built)
        assert json.loads((built.library.parent / MANIFEST).read_text())["batch"] == 2


def test_device_code_of_a_file_without_cubins_is_empty(tmp_path):
    host_only = tmp_path / "host.so"
    host_only.write_bytes(b"\x7fELF" + b"\x02\x01" + b"\0" * 64 + b"\x7fELF\x01\x01garbage")
    assert device_code(host_only) == {}


@pytest.mark.nvcc
def test_a_kernel_that_breaks_a_shared_unit_fails_alone_and_the_others_still_build(tmp_path):
    good = render(LAYER, CONFIG)
    # An error inside the kernel's own part, so that the two sources can share a unit.
    opening = re.search(r"namespace (cs_[0-9a-f]{16}) \{\n", good.code)
    planted = (good.code[:opening.end()] + 'static_assert(sizeof(int) == 0, "planted error");\n'
               + good.code[opening.end():]).replace(opening[1], "cs_" + "0" * 16)
    broken = dataclasses.replace(good, code=planted)
    compiler = Compiler(Cache(tmp_path / "cache"), Toolchain.find(cutlass_version()), jobs=1)
    units = []
    shared = compiler._compile_batch
    compiler._compile_batch = lambda sources: units.append(len(sources)) or shared(sources)
    results = dict(compiler.compile_many([("good", good), ("broken", broken)]))
    assert units == [2]  # they were tried together first
    assert isinstance(results["good"], CompiledKernel)
    assert isinstance(results["broken"], Failure) and results["broken"].kind == FailureKind.COMPILE_ERROR
    assert "planted error" in results["broken"].log
    # The good kernel was then built alone: a plain entry.
    assert "batch" not in json.loads((results["good"].library.parent / MANIFEST).read_text())


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset")
def test_default_nvcc_jobs_follow_the_cpus_the_process_may_use():
    """Under taskset (or a container's cpuset) the machine's CPU count would oversubscribe."""
    code = "from cutsearch.compiler import usable_cpus; print(usable_cpus())"
    run = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).resolve().parent.parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "1"


@pytest.mark.nvcc
def test_the_gemm_and_the_copies_are_built_for_overlapped_launches(tmp_path):
    """PDL needs griddepcontrol in the kernels themselves: waits before the first global reads,
    and the trigger that lets the next kernel launch early."""
    layer = Layer(m=256, n=1001, k=999, bias=True)
    ptx = _ptx(tmp_path, render(layer, Config(tile_m=64, tile_n=64, tile_k=64, kernel_schedule="pingpong",
                                              epilogue_schedule="tma", pad=True)))
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"\.entry (\w+)\(", ptx)]
    bodies = {name: ptx[at:end] for (at, name), (end, _) in zip(starts, starts[1:] + [(len(ptx), "")])}
    gemm = [body for name, body in bodies.items() if "device_kernel" in name]
    copies = [body for name, body in bodies.items() if "repitch" in name]
    assert len(gemm) == 1 and len(copies) == 2  # 32- and 64-bit indexing
    for body in gemm + copies:
        assert "griddepcontrol.wait" in body and "griddepcontrol.launch_dependents" in body


@pytest.mark.nvcc
def test_a_224_wide_tile_is_one_wgmma_a_k_step(tmp_path):
    """CuTe's extended WGMMA shapes are on: without them a 224-wide tile issues seven m64n32k16
    instructions a k-step."""
    source = render(Layer(m=4096, n=5000, k=1024, bias=True),
                    Config(tile_m=128, tile_n=224, tile_k=64, kernel_schedule="cooperative", epilogue_schedule="tma"))
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", _ptx(tmp_path, source)))
    assert shapes == {"m64n224k16"}


@pytest.mark.nvcc
def test_a_base_width_tile_compiles_to_the_same_ptx_without_the_extended_shapes(tmp_path, monkeypatch):
    """The extended shapes' headers are left out where the tile's width is a base one: that must
    change nothing but the time nvcc takes."""
    layer = Layer(m=256, n=1024, k=1024, bias=True, activation="gelu")
    config = Config(tile_m=128, tile_n=128, tile_k=64, cluster_n=2, kernel_schedule="pingpong",
                    epilogue_schedule="tma", swap_ab=True)
    assert invalid_reason(layer, config) is None
    base = render(layer, config)
    monkeypatch.setattr(codegen, "BASE_MMA_WIDTHS", ())
    extended = render(layer, config)
    define = "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED"
    assert define in extended.code and define not in base.code

    def normalized(source: KernelSource, where: Path) -> str:
        where.mkdir()
        ptx = _ptx(where, source).replace(re.search(r"cs_[0-9a-f]{16}", source.code)[0], "NS")
        # Names of the unit's anonymous namespaces, hashed from its contents.
        return re.sub(r"[0-9a-f]{8}_\d+_\w+?_cu_[0-9a-f]{8}", "UNIT", ptx)

    base_ptx = normalized(base, tmp_path / "base")
    assert "m64n128k16" in base_ptx and base_ptx == normalized(extended, tmp_path / "extended")


def _ptx(tmp_path: Path, source: KernelSource) -> str:
    """`source` compiled to PTX with the kernels' own flags."""
    from cutsearch.codegen import cutlass_include_dirs

    (tmp_path / SOURCE).write_text(source.code)
    toolchain = Toolchain.find(cutlass_version())
    flags = [f for f in toolchain.flags if f not in ("-shared", "-Xptxas=-v", "-Xcompiler=-fPIC")]
    run = subprocess.run([toolchain.nvcc, *(f"-I{p}" for p in cutlass_include_dirs()), *flags, "-ptx", SOURCE,
                          "-o", "kernel.ptx"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    return (tmp_path / "kernel.ptx").read_text()


@pytest.mark.nvcc
def test_the_choices_outside_the_default_space_build(tmp_path):
    """256-deep k-tiles and clusters of four are searchable (`Space(layer, tile_k=TILE_K,
    clusters=CLUSTERS)`) and measured on the H200, so they must build."""
    layer = Layer(m=256, n=1024, k=1024, bias=True)
    pingpong = dict(tile_m=64, tile_n=32, kernel_schedule="pingpong", epilogue_schedule="tma", swap_ab=True)
    configs = [Config(**pingpong, tile_k=256), Config(**pingpong, tile_k=128, cluster_m=4),
               Config(**pingpong, tile_k=128, cluster_m=2, cluster_n=2)]
    for c in configs:
        assert invalid_reason(layer, c) is None, c.key
    compiler = Compiler(Cache(tmp_path / "cache"), Toolchain.find(cutlass_version()), jobs=3)
    results = dict(compiler.compile_many((c, render(layer, c)) for c in configs))
    for config, built in results.items():
        assert isinstance(built, CompiledKernel), (config.key, built)
        assert not built.ptxas.defect, (config.key, built.ptxas)
    # The cluster shape reaches the kernel: CUTLASS's ClusterShape type names it.
    assert "Shape<cute::_4,cute::_1,cute::_1>" in render(layer, configs[1]).code.replace(" ", "")
    assert "Shape<cute::_2,cute::_2,cute::_1>" in render(layer, configs[2]).code.replace(" ", "")


@pytest.mark.nvcc
@pytest.mark.parametrize("activation, functor", [("silu", "SiLu"), ("gelu", "Gelu")])
def test_the_visitor_tree_builds_with_our_activation(tmp_path, activation, functor):
    """The fused SiLU and GELU are templates/activation.cuh's functors in CUTLASS's visitor tree."""
    layer = Layer(m=2787, n=5120, k=768, dtype="bf16", bias=True, activation=activation)
    config = Config(tile_m=128, tile_n=128, tile_k=64, cluster_n=2, kernel_schedule="cooperative",
                    epilogue_schedule="tma", swap_ab=True)
    source = render(layer, config)
    assert f"cutsearch_act::{functor}, cutlass::bfloat16_t, float" in source.code
    built = Compiler(Cache(tmp_path / "cache"), Toolchain.find(cutlass_version()), jobs=1).compile(source)
    assert isinstance(built, CompiledKernel), built
    assert not built.ptxas.defect, built.ptxas


def test_a_consumer_that_stops_leaves_no_nvcc_running(tmp_path):
    """Ctrl-C (or any stop) while kernels build ends every nvcc, and its children, at once."""
    pids = tmp_path / "pids"
    slow = tmp_path / "nvcc"
    slow.write_text(f"#!/bin/sh\nsleep 300 &\necho $! >> {pids}\nwait\n")  # a child, as cicc is
    slow.chmod(0o755)
    compiler = Compiler(Cache(tmp_path / "cache"), dataclasses.replace(TOOLCHAIN, nvcc=str(slow)), jobs=2)
    sources = [(i, dataclasses.replace(SOURCE_A, code=f"// kernel {i}\n")) for i in range(4)]
    builds = compiler.compile_many(sources)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        for _ in _interrupt_after(builds, pids, count=2):
            pass
    assert time.monotonic() - started < 60
    children = [int(p) for p in pids.read_text().split()]
    time.sleep(0.5)
    assert children and not [p for p in children if _alive(p)]
    assert compiler.cache.get(TOOLCHAIN.key(sources[0][1])) is None


def _interrupt_after(builds, pids, *, count):
    """Start the builds, wait until `count` nvcc children run, then stop as Ctrl-C would."""
    def watch():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < count):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)

    def stop(*_):
        raise TimeoutError("stopped")

    previous = signal.signal(signal.SIGUSR1, stop)
    threading.Thread(target=watch, daemon=True).start()
    try:
        yield from builds
    finally:
        signal.signal(signal.SIGUSR1, previous)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie is dead, not reaped
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.nvcc
def test_build_fills_the_cache_with_what_a_new_study_builds_first(tmp_path):
    """`cutsearch build` compiles a new study's first configs; the search then finds them built."""
    from cutsearch.cache import default_cache_dir
    from cutsearch.search import first_configs
    from cutsearch.space import Space
    from cutsearch.tuner import prebuild

    layer = Layer(m=64, n=64, k=64, dtype="f16")
    results = dict(prebuild({"tiny": layer}, top=2, jobs=2))
    assert len(results) == 2 and all(isinstance(r, CompiledKernel) and not r.cached for r in results.values())
    assert all(tag.startswith("tiny ") for tag in results)
    compiler = Compiler(Cache(default_cache_dir()), Toolchain.find(cutlass_version()), jobs=1)
    for config in first_configs(layer, Space(layer), 2):
        assert isinstance(compiler.lookup(render(layer, config)), CompiledKernel)
    suite = tmp_path / "suite.toml"
    suite.write_text("[tiny]\nM = 64\nN = 64\nK = 64\n")
    cli = subprocess.run([sys.executable, "-m", "cutsearch", "build", str(suite), "--top", "2"],
                         capture_output=True, text=True, cwd=Path(__file__).parent.parent,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert cli.returncode == 0, cli.stderr
    assert "2 distinct kernels: 0 built, 2 already cached, 0 failed" in cli.stdout
