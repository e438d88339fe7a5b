"""The GPU worker: the only code that touches the GPU during a search.

It runs in a child process (see pool.py) that the parent kills on a hang and replaces after a
fault, because an illegal memory access poisons the whole CUDA context. Requests and replies
are plain picklable data: no CUDA objects cross the process boundary.

Timing follows the project's measurement protocol: correctness first (fresh random inputs,
NaN-poisoned output, float64 reference), then CUDA events around each call, the L2 flushed
(a 256 MiB buffer zeroed) before every repetition, median with the 20th and 80th
percentiles, and cuBLAS (torch.nn.functional.linear) timed the same way on the same inputs.

torch is imported here only: it provides the cuBLAS baseline, and the device buffers and
events that the baseline and the candidate share.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import traceback
from typing import Any, Callable

from cutsearch.abi import caller_x, io_flags
from cutsearch.outcome import Failure, FailureKind, Measurement, Race, Timing
from cutsearch.pool import READY
from cutsearch.problem import x_pitch
from cutsearch.space import Knobs

TOLERANCE = 1e-2
FLUSH_BYTES = 256 * 2**20
WARMUP = 3
REPS = 30
SCREEN_REPS = 10  # per run-time variant, before the best one is timed with REPS


@dataclasses.dataclass(frozen=True)
class DeviceInfoRequest:
    pass


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    name: str
    capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    driver: str
    torch: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerRequest:
    """The layer a request runs (y = act(x @ W^T + b) in the caller's layouts), and how it times."""

    m: int
    n: int
    k: int
    dtype: str
    bias: bool
    activation: str
    input: str = "contiguous"
    output: str = "contiguous"
    seed: int = 0
    reps: int = REPS
    warmup: int = WARMUP

    @property
    def x_pitch(self) -> int:
        return x_pitch(self.k, self.dtype, self.input)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasureRequest(LayerRequest):
    """Measure one built kernel over its run-time variants."""

    library: str
    pad_n: int
    pad_k: int
    knobs: tuple[Knobs, ...]
    baseline: bool = True


@dataclasses.dataclass(frozen=True)
class RaceEntry:
    """One built kernel of a race, with the run-time arguments its trial chose."""

    library: str
    pad_n: int
    pad_k: int
    knobs: Knobs


@dataclasses.dataclass(frozen=True, kw_only=True)
class RaceRequest(LayerRequest):
    """Time `entries` and cuBLAS in `rounds` interleaved rounds (see _race)."""

    entries: tuple[RaceEntry, ...]
    rounds: int = 5


class _Fatal(Exception):
    """The CUDA context may be poisoned: reply, then let the process die."""


def serve(conn, gpu: int) -> None:
    """Child main loop: one request in, one reply out, until the pipe closes."""
    os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
    state: dict[str, Any] = {"gpu": gpu, "libs": {}}
    try:
        _torch(state)  # the slow start happens before READY, outside any request's timeout
    except Exception:  # noqa: BLE001 - the first request reports it
        pass
    serve_with(conn, state, handle)


def serve_with(conn, state: dict[str, Any], handler: Callable[[Any, dict[str, Any]], Any]) -> None:
    """The request loop around `handler`, after READY; test doubles of the worker share it."""
    conn.send(READY)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = handler(request, state)
            fatal = False
        except _Fatal as exc:
            reply, fatal = Failure(kind=FailureKind.CRASH, message=_first_line(exc),
                                   log=traceback.format_exc()), True
        except Exception as exc:  # noqa: BLE001 - a worker bug must come back as data, not kill the search
            reply, fatal = Failure(kind=FailureKind.CRASH, message=f"worker error: {_first_line(exc)}",
                                   log=traceback.format_exc()), False
        conn.send(reply)
        if fatal:
            os._exit(3)


def _first_line(exc: BaseException) -> str:
    """torch's CUDA errors run to several lines of advice: the message keeps the first."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]


def handle(request: Any, state: dict[str, Any]) -> Any:
    torch = _torch(state)
    if isinstance(request, DeviceInfoRequest):
        return _device_info(torch, state["gpu"])
    if isinstance(request, MeasureRequest):
        return _measure(torch, request, state)
    if isinstance(request, RaceRequest):
        return _race(torch, request, state)
    raise TypeError(f"unknown request {type(request).__name__}")


def _torch(state: dict[str, Any]):
    if "torch" not in state:
        try:
            import torch
        except ImportError:
            raise RuntimeError("torch is not installed: the GPU evaluator needs it for the cuBLAS baseline "
                               "(pip install 'cutsearch[torch]')") from None
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU is visible to torch")
        if not 0 <= state["gpu"] < torch.cuda.device_count():
            raise RuntimeError(f"there is no GPU {state['gpu']}: torch sees {torch.cuda.device_count()}")
        torch.cuda.set_device(state["gpu"])
        state["torch"] = torch
    return state["torch"]


def _device_info(torch, gpu: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(gpu)
    driver = "unknown"
    try:  # the driver's own version (e.g. 580.159.04), from NVML where it is installed
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
    except Exception:  # noqa: BLE001 - informative only: fall back to the CUDA version it supports
        try:
            from cuda.bindings import runtime as cudart

            _, version = cudart.cudaDriverGetVersion()
            driver = f"CUDA {version // 1000}.{version % 1000 // 10}"
        except Exception:  # noqa: BLE001
            pass
    return DeviceInfo(name=props.name, capability=(props.major, props.minor), sm_count=props.multi_processor_count,
                      l2_bytes=getattr(props, "L2_cache_size", 0), memory_bytes=props.total_memory,
                      driver=driver, torch=torch.__version__)


class _Bench:
    """Cold-L2 CUDA-event timer shared by the candidate and the baseline."""

    def __init__(self, torch, reps: int, warmup: int) -> None:
        self.torch, self.reps, self.warmup = torch, reps, warmup
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def time(self, call: Callable[[], None], reps: int | None = None) -> Timing:
        torch = self.torch
        reps = reps or self.reps
        for _ in range(self.warmup):
            call()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends):
            self.flush.zero_()
            start.record()
            call()
            end.record()
        torch.cuda.synchronize()
        import numpy as np

        times = np.array([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])
        return Timing(median_us=float(np.median(times)), p20_us=float(np.percentile(times, 20)),
                      p80_us=float(np.percentile(times, 80)), reps=reps)


_ACT = {"none": lambda t, F: t, "relu": lambda t, F: F.relu(t), "gelu": lambda t, F: F.gelu(t),
        "silu": lambda t, F: F.silu(t)}


class _Inputs:
    """Fresh random x, W, b for one request, and what the user's torch code would compute."""

    def __init__(self, torch, r, pad_n: int, pad_k: int) -> None:
        self.torch = torch
        self.r = r
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[r.dtype]
        gen = torch.Generator(device="cuda").manual_seed(r.seed)
        self.x = torch.randn(r.m, r.k, device="cuda", dtype=dtype, generator=gen)
        # x as a caller with a padded buffer holds it: row pitch pad_k, zero padding.
        self.x_padded = torch.zeros(r.m, pad_k, device="cuda", dtype=dtype)
        self.x_padded[:, : r.k] = self.x
        # x as this layer's caller holds it; a padded one's pitch is shorter where split-K copies
        # x to its own.
        self.x_caller = self.x
        if r.input == "padded":
            self.x_caller = self.x_padded
            if r.x_pitch != pad_k:
                self.x_caller = torch.zeros(r.m, r.x_pitch, device="cuda", dtype=dtype)
                self.x_caller[:, : r.k] = self.x
        self.w = torch.randn(r.n, r.k, device="cuda", dtype=dtype, generator=gen) / r.k ** 0.5
        self.b = torch.randn(r.n, device="cuda", dtype=dtype, generator=gen) if r.bias else None
        # The weight re-layout happens once, at export time: it is not timed.
        self.w_prepared = torch.zeros(pad_n, pad_k, device="cuda", dtype=dtype)
        self.w_prepared[: r.n, : r.k] = self.w
        self.b_prepared = None
        if self.b is not None:
            self.b_prepared = torch.zeros(pad_n, device="cuda", dtype=dtype)
            self.b_prepared[: r.n] = self.b

    def reference(self):
        torch = self.torch
        y = self.x.double() @ self.w.double().T
        if self.b is not None:
            y += self.b.double()
        return _ACT[self.r.activation](y, torch.nn.functional)

    def baseline(self):
        F = self.torch.nn.functional
        # The same x the candidate gets: a padded caller hands F.linear a strided view.
        x = self.x_caller[:, : self.r.k]
        return _ACT[self.r.activation](F.linear(x, self.w, self.b), F)


class _Output:
    """The y buffer in the layout the caller accepts, and its view as M x N."""

    def __init__(self, torch, r, pad_n: int, dtype) -> None:
        shape = {"contiguous": (r.m, r.n), "padded": (r.m, pad_n), "transposed": (r.n, r.m)}[r.output]
        self.buffer = torch.empty(*shape, device="cuda", dtype=dtype)
        self.view = self.buffer.t() if r.output == "transposed" else self.buffer[:, : r.n]


class _Launches:
    """A built kernel bound to one request's tensors, per run-time variant; close() destroys them."""

    def __init__(self, torch, lib, r, inputs: _Inputs, pad_n: int, pad_k: int) -> None:
        self.torch, self.lib, self.r, self.inputs, self.pad_n, self.pad_k = torch, lib, r, inputs, pad_n, pad_k
        self.stream = torch.cuda.current_stream().cuda_stream
        self.handles: list[ctypes.c_void_p] = []
        self.workspaces: list[Any] = []

    def bind(self, knobs: Knobs, y: Any, y_padded: bool, *, x_at_pad_k: bool = False) -> Callable[[], None]:
        """A layer call on one run-time variant, on x as the caller holds it or (x_at_pad_k) at
        the kernel's pitch; raises RuntimeError with the launcher's message."""
        torch, lib, r, inputs = self.torch, self.lib, self.r, self.inputs
        handle = ctypes.c_void_p()
        x_io = ({"x_padded": True, "x_aligned": False} if x_at_pad_k
                else caller_x(r.input == "padded", r.x_pitch, self.pad_k))
        if lib.cs_create(ctypes.byref(handle), r.m, r.n, r.k, self.pad_n, self.pad_k, torch.cuda.current_device(),
                         knobs.raster, knobs.swizzle, knobs.splits, knobs.decomposition, knobs.reduction,
                         io_flags(y_padded=y_padded, knobs=knobs.to_dict(), **x_io)):
            raise RuntimeError(lib.cs_error(None).decode())
        self.handles.append(handle)
        workspace = torch.empty(max(1, lib.cs_workspace_size(handle)), dtype=torch.uint8, device="cuda")
        self.workspaces.append(workspace)
        x = inputs.x_padded if x_at_pad_k else inputs.x_caller
        b_ptr = inputs.b_prepared.data_ptr() if inputs.b_prepared is not None else None
        if lib.cs_bind(handle, x.data_ptr(), inputs.w_prepared.data_ptr(), b_ptr, y.data_ptr(), workspace.data_ptr()):
            raise RuntimeError(lib.cs_error(handle).decode())
        stream = self.stream

        def call() -> None:
            if lib.cs_run(handle, stream):
                raise RuntimeError(lib.cs_error(handle).decode())
        return call

    def close(self) -> None:
        for handle in self.handles:
            self.lib.cs_destroy(handle)
        self.handles.clear()


def _checked(torch, call: Callable[[], None], view: Any, ref: Any) -> float:
    """The relative error of a call's result. It runs twice first: a stale stream-K workspace
    shows only on a second launch."""
    view.fill_(float("nan"))
    call()
    call()
    torch.cuda.synchronize()
    return _rel_error(torch, view, ref)


def _measure(torch, r: MeasureRequest, state: dict[str, Any]) -> Measurement | Failure:
    lib = _load(r.library, state)
    inputs = _Inputs(torch, r, r.pad_n, r.pad_k)
    ref = inputs.reference()
    bench = _Bench(torch, r.reps, r.warmup)
    out = _Output(torch, r, r.pad_n, inputs.x.dtype)
    timed: list[tuple[Knobs, Timing, float, Callable[[], None]]] = []
    failures: list[str] = []
    launches = _Launches(torch, lib, r, inputs, r.pad_n, r.pad_k)

    def checked(call: Callable[[], None], view: Any) -> float:
        return _checked(torch, call, view, ref)

    try:
        for knobs in r.knobs:
            try:
                call = launches.bind(knobs, out.buffer, r.output == "padded")
                err = checked(call, out.view)
            except RuntimeError as exc:
                _raise_if_poisoned(torch, knobs, exc)
                failures.append(f"{knobs}: {exc}")
                continue
            if not err < TOLERANCE:
                failures.append(f"{knobs}: relative error {err:.3g} over {TOLERANCE}")
                continue
            # Variants are screened with fewer repetitions; the winner is timed in full below.
            timed.append((knobs, bench.time(call, reps=min(SCREEN_REPS, r.reps)), err, call))
        if not timed:
            kind = FailureKind.WRONG_RESULT if any("relative error" in f for f in failures) else FailureKind.LAUNCH_ERROR
            return Failure(kind=kind, message=failures[0][:300] if failures else "no variant ran",
                           log="\n".join(failures))
        knobs, _, err, best_call = min(timed, key=lambda t: t[1].median_us)
        timing = bench.time(best_call)
        io_variants = _io_variants(torch, r, knobs, launches.bind, checked, bench, out)
    finally:
        launches.close()
    baseline = bench.time(lambda: inputs.baseline()) if r.baseline else None
    # torch.mm is what a bias-free layer may call instead of F.linear: a second reference.
    plain = r.baseline and not r.bias and r.activation == "none" and r.input == "contiguous"
    mm = bench.time(lambda: torch.mm(inputs.x, inputs.w.t())) if plain else None
    floors = _floors(torch, bench) if r.baseline else ()
    return Measurement(timing=timing, knobs=knobs, rel_error=err, baseline=baseline, mm=mm,
                       variants=tuple((k, t.median_us) for k, t, _, _ in timed), io_variants=io_variants,
                       floors=floors)


def _race(torch, r: RaceRequest, state: dict[str, Any]) -> Race:
    """Each entry's kernel, checked, then timed with cuBLAS in rounds that rotate their order.

    Every timing in a search is a draw, and its best trial is the one the draws favoured most.
    Timing the close contenders and cuBLAS again, in turn, on the same inputs, compares them
    under the same clocks and L2 state.
    """
    bench = _Bench(torch, r.reps, r.warmup)
    # Inputs per padding: the same seed draws the same x, W and b. cuBLAS gets the first
    # kernel's, as in that kernel's trial (a caller's padded x reaches it as a strided view).
    pads0 = (r.entries[0].pad_n, r.entries[0].pad_k)
    inputs: dict[tuple[int, int], _Inputs] = {pads0: _Inputs(torch, r, *pads0)}
    first = inputs[pads0]
    ref = first.reference()
    launches: list[_Launches] = []
    outs: list[_Output] = []  # each kernel writes its own y: alive until the last round
    calls: list[Callable[[], None] | None] = []
    errors: list[str | None] = []
    try:
        for entry in r.entries:
            pads = (entry.pad_n, entry.pad_k)
            held = inputs.get(pads) or inputs.setdefault(pads, _Inputs(torch, r, *pads))
            out = _Output(torch, r, entry.pad_n, first.x.dtype)
            outs.append(out)
            launch = _Launches(torch, _load(entry.library, state), r, held, *pads)
            launches.append(launch)
            try:
                call = launch.bind(entry.knobs, out.buffer, r.output == "padded")
                err = _checked(torch, call, out.view, ref)
            except RuntimeError as exc:
                _raise_if_poisoned(torch, entry.knobs, exc)
                calls.append(None)
                errors.append(_first_line(exc))
                continue
            ok = err < TOLERANCE
            calls.append(call if ok else None)
            errors.append(None if ok else f"relative error {err:.3g} over {TOLERANCE}")
        contenders = [c for c in calls if c is not None] + [lambda: first.baseline()]
        rounds: list[list[float]] = [[] for _ in contenders]
        for turn in range(r.rounds):
            for i in range(len(contenders)):
                j = (i + turn) % len(contenders)
                rounds[j].append(bench.time(contenders[j]).median_us)
    finally:
        for launch in launches:
            launch.close()
    timed = iter(rounds)
    kernel_us = tuple(tuple(next(timed)) if c is not None else None for c in calls)
    return Race(kernel_us=kernel_us, cublas_us=tuple(next(timed)), errors=tuple(errors), reps=r.reps)


def _floors(torch, bench) -> tuple[tuple[str, Timing], ...]:
    """What any call costs before it moves a byte, timed as the candidate is.

    The roofline floor assumes peak bandwidth from the first byte; under a cold L2 a call also
    pays a launch and the latency of its first loads. An empty kernel measures that part.
    """
    tiny = torch.empty(4, device="cuda", dtype=torch.float32)
    return (("empty kernel", bench.time(lambda: tiny.zero_())),)


def _io_variants(torch, r, knobs, bound_call, checked, bench, out) -> tuple[tuple[str, Timing], ...]:
    """The winner again without the per-call copies that a caller with padded buffers avoids."""
    modes = []
    if r.pad_k != r.x_pitch:  # x copied per call (a padded caller's to split-K's pitch)
        modes.append(("x padded", out.buffer, out.view, r.output == "padded"))
    if r.pad_n != r.n and r.output == "contiguous":
        y = torch.empty(r.m, r.pad_n, device="cuda", dtype=out.buffer.dtype)
        modes.append(("kernel only", y, y[:, : r.n], True))
    found = []
    for name, y, view, y_padded in modes:
        try:
            call = bound_call(knobs, y, y_padded, x_at_pad_k=True)
            # A figure is reported only for a result that is right.
            if not checked(call, view) < TOLERANCE:
                continue
        except RuntimeError as exc:
            _raise_if_poisoned(torch, knobs, exc)
            continue
        found.append((name, bench.time(call)))
    return tuple(found)


def _rel_error(torch, y, ref) -> float:
    diff = torch.linalg.norm(y.double() - ref)
    norm = torch.linalg.norm(ref)
    value = float(diff / norm) if float(norm) > 0 else float(diff)
    return value if value == value else float("inf")  # NaN fails


def _raise_if_poisoned(torch, knobs: Knobs, exc: Exception) -> None:
    """Raise _Fatal when the CUDA context is lost, so the next candidate gets a fresh worker.

    A launcher's own message may not name the CUDA error (CUTLASS reports a failed launch as
    "Error Internal"), so a context that is not obviously poisoned is probed: after a sticky
    error (illegal address and the like) every synchronize fails.
    """
    if _poisoned(exc):
        raise _Fatal(f"{knobs}: {_first_line(exc)}") from exc
    try:
        torch.cuda.synchronize()
    except RuntimeError as lost:
        raise _Fatal(f"{knobs}: {exc}; then {_first_line(lost)}") from exc


def _poisoned(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("illegal", "misaligned", "unspecified launch failure", "device-side assert",
                                   "an illegal instruction", "hardware exception", "context"))


def _load(path: str, state: dict[str, Any]):
    libs = state["libs"]
    if path not in libs:
        from cutsearch.abi import open_library

        lib = open_library(path)
        libs[path] = lib
    return libs[path]
