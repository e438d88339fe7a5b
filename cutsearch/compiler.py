"""KernelSource -> CompiledKernel: the only module that runs nvcc.

Builds run in parallel behind the content-addressed cache. The cache key holds everything
that changes the binary: the source, the flags, nvcc's full version, the host compiler's, the
CUTLASS version and a digest of its headers, the environment variables nvcc reads, and the
target architecture.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import functools
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from cutsearch.cache import Cache, default_cache_dir
from cutsearch.codegen import (ABI_FUNCTIONS, KernelSource, batch_unit, cutlass_include_dirs, cutlass_version,
                               unit_group)
from cutsearch.errors import EnvironmentProblem, UserError
from cutsearch.outcome import Failure, FailureKind

ARCH = "sm_90a"
FLAGS = (
    "-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr",
    "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-fPIC", "-shared", "-Xptxas=-v",
)
MIN_NVCC = (12, 0)  # the first toolkit that targets sm_90a
LIBRARY = "kernel.so"
SOURCE = "kernel.cu"
LOG = "nvcc.log"
# Kernels per translation unit at most. Sharing one unit parses the CUTLASS headers once for
# all of them; larger units only add latency.
MAX_BATCH = 8
INTERRUPTED = "not built"  # how the log of a build stopped from outside begins: never cached
# Variables that nvcc or its host compiler read: they add flags, headers or libraries.
NVCC_ENVIRONMENT = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CPATH", "CPLUS_INCLUDE_PATH",
                    "C_INCLUDE_PATH", "LIBRARY_PATH")
# Failures of the machine, not of the source (cicc or ptxas killed, by the OOM killer say, an
# unwritable temporary directory, a missing library): never cached, so a later run builds the
# kernel again. A ptxas that crashes on a kernel (signal 11) is the kernel's, and remembered.
_MACHINE_FAILURE = re.compile(r"died due to signal (?:9|15)\b|[Cc]ould not open output file|cannot find -l|"
                              r"exited 0 but wrote no library")


@dataclasses.dataclass(frozen=True)
class Toolchain:
    nvcc: str
    nvcc_version: str
    cutlass_version: str
    arch: str = ARCH
    flags: tuple[str, ...] = FLAGS
    build: str = ""  # nvcc's and the host compiler's full versions, and nvcc's environment
    headers: str = ""  # a digest of the CUTLASS headers compiled against: an edited copy is another build

    @classmethod
    def find(cls, cutlass_version: str) -> Toolchain:
        nvcc = os.environ.get("CUTSEARCH_NVCC") or shutil.which("nvcc")
        if not nvcc:
            cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
            candidate = Path(cuda_home) / "bin" / "nvcc"
            nvcc = str(candidate) if candidate.is_file() else None
        if not nvcc:
            raise EnvironmentProblem("nvcc not found: install a CUDA toolkit (12.0 or newer) and put nvcc on PATH")
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentProblem(f"cannot run {nvcc}: {exc}") from None
        found = re.search(r"release (\d+)\.(\d+)", out)
        if not found:
            raise EnvironmentProblem(f"cannot read the version of {nvcc}")
        version = (int(found[1]), int(found[2]))
        if version < MIN_NVCC:
            raise EnvironmentProblem(f"nvcc {version[0]}.{version[1]} is too old for sm_90a: CUDA 12.0 or newer is needed")
        environment = "".join(f"\n{name}={os.environ[name]}" for name in NVCC_ENVIRONMENT if name in os.environ)
        return cls(nvcc=nvcc, nvcc_version=f"{version[0]}.{version[1]}", cutlass_version=cutlass_version,
                   build=out.strip() + "\n" + _host_compiler() + environment, headers=_headers_digest())

    def key(self, source: KernelSource) -> str:
        identity = {"source": source.digest, "flags": list(self.flags), "nvcc": self.nvcc_version,
                    "cutlass": self.cutlass_version, "arch": self.arch, "build": self.build,
                    "headers": self.headers}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def _host_compiler() -> str:
    """`gcc --version`: nvcc preprocesses and compiles the host code with it (or with NVCC_CCBIN's)."""
    ccbin = os.environ.get("NVCC_CCBIN")
    gcc = str(Path(ccbin) / "gcc") if ccbin and Path(ccbin).is_dir() else ccbin or shutil.which("gcc")
    try:
        out = subprocess.run([gcc, "--version"], capture_output=True, text=True, timeout=60).stdout if gcc else ""
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out.strip() or "host compiler: not found"  # nvcc then fails, and says why


def _machine_failure(log: str) -> str | None:
    """The line of a failed build's log that blames the machine, if one does."""
    return next((line.strip() for line in log.splitlines() if _MACHINE_FAILURE.search(line)), None)


@functools.cache
def _headers_digest() -> str:
    """sha256 of every file under the CUTLASS include directories, by relative path (about 0.1 s)."""
    digest = hashlib.sha256()
    for root in cutlass_include_dirs():
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


@dataclasses.dataclass(frozen=True)
class PtxasReport:
    registers: int | None
    spill_bytes: int
    stack_bytes: int
    serialized_wgmma: bool  # ptxas C7510: wgmma serialized, a slow kernel

    @property
    def defect(self) -> str | None:
        if self.serialized_wgmma:
            return "ptxas serialized the wgmma instructions (C7510)"
        if self.spill_bytes:
            return f"ptxas spilled {self.spill_bytes} bytes of registers"
        return None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def parse(cls, log: str, *, helpers: bool = False) -> PtxasReport:
        """The GEMM kernel's report. The copy and split-K reduction kernels beside it are left
        out unless `helpers`: a translation unit shares them among its kernels, and a few bytes
        of spills there (the GELU and SiLU reductions) cost nothing measurable."""
        kept = log if helpers else _without_helpers(log)
        regs = [int(r) for r in re.findall(r"Used (\d+) registers", kept)]
        spills = sum(int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", kept))
        stack = max((int(s) for s in re.findall(r"(\d+) bytes stack frame", kept)), default=0)
        return cls(registers=max(regs) if regs else None, spill_bytes=spills, stack_bytes=stack,
                   serialized_wgmma="C7510" in log)


@dataclasses.dataclass(frozen=True)
class CompiledKernel:
    key: str
    library: Path
    source: Path
    ptxas: PtxasReport
    compile_s: float
    cached: bool  # True when this process found it built
    log: str = ""


def usable_cpus() -> int:
    """CPUs this process may run on: fewer than the machine's under taskset or a container's cpuset."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class Compiler:
    def __init__(self, cache: Cache, toolchain: Toolchain, *, jobs: int | None = None,
                 timeout_s: float = 900.0, max_batch: int = MAX_BATCH) -> None:
        if jobs is not None and jobs <= 0:
            raise UserError(f"--jobs must be positive, got {jobs}")
        self.cache = cache
        self.toolchain = toolchain
        self.jobs = jobs or usable_cpus()
        self._running: set[subprocess.Popen] = set()  # nvcc processes of this compiler's threads
        self._stopping = False
        self.timeout_s = timeout_s
        self.max_batch = max(1, max_batch)

    def lookup(self, source: KernelSource) -> CompiledKernel | Failure | None:
        key = self.toolchain.key(source)
        manifest = self.cache.manifest(key)
        return None if manifest is None else self._from_manifest(key, manifest, cached=True)

    def compile(self, source: KernelSource) -> CompiledKernel | Failure:
        key = self.toolchain.key(source)
        manifest = self.cache.manifest(key)
        if manifest is not None:
            return self._from_manifest(key, manifest, cached=True)
        try:
            staged = self.cache.staging()
            (staged / SOURCE).write_text(source.code)
        except OSError as exc:
            raise _disk_problem(exc, self.cache.root) from None
        log, ok, elapsed = self._nvcc([*self.toolchain.flags, SOURCE, "-o", LIBRARY,
                                       *(f"-l{lib}" for lib in source.libraries)], staged, self.timeout_s)
        if ok and not (staged / LIBRARY).is_file():
            log, ok = log + "\nnvcc exited 0 but wrote no library", False
        if not ok and not log.startswith(INTERRUPTED) and (machine := _machine_failure(log)):
            log = f"{INTERRUPTED}: {machine}\n" + log
        if not ok and log.startswith(INTERRUPTED):
            # Out of time, killed (the OOM killer, say), or short of a file: the machine's doing,
            # not the source's.
            self.cache.discard(staged)
            return Failure(kind=FailureKind.COMPILE_ERROR, message=log.splitlines()[0][:300], log=log)
        if not ok:
            # A compile error is a property of the source: remember it, never build it again.
            (staged / LIBRARY).unlink(missing_ok=True)
        try:
            (staged / LOG).write_text(log)
            manifest = self._manifest(source, ok=ok, compile_s=round(elapsed, 3))
            self.cache.commit(key, staged, manifest)
        except OSError as exc:
            self.cache.discard(staged)
            raise _disk_problem(exc, self.cache.root) from None
        return self._from_manifest(key, self.cache.manifest(key) or manifest, cached=False)

    def compile_many(self, sources: Iterable[tuple[object, KernelSource]],
                     ) -> Iterator[tuple[object, CompiledKernel | Failure]]:
        """Compile in parallel; yield (tag, result) as each finishes.

        With more kernels to build than nvcc processes, kernels share translation units, up to
        max_batch each: that parses the headers once per unit instead of once per kernel.
        """
        pending: dict[str, tuple[KernelSource, list[object]]] = {}
        for tag, src in sources:
            found = self.lookup(src)
            if found is not None:
                yield tag, found
            else:
                pending.setdefault(self.toolchain.key(src), (src, []))[1].append(tag)
        if not pending:
            return
        work = list(pending.values())
        size = min(self.max_batch, math.ceil(len(work) / self.jobs))
        # Units hold only sources that can share one (the same macros before the headers).
        kinds: dict[object, list] = {}
        for item in work:
            kinds.setdefault(unit_group(item[0]) or id(item), []).append(item)
        groups = [kind[i:i + size] for kind in kinds.values() for i in range(0, len(kind), size)]
        pool = concurrent.futures.ThreadPoolExecutor(self.jobs)
        self._stopping = False
        try:
            futures = [pool.submit(self._build_group, [src for src, _ in group]) for group in groups]
            tags = {future: group for future, group in zip(futures, groups)}
            for done in concurrent.futures.as_completed(futures):
                for (_, group_tags), result in zip(tags[done], done.result()):
                    for tag in group_tags:
                        yield tag, result
        except BaseException:  # Ctrl-C, a full disk, a consumer that stopped: no build outlives it
            self._stopping = True
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in list(self._running):
                _kill_group(proc)
            raise
        finally:
            pool.shutdown(wait=True)

    def _build_group(self, sources: list[KernelSource]) -> list[CompiledKernel | Failure]:
        if len(sources) > 1:
            built = self._compile_batch(sources)
            if built is not None:
                return built
        # Alone, so that a kernel that does not compile costs only itself.
        return [self.compile(src) for src in sources]

    def _compile_batch(self, sources: list[KernelSource]) -> list[CompiledKernel | Failure] | None:
        """Build several kernels from one translation unit, each into its own library.

        The object is linked once per kernel, with the kernel's prefixed C ABI aliased to the
        plain names. None when the unit cannot be built; the caller then builds each alone.
        """
        unit = batch_unit(sources)
        if unit is None:
            return None
        code, prefixes = unit
        try:
            staged = self.cache.staging()
            (staged / "batch.cu").write_text(code)
        except OSError as exc:
            raise _disk_problem(exc, self.cache.root) from None
        flags = [f for f in self.toolchain.flags if f != "-shared"]
        log, ok, elapsed = self._nvcc([*flags, "-c", "batch.cu", "-o", "batch.o"], staged,
                                      self.timeout_s * len(sources))
        if not ok:
            self.cache.discard(staged)
            return None
        results = []
        for src, prefix in zip(sources, prefixes):
            results.append(self._link_one(src, prefix, staged / "batch.o", log, elapsed, len(sources)))
        self.cache.discard(staged)
        return results

    def _link_one(self, src: KernelSource, prefix: str, obj: Path, log: str, elapsed: float,
                  size: int) -> CompiledKernel | Failure:
        key = self.toolchain.key(src)
        manifest = self.cache.manifest(key)
        if manifest is not None:  # another process built it meanwhile
            return self._from_manifest(key, manifest, cached=True)
        try:
            staged = self.cache.staging()
            (staged / SOURCE).write_text(src.code)
            aliases = [f"-Xlinker=--defsym={f}={prefix}{f}" for f in ABI_FUNCTIONS]
            link = subprocess.run([self.toolchain.nvcc, "-shared", str(obj), "-o", LIBRARY, *aliases,
                                   *(f"-l{lib}" for lib in src.libraries)],
                                  cwd=staged, capture_output=True, text=True, timeout=self.timeout_s)
            own = _own_ptxas_log(log, src.code)
            note = f"built in one translation unit with {size - 1} other kernel(s) in {elapsed:.1f} s\n"
            (staged / LOG).write_text(note + own + link.stdout + link.stderr)
            if link.returncode != 0 or not (staged / LIBRARY).is_file():
                self.cache.discard(staged)
                return self.compile(src)  # a link problem is not the kernel's: build it alone
            manifest = self._manifest(src, ok=True, compile_s=round(elapsed / size, 3), batch=size,
                                      batch_wall_s=round(elapsed, 3))
            self.cache.commit(key, staged, manifest)
        except OSError as exc:
            raise _disk_problem(exc, self.cache.root) from None
        return self._from_manifest(key, self.cache.manifest(key) or manifest, cached=False)

    def _nvcc(self, args: list[str], staged: Path, timeout_s: float) -> tuple[str, bool, float]:
        """Run nvcc with the CUTLASS includes in `staged`: (log, ok, seconds). A full disk is raised."""
        cmd = [self.toolchain.nvcc, *(f"-I{p}" for p in cutlass_include_dirs()), *args]
        start = time.monotonic()
        # A session of its own, so that a timeout or an interrupt ends nvcc's cicc and ptxas too.
        proc = subprocess.Popen(cmd, cwd=staged, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self._running.add(proc)
        if self._stopping:
            _kill_group(proc)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
            log, ok = stdout + stderr, proc.returncode == 0
            if proc.returncode < 0:
                log = f"{INTERRUPTED}: nvcc was killed by signal {-proc.returncode}\n" + log
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            log, ok = f"{INTERRUPTED}: nvcc did not finish in {timeout_s:.0f} s", False
        finally:
            self._running.discard(proc)
        if not ok and re.search(r"No space left on device", log):
            self.cache.discard(staged)
            raise EnvironmentProblem(f"the disk holding {self.cache.root} is full: free space and resume")
        return log, ok, time.monotonic() - start

    def _manifest(self, source: KernelSource, **fields: object) -> dict:
        return {**fields, "operation": source.operation_name, "nvcc": self.toolchain.nvcc_version,
                "cutlass": self.toolchain.cutlass_version, "arch": self.toolchain.arch,
                "flags": list(self.toolchain.flags)}

    def _from_manifest(self, key: str, manifest: dict, *, cached: bool) -> CompiledKernel | Failure:
        entry = self.cache.path(key)
        log = (entry / LOG).read_text() if (entry / LOG).is_file() else ""
        if not manifest.get("ok"):
            first = next((line for line in log.splitlines() if "error" in line), "nvcc failed")
            return Failure(kind=FailureKind.COMPILE_ERROR, message=first.strip()[:300], log=log)
        return CompiledKernel(key=key, library=entry / LIBRARY, source=entry / SOURCE,
                              ptxas=PtxasReport.parse(log), compile_s=manifest["compile_s"], cached=cached, log=log)


def local_compiler(*, jobs: int | None = None) -> Compiler:
    """This machine's nvcc behind the user's kernel cache."""
    return Compiler(Cache(default_cache_dir()), Toolchain.find(cutlass_version()), jobs=jobs)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


HELPERS = ("cutsearch_copy", "cutsearch_reduce")  # the namespaces of the copy and reduction kernels
_PTXAS_FUNCTION = re.compile(r"(?:entry function|Function properties for|function) '?(\w+)")  # a report's function


def _ptxas_lines(log: str, keep: Callable[[str], bool], also: str | None = None) -> list[str]:
    """The lines of a ptxas report about the functions whose names `keep` accepts (and, given
    `also`, every line that holds it)."""
    kept, current = [], True
    for line in log.splitlines():
        named = _PTXAS_FUNCTION.search(line)
        if named:
            current = keep(named[1])
        if current or (also is not None and also in line):
            kept.append(line)
    return kept


def _without_helpers(log: str) -> str:
    """A ptxas report without the lines about the copy and reduction kernels' functions."""
    return "\n".join(_ptxas_lines(log, lambda name: not any(h in name for h in HELPERS)))


def _own_ptxas_log(log: str, code: str) -> str:
    """The part of a shared unit's ptxas report about one kernel: its own functions (named in
    its namespace) and the shared ones (named in none)."""
    found = re.search(r"namespace (cs_[0-9a-f]{16})", code)
    if found is None:
        return log
    own = found[1]
    mine = _ptxas_lines(log, lambda name: own in name or re.search(r"cs_[0-9a-f]{16}", name) is None, also=own)
    return "\n".join(mine) + "\n"


def _disk_problem(exc: OSError, where: Path) -> EnvironmentProblem:
    if exc.errno == errno.ENOSPC:
        return EnvironmentProblem(f"the disk holding {where} is full: free space and resume")
    return EnvironmentProblem(f"cannot write the kernel cache at {where}: {exc.strerror or exc}")

