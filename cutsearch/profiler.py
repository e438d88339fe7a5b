"""A user's model on the GPU: load it, time every nn.Linear call in its forward pass, and swap
chosen ones for exported cutsearch kernels.

The only module that runs a model. torch is imported inside functions, so cutsearch installs
and plans without it.

How the times are taken: forward hooks record a CUDA event before and after each Linear call,
and two more bracket the whole forward pass, in the same run, so the shares of one pass add up
to at most 1. Before each timed pass a spin kernel holds the GPU until the CPU has enqueued
the whole pass: the events then time the GPU's work, not Python's launch overhead. The
forward pass as an application calls it, launch overhead included, is timed separately,
without hooks. L2 is left as the forward pass leaves it (warm), unlike a single-layer search.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from cutsearch.errors import EnvironmentProblem, UserError
from cutsearch.plan import (CUTSEARCH, TORCH, CallTiming, Profile, Shape, aggregate, match, normalize_exports,
                            percentiles)

WARMUP = 3
REPS = 20
TOLERANCE = 1e-2
_DTYPES = {"f16": "float16", "float16": "float16", "half": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16",
           "f32": "float32", "float32": "float32", "float": "float32", "i64": "int64", "int64": "int64",
           "long": "int64", "i32": "int32", "int32": "int32", "bool": "bool"}
_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64", "int64": "i64", "int32": "i32"}
MODEL_DTYPES = ("f16", "bf16")


# -- what to run ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One positional input: its shape, and a dtype (None: the model's). Written 8,512,80 or 8,512:i64."""

    shape: tuple[int, ...]
    dtype: str | None = None

    @classmethod
    def parse(cls, text: str) -> InputSpec:
        body, colon, dtype = text.strip().partition(":")
        hint = "use sizes separated by commas, e.g. 8,512,80, optionally with a dtype: 8,512:i64"
        if not re.fullmatch(r"\d+(,\d+)*", body.replace(" ", "")):
            raise UserError(f"cannot read input shape {text!r}: {hint}")
        shape = tuple(int(s) for s in body.replace(" ", "").split(","))
        if 0 in shape:
            raise UserError(f"input shape {text!r} has a zero size")
        if colon and dtype not in _DTYPES:
            raise UserError(f"input {text!r}: unknown dtype {dtype!r}, choose one of f16, bf16, f32, i64, i32, bool")
        return cls(shape, _DTYPES[dtype] if dtype else None)

    def __str__(self) -> str:
        return ",".join(map(str, self.shape)) + (f":{_SHORT.get(self.dtype, self.dtype)}" if self.dtype else "")


def _split(spec: str) -> tuple[str, str, bool]:
    """MODULE:FACTORY -> (module or file, factory, whether it is a file)."""
    target, sep, attr = spec.rpartition(":")
    is_file = target.endswith(".py") or os.sep in target or "/" in target
    if not sep or not attr.isidentifier() or not (is_file or all(p.isidentifier() for p in target.split("."))):
        raise UserError(f"cannot read model {spec!r}: give MODULE:FACTORY, e.g. mypkg.models:build or "
                        "path/to/model.py:build")
    return target, attr, is_file


def model_name(spec: str) -> str:
    """A name for the files a model's profile writes: the module's or the file's stem."""
    target, _, is_file = _split(spec)
    stem = Path(target).stem if is_file else target.rpartition(".")[2]
    return re.sub(r"[^A-Za-z0-9._-]", "-", stem).strip("-.") or "model"


def load_factory(spec: str) -> Callable[..., Any]:
    """`pkg.module:factory` (importable from here) or `path/to/file.py:factory`."""
    target, attr, is_file = _split(spec)
    if is_file:
        module = _import_file(Path(target))
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` would: modules next to the user are importable
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
                raise UserError(f"cannot import {target}: no module named {exc.name!r} (give path/to/file.py:"
                                f"{attr} for a file, or run from the directory above the package)") from None
            raise UserError(f"importing {target} failed: {_describe(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - the user's module raised while importing: one line, not a traceback
            raise UserError(f"importing {target} failed: {_describe(exc)}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        hint = f"; it defines {', '.join(found[:6])}" if found else ""
        raise UserError(f"{target} has no {attr!r}{hint}")
    if not callable(factory):
        raise UserError(f"{spec} is a {type(factory).__name__}, not a function that returns a model")
    return factory


def _import_file(path: Path):
    if not path.is_file():
        raise UserError(f"model file {path} does not exist")
    name = f"_cutsearch_model_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if str(path.parent.resolve()) not in sys.path:
        sys.path.insert(0, str(path.parent.resolve()))  # as `python file.py` would: its neighbours import
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's file raised while importing: one line, not a traceback
        del sys.modules[name]
        raise UserError(f"importing {path} failed: {_describe(exc)}") from None
    return module


def build_model(spec: str, *, gpu: int | None = None):
    """Call the factory (its parameters created on GPU `gpu` where there is one) and check it
    returned an nn.Module that holds at least one nn.Linear."""
    factory = load_factory(spec)
    torch = _torch()
    device = torch.device("cuda", gpu) if gpu is not None and torch.cuda.is_available() else torch.device("cpu")
    try:
        with device:
            model = factory()
    except Exception as exc:  # noqa: BLE001 - the user's factory raised: one line, not a traceback
        raise UserError(f"{spec}() failed: {_describe(exc)}") from None
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"{spec}() returned a {type(model).__name__}, not a torch.nn.Module")
    if not _observed(model):
        raise UserError(f"{spec}() returned a {type(model).__name__} with no nn.Linear layer: nothing to profile")
    return model


def require_gpu(gpu: int = 0):
    torch = _torch()
    if not torch.cuda.is_available():
        raise EnvironmentProblem("no CUDA GPU is visible to torch: profiling times the model's forward pass on the GPU")
    if not 0 <= gpu < torch.cuda.device_count():
        raise UserError(f"--gpu {gpu}: torch sees {torch.cuda.device_count()} GPU(s)")
    torch.cuda.set_device(gpu)
    return torch.device("cuda", gpu)


def place(model, specs: list[InputSpec], *, dtype: str, gpu: int = 0, seed: int = 0):
    """The model in `dtype` on the GPU, in eval mode, and seeded random inputs for it. Integer and
    bool inputs are zeros (a valid index for any embedding): a Linear's time does not depend on values."""
    torch = _torch()
    if dtype not in MODEL_DTYPES:
        raise UserError(f"--dtype {dtype}: cutsearch searches {' and '.join(MODEL_DTYPES)} kernels")
    if not specs:
        raise UserError("give the model's input as --input-shape, e.g. --input-shape 8,512,80")
    device = require_gpu(gpu)
    try:
        model = model.to(device=device, dtype=getattr(torch, _DTYPES[dtype])).eval()
    except Exception as exc:  # noqa: BLE001 - out of memory, or a module that refuses the move
        raise UserError(f"moving the model to {device} in {dtype} failed: {_describe(exc)}") from None
    gen = torch.Generator(device=device).manual_seed(seed)
    inputs = []
    for spec in specs:
        dt = getattr(torch, spec.dtype or _DTYPES[dtype])
        if dt.is_floating_point:
            inputs.append(torch.randn(spec.shape, device=device, dtype=dt, generator=gen))
        else:
            inputs.append(torch.zeros(spec.shape, device=device, dtype=dt))
    return model, tuple(inputs)


# -- observing Linear calls -----------------------------------------------------------------------

def _observed(model) -> dict[str, Any]:
    """Modules whose calls are Linear calls: nn.Linear (cuBLAS through torch) and applied exports."""
    torch = _torch()
    kinds: tuple[type, ...] = (torch.nn.Linear,)
    try:
        from cutsearch.torch import Linear as Applied

        kinds += (Applied,)
    except ImportError:  # the export side is optional here
        pass
    return {name: m for name, m in model.named_modules() if isinstance(m, kinds)}


class _Observer:
    """Forward hooks on each Linear: the shape every call sees, and CUDA events around it when timed."""

    def __init__(self, torch, modules: dict[str, Any], *, timed: bool) -> None:
        self.torch, self.modules, self.timed = torch, modules, timed
        self.calls: list[tuple[str, Shape, str, Any, Any]] = []
        self._open: dict[int, list[Any]] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> _Observer:
        for name, module in self.modules.items():
            self._handles.append(module.register_forward_pre_hook(self._before))
            self._handles.append(module.register_forward_hook(self._after(name), with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _before(self, module, args) -> None:
        event = None
        if self.timed:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
        self._open.setdefault(id(module), []).append(event)

    def _after(self, name: str):
        def hook(module, args, kwargs, output) -> None:
            start = self._open[id(module)].pop()
            end = None
            if self.timed:
                end = self.torch.cuda.Event(enable_timing=True)
                end.record()
            x = args[0] if args else next(iter(kwargs.values()))
            self.calls.append((name, _shape(module, x, output), _kind(module), start, end))
        return hook


def _shape(module, x, y) -> Shape:
    k = x.shape[-1] if x.dim() else 1
    return Shape(m=x.numel() // k if k else 0, n=y.shape[-1] if y.dim() else 1, k=k, dtype=dtype_name(x.dtype),
                 bias=getattr(module, "bias", None) is not None)


def _kind(module) -> str:
    return CUTSEARCH if type(module).__module__ == "cutsearch.torch" else TORCH


def dtype_name(dtype) -> str:
    text = str(dtype).removeprefix("torch.")
    return _SHORT.get(text, text)


def forward(model, inputs: tuple[Any, ...], *, what: str = "the forward pass"):
    """model(*inputs) for inference; anything the model raises becomes one line naming the inputs."""
    torch = _torch()
    try:
        with torch.inference_mode():
            return model(*inputs)
    except Exception as exc:  # noqa: BLE001 - the model raised on these inputs: the user's to fix
        shapes = " ".join(f"--input-shape {','.join(map(str, t.shape))}" for t in inputs)
        raise UserError(f"{what} failed with {shapes}: {_describe(exc)}") from None


def record_shapes(model, inputs: tuple[Any, ...]) -> dict[str, set[Shape]]:
    """Module name -> the shapes its calls saw, in one forward pass on `inputs`."""
    torch = _torch()
    modules = _observed(model)
    with _Observer(torch, modules, timed=False) as seen:
        forward(model, inputs)
    shapes: dict[str, set[Shape]] = {}
    for name, shape, kind, _, _ in seen.calls:
        if kind == TORCH:
            shapes.setdefault(name, set()).add(shape)
    return shapes


# -- timing ---------------------------------------------------------------------------------------

def profile(model, inputs: tuple[Any, ...], *, name: str = "model", warmup: int = WARMUP, reps: int = REPS) -> Profile:
    """Time every Linear call and the whole forward pass of `model` (already on the GPU) on `inputs`."""
    torch = _torch()
    if warmup < 1 or reps < 3:
        raise UserError(f"need at least 1 warm-up pass and 3 timed passes, got --warmup {warmup} --reps {reps}")
    if not all(getattr(t, "is_cuda", False) for t in inputs):
        raise UserError("profile(): every input must be a CUDA tensor (see place())")
    modules = _observed(model)
    if not modules:
        raise UserError(f"{type(model).__name__} has no nn.Linear layer: nothing to profile")
    with torch.inference_mode():
        forward(model, inputs)
        rate = _spin_rate(torch)
        with _Observer(torch, modules, timed=True) as observer:
            ahead_us = max(_cpu_us(torch, model, inputs) for _ in range(warmup))
            spin = None if rate is None else int(rate * min(1.25 * ahead_us + 50, 1e6))
            passes, bounds = [], []
            for _ in range(reps):
                observer.calls = []
                if spin:
                    torch.cuda._sleep(spin)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(*inputs)
                end.record()
                passes.append(observer.calls)
                bounds.append((start, end))
        latency = []
        for _ in range(warmup):
            model(*inputs)
        for _ in range(reps):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            latency.append((start, end))
        torch.cuda.synchronize()
    called = {c[0] for c in passes[0]}
    if not called:
        raise UserError(f"the forward pass called none of the model's {len(modules)} nn.Linear layers")
    samples: dict[tuple[str, int], list[Any]] = {}
    for calls in passes:
        nth: dict[str, int] = {}
        for name_, shape, kind, start, end in calls:
            n = nth[name_] = nth.get(name_, -1) + 1
            entry = samples.setdefault((name_, n), [shape, kind, modules[name_], []])
            entry[3].append(start.elapsed_time(end) * 1e3)
    timings = [CallTiming(name=n, shape=shape, kind=kind, samples_us=tuple(us), **_export_of(module))
               for (n, _), (shape, kind, module, us) in samples.items()]
    return Profile(
        name=name, rows=tuple(aggregate(timings)),
        forward=percentiles(s.elapsed_time(e) * 1e3 for s, e in bounds),
        latency=percentiles(s.elapsed_time(e) * 1e3 for s, e in latency),
        inputs=tuple({"shape": list(t.shape), "dtype": dtype_name(t.dtype)} for t in inputs),
        dtype=next((dtype_name(p.dtype) for p in model.parameters() if p.is_floating_point()), ""),
        not_called=tuple(sorted(set(modules) - called)),
        info={"device": device_info(torch), "method": {
            "warmup": warmup, "reps": reps, "timer": "CUDA events, hooks around each Linear call",
            "queue_ahead_us": None if spin is None else round(spin / rate, 1),
            "l2": "warm, as the forward pass leaves it"}})


def _cpu_us(torch, model, inputs) -> float:
    """Host time to enqueue one (hooked) forward pass: how long the GPU must wait for the CPU."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model(*inputs)
    cpu = (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    return cpu


def _spin_rate(torch) -> float | None:
    """GPU clock cycles per µs of torch.cuda._sleep, or None where torch lacks it."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return None
    sleep(1000)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    sleep(2_000_000)
    end.record()
    end.synchronize()
    return 2_000_000 / (start.elapsed_time(end) * 1e3)


def _export_of(module) -> dict[str, Any]:
    fc = getattr(module, "fc", None) if _kind(module) == CUTSEARCH else None
    if fc is None:
        return {}
    return {"export": str(getattr(fc, "path", "")) or None, "export_speedup": (fc.meta or {}).get("speedup")}


def device_info(torch) -> dict[str, Any]:
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {"gpu": props.name, "capability": f"sm_{props.major}{props.minor}", "torch": torch.__version__,
            "cuda": torch.version.cuda}


# -- applying exports -----------------------------------------------------------------------------

def apply(model, exports: dict[Any, Any], inputs: tuple[Any, ...] | Any, *, any_m: bool = False):
    """Replace each nn.Linear whose call on `inputs` has the (M, N, K, dtype, bias) of an export
    with that export (cutsearch.torch.Linear.from_linear), for inference; returns the model,
    changed in place. One forward pass on `inputs` tells which M each Linear sees: a kernel is
    searched for one M, and refuses others unless `any_m` (then it is correct, not tuned)."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    chosen, _ = match(record_shapes(model, inputs), normalize_exports(exports))
    return swap(model, chosen, any_m=any_m)


def swap(model, chosen: dict[str, Path], *, any_m: bool = False):
    """Put an exported layer in place of each named nn.Linear, wherever the model refers to it."""
    from cutsearch.torch import Linear

    modules = dict(model.named_modules(remove_duplicate=False))
    for name, export in chosen.items():
        linear = modules[name]
        new = Linear.from_linear(linear, export, any_m=any_m)
        if name == "":
            return new
        for path, module in modules.items():
            if module is linear and path:
                parent, _, attr = path.rpartition(".")
                setattr(model.get_submodule(parent), attr, new)
    return model


def rel_error(reference: Any, output: Any) -> float:
    """Relative Frobenius error over every tensor of two model outputs, in float64."""
    a, b = _tensors(reference), _tensors(output)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    num = sum(float((x.double() - y.double()).square().sum()) for x, y in zip(a, b))
    den = sum(float(x.double().square().sum()) for x in a)
    return (num / den) ** 0.5 if den else num ** 0.5


def _tensors(obj: Any) -> list[Any]:
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.is_floating_point() else []
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


# -- helpers --------------------------------------------------------------------------------------

def _torch():
    try:
        import torch
    except ImportError:
        raise EnvironmentProblem("torch is not installed: profiling a model needs it "
                                 "(pip install 'cutsearch[torch]')") from None
    return torch


def _describe(exc: BaseException) -> str:
    """`Type: first line of the message (file:line)`, the line being the deepest in the user's code."""
    text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
    message = next((line.strip() for line in text.splitlines() if line.strip()), "")
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename:
        frames.append(traceback.FrameSummary(exc.filename, exc.lineno or 0, "<module>"))
    ours = (str(Path(__file__).resolve().parent), str(Path(sys.modules["importlib"].__file__).resolve().parent))
    user = [f for f in frames if not f.filename.startswith(ours) and "site-packages" not in f.filename
            and not f.filename.startswith("<frozen")]
    if user:
        f = user[-1]
        try:
            shown = os.path.relpath(f.filename)
        except ValueError:
            shown = f.filename
        where = f" ({shown if not shown.startswith('..') else f.filename}:{f.lineno})"
    return f"{type(exc).__name__}: {message[:300]}{where}"
