"""`cutsearch.load(DIR)`: an exported layer as a callable, for applications.

Loading a shared library runs its code, so nothing is loaded before every file's sha256 has
been checked against meta.json and the GPU's architecture against the kernel's. Per call, the
host work is a few attribute reads and one C call: the launcher rebuilds its arguments only
when a pointer changes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from pathlib import Path
from typing import Any

from cutsearch import persist
from cutsearch.abi import ABI_VERSION, caller_x, io_flags, open_library
from cutsearch.problem import Layer
from cutsearch.errors import UserError

_DTYPES = {"f16": ("float16", "<f2"), "bf16": ("bfloat16", None)}


def device_capability(device: int) -> tuple[int, int]:
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        raise UserError("cuda-python (cuda.bindings) is needed to check the GPU before loading a kernel") from None
    err, major = cudart.cudaDeviceGetAttribute(cudart.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, device)
    if err != cudart.cudaError_t.cudaSuccess:
        raise UserError(f"no usable CUDA GPU {device}: {cudart.cudaGetErrorString(err)[1].decode()}")
    _, minor = cudart.cudaDeviceGetAttribute(cudart.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, device)
    return major, minor


def check_arch(meta: dict[str, Any], device: int, capability: tuple[int, int] | None = None) -> None:
    arch = meta.get("arch")
    if arch is None:
        return
    major, minor = capability or device_capability(device)
    want = arch.removeprefix("sm_").rstrip("a")
    if f"{major}{minor}" != want:
        raise UserError(f"this export is built for {arch}, but GPU {device} is sm_{major}{minor}: "
                        "search again on that GPU")


class _Tensor:
    """The few facts the launcher needs of any CUDA array: torch, CuPy, CAI or DLPack."""

    __slots__ = ("obj", "ptr", "shape", "dtype", "contiguous", "device")

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        if _module(obj) == "torch":
            if not obj.is_cuda:
                raise UserError(f"tensor is on {obj.device}: the layer runs on a CUDA device")
            # Per call, so the cheapest reads: get_device() builds no torch.device, and the
            # dtype's name is looked up, not formatted.
            self.ptr, self.shape, self.device = obj.data_ptr(), obj.shape, obj.get_device()
            self.dtype = _DTYPE_NAMES.get(obj.dtype) or _DTYPE_NAMES.setdefault(
                obj.dtype, str(obj.dtype).removeprefix("torch."))
            self.contiguous = obj.is_contiguous()
        elif hasattr(obj, "__cuda_array_interface__"):
            cai = obj.__cuda_array_interface__
            self.ptr, self.shape = cai["data"][0], tuple(cai["shape"])
            self.dtype = {"<f2": "float16", "<V2": "bfloat16", "|V2": "bfloat16", "<f4": "float32",
                          "<f8": "float64"}.get(cai["typestr"], cai["typestr"])
            if getattr(obj, "dtype", None) is not None and "bfloat16" in str(obj.dtype):
                self.dtype = "bfloat16"
            strides = cai.get("strides")
            itemsize = 2
            expect = tuple(itemsize * int(_prod(self.shape[i + 1:])) for i in range(len(self.shape)))
            self.contiguous = strides is None or tuple(strides) == expect
            self.device = getattr(getattr(obj, "device", None), "id", None)
        elif hasattr(obj, "__dlpack__"):
            try:
                import torch
            except ImportError:
                raise UserError("a DLPack tensor needs torch to be read; pass a torch or CuPy array") from None
            self.__init__(torch.from_dlpack(obj))
        else:
            raise UserError(f"cannot read a {type(obj).__name__}: pass a torch tensor, a CuPy array, or any "
                            "object with __cuda_array_interface__ or __dlpack__")


_DTYPE_NAMES: dict[Any, str] = {}
_MODULES: dict[type, str] = {}


def _module(obj: Any) -> str:
    """The top-level module of obj's type: torch, cupy, ..."""
    kind = type(obj)
    return _MODULES.get(kind) or _MODULES.setdefault(kind, kind.__module__.split(".")[0])


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


class FcLayer:
    """y = act(x @ W^T (+ b)) with the exported kernel. Call prepare() once, then call it."""

    def __init__(self, path: Path, meta: dict[str, Any], *, device: int, any_m: bool) -> None:
        self.path, self.meta, self.device, self.any_m = path, meta, device, any_m
        layer = meta["layer"]
        self.m, self.n, self.k = layer["M"], layer["N"], layer["K"]
        self.dtype = _DTYPES[layer["dtype"]][0]
        self.bias, self.activation = layer["bias"], layer["activation"]
        self.spec = Layer.from_dict(layer)
        self.backend = meta["backend"]
        t = meta["transforms"]
        self.pad_n, self.pad_k = t["pad_n"], t["pad_k"]
        self.knobs = meta.get("knobs") or {}
        self._lib = open_library(path / meta["library"]) if meta.get("library") and self._calls_library() else None
        self.via = "torch" if self._lib is None else meta["library"]  # what each call runs
        # One handle, workspace and binding per M and x pitch. Not per stream: a CUDA graph
        # captured after an eager call must reuse the bound handle, whose one-time work is done.
        self._handles: dict[tuple[int, bool], _Handle] = {}
        self._lock = threading.Lock()  # bind and run are two C calls: another thread must not come between
        self._y_shapes: dict[int, tuple[int, int]] = {self.m: self.spec.y_shape}  # per M, off the hot path
        self._w_ptr = self._b_ptr = None
        self._prepared: tuple[Any, Any, Any] | None = None  # (W, W^T, b) as the calls use them
        # The layout facts each call reads, looked up once: properties cost host time per call.
        self._x_pitch, self._x_padded = self.spec.x_pitch, self.spec.input == "padded"
        self._y_layout = self.spec.output
        # Where the kernel reads x at a longer pitch than the caller's, each call copies x to it (or
        # reads it through row views); an x kept at that pitch, padding finite, is read as it lies.
        self.kernel_x_pitch: int | None = self.pad_k if self._lib is not None and self.pad_k > self._x_pitch else None

    def _calls_library(self) -> bool:
        """Whether calls go through the exported C library, not torch: always for a kernel; for
        the cuBLAS fallback where its cuBLASLt call fuses the activation. Measured on an H200,
        8x382x6301 f16 with bias and ReLU: 15.2 µs against 19.3 µs for F.linear
        (studies/recorded/h200-2026-12-02-race/fallback-relu.json); elsewhere within noise."""
        return self.backend != "cublas" or self.spec.fallback_fuses_activation

    def __repr__(self) -> str:
        return (f"FcLayer({self.m}x{self.n}x{self.k} {self.meta['layer']['dtype']}, backend={self.backend}, "
                f"via={self.via}, speedup={self.meta.get('speedup')})")

    # -- one-time work ----------------------------------------------------------------------
    def prepare(self, w: Any, b: Any = None) -> FcLayer:
        """Lay the constant weights out as the kernel wants them: zero-padded to [pad_n, pad_k]."""
        wt = _Tensor(w)
        if wt.shape != (self.n, self.k):
            raise UserError(f"W has shape {list(wt.shape)}, this layer needs [{self.n}, {self.k}]")
        if wt.dtype != self.dtype:
            raise UserError(f"W is {wt.dtype}, this layer needs {self.dtype}")
        if self.bias and b is None:
            raise UserError("this layer was searched with a bias: pass b")
        if not self.bias and b is not None:
            raise UserError("this layer was searched without a bias: b must be None")
        bt = _Tensor(b) if b is not None else None
        if bt is not None and bt.shape != (self.n,):
            raise UserError(f"b has shape {list(bt.shape)}, this layer needs [{self.n}]")
        if bt is not None and bt.dtype != self.dtype:
            raise UserError(f"b is {bt.dtype}, this layer needs {self.dtype}")
        for name, t in (("W", wt), ("b", bt)):
            if t is not None and t.device is not None and t.device != self.device:
                raise UserError(f"{name} is on GPU {t.device}, this layer was loaded for GPU {self.device}")
        xp = _namespace(w)
        if self._lib is None:  # the cuBLAS fallback through torch
            self._prepared = (w, w.T, b)
            return self
        wp = xp.zeros_like_shape(w, (self.pad_n, self.pad_k))
        xp.copy_into(wp, w)
        bp = None
        if b is not None:
            bp = xp.zeros_like_shape(b, (self.pad_n,))
            xp.copy_into(bp, b)
        with self._lock:
            self._prepared = (wp, None, bp)
            self._w_ptr = _Tensor(wp).ptr
            self._b_ptr = _Tensor(bp).ptr if bp is not None else None
            for h in self._handles.values():
                h.bound = None  # the weights moved: bind again, and rebuild what is built from W
        return self

    # -- per call -----------------------------------------------------------------------------
    def __call__(self, x: Any, out: Any = None, stream: Any = None) -> Any:
        if self._prepared is None:
            raise UserError("call prepare(W, b) once before using the layer")
        xt = _Tensor(x)
        pitch = xt.shape[1] if len(xt.shape) == 2 else None
        if pitch != self._x_pitch and (pitch is None or pitch != self.kernel_x_pitch):
            padded = " (x padded: its row pitch)" if self._x_padded else ""
            own = (f", or [M, {self.kernel_x_pitch}] (the kernel's pitch, padding finite: no copy per call)"
                   if self.kernel_x_pitch else "")
            raise UserError(f"x has shape {list(xt.shape)}, this layer needs [M, {self._x_pitch}]{padded}{own}")
        m = xt.shape[0]
        if m != self.m and not self.any_m:
            raise UserError(f"x has M={m} rows but the kernel was searched for M={self.m}; "
                            "load with any_m=True to run it for other M (correct, not tuned)")
        if xt.dtype != self.dtype:
            raise UserError(f"x is {xt.dtype}, this layer needs {self.dtype}")
        if not xt.contiguous:
            raise UserError("x must be contiguous (row-major [M, K])")
        if xt.ptr % 16:
            raise UserError("x must be 16-byte aligned")
        if xt.device is not None and xt.device != self.device:
            raise UserError(f"x is on GPU {xt.device}, this layer was loaded for GPU {self.device}")
        xp = _namespace(x)
        if m == 0:  # an empty batch, as nn.Linear takes one: nothing to compute
            empty = (self.n, 0) if self._y_layout == "transposed" else (0, self._y_shapes[self.m][1])
            return out if out is not None else xp.empty_like_shape(x, empty)
        y_shape = self._y_shapes.get(m) or self._y_shapes.setdefault(m, dataclasses.replace(self.spec, m=m).y_shape)
        if self._lib is None and out is None and self._y_layout == "contiguous":
            return xp.linear(x[:, : self.k] if self._x_padded else x, *self._prepared, self.activation, None)
        if out is None:
            out = xp.empty_like_shape(x, y_shape)
        yt = _Tensor(out)
        if yt.shape != y_shape or yt.dtype != self.dtype or not yt.contiguous:
            raise UserError(f"out must be a contiguous {list(y_shape)} {self.dtype} array ({self._y_layout} y)")
        if yt.ptr % 16 or (yt.device is not None and yt.device != self.device):
            raise UserError(f"out must be 16-byte aligned, on GPU {self.device}")
        if yt.ptr < xt.ptr + 2 * m * pitch and xt.ptr < yt.ptr + 2 * y_shape[0] * y_shape[1]:
            raise UserError("out must not overlap x")
        if self._lib is None:
            x_view = x[:, : self.k] if self._x_padded else x
            layout = self._y_layout
            y_view = out if layout == "contiguous" else out.T if layout == "transposed" else out[:, : self.n]
            xp.linear(x_view, *self._prepared, self.activation, y_view)
            return out
        lib, raw_stream = self._lib, xp.stream(stream, xt.device)
        at_pad_k = pitch != self._x_pitch
        with self._lock:
            h = self._handles.get((m, at_pad_k)) or self._handle(m, at_pad_k, xp, x)
            # Arguments are rebuilt only when a pointer changes: most callers reuse their buffers.
            bound = (xt.ptr, yt.ptr)
            if bound != h.bound:
                if lib.cs_bind(h.handle, xt.ptr, self._w_ptr, self._b_ptr, yt.ptr, h.ws_ptr):
                    h.bound = None  # a refused binding leaves none in the library either
                    raise RuntimeError(f"cutsearch kernel refused its arguments: {lib.cs_error(h.handle).decode()}")
                h.bound = bound
            if lib.cs_run(h.handle, raw_stream):
                raise RuntimeError(f"cutsearch kernel failed to launch: {lib.cs_error(h.handle).decode()}")
        return out

    def _handle(self, m: int, at_pad_k: bool, xp: Any, like: Any) -> _Handle:
        handle = ctypes.c_void_p()
        kn = self.knobs
        x_io = {"x_padded": True} if at_pad_k else caller_x(self._x_padded, self._x_pitch, self.pad_k)
        if self._lib.cs_create(ctypes.byref(handle), m, self.n, self.k, self.pad_n, self.pad_k, self.device,
                               kn.get("raster", 0), kn.get("swizzle", 1), kn.get("splits", 1),
                               kn.get("decomposition", 0), kn.get("reduction", 0),
                               io_flags(y_padded=self._y_layout == "padded", knobs=kn, **x_io)):
            raise RuntimeError(f"cutsearch: no kernel handle for M={m}: {self._lib.cs_error(None).decode()}")
        workspace = xp.bytes(like, max(16, self._lib.cs_workspace_size(handle)))
        found = self._handles[m, at_pad_k] = _Handle(handle, workspace, _Tensor(workspace).ptr)
        return found

    def __del__(self) -> None:
        lib = getattr(self, "_lib", None)
        for h in getattr(self, "_handles", {}).values():
            if lib is not None:
                lib.cs_destroy(h.handle)


@dataclasses.dataclass
class _Handle:
    """A kernel handle of one M, its workspace, and the (x, y) it is bound to."""

    handle: ctypes.c_void_p
    workspace: Any  # kept alive while the handle may use it
    ws_ptr: int
    bound: tuple[int, int] | None = None


class _TorchOps:
    def __init__(self, torch) -> None:
        self.torch = torch
        # The raw handle of the current stream, without building a torch.cuda.Stream per call.
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        # In-place activations through their C++ bindings, not torch.ops.aten's Python dispatch.
        nn = torch._C._nn
        self._inplace = {"relu": torch.relu_, "gelu": getattr(nn, "gelu_", None), "silu": getattr(nn, "silu_", None)}

    def zeros_like_shape(self, like, shape):
        return self.torch.zeros(shape, dtype=like.dtype, device=like.device)

    def empty_like_shape(self, like, shape):
        return self.torch.empty(shape, dtype=like.dtype, device=like.device)

    def bytes(self, like, n):
        return self.torch.empty(n, dtype=self.torch.uint8, device=like.device)

    def copy_into(self, dst, src):
        dst[tuple(slice(0, s) for s in src.shape)] = src

    def stream(self, stream, device):
        if stream is not None:
            return getattr(stream, "cuda_stream", stream)
        if self._raw_stream is not None:
            return self._raw_stream(device)
        return self.torch.cuda.current_stream(device).cuda_stream

    def linear(self, x, w, wt, b, activation, out):
        F = self.torch.nn.functional
        if out is None:
            y = F.linear(x, w, b)
            return getattr(F, activation)(y) if activation != "none" else y
        # Straight into the caller's buffer, with F.linear's own GEMM (addmm fuses the bias), and
        # the activation in place: a copy afterwards cost a launch and a pass over y.
        if b is not None:
            self.torch.addmm(b, x, wt, out=out)
        else:
            self.torch.mm(x, wt, out=out)
        if activation != "none":
            (self._inplace[activation] or getattr(self.torch.ops.aten, activation + "_"))(out)
        return out


class _CupyOps:
    def __init__(self, cupy) -> None:
        self.cp = cupy

    def zeros_like_shape(self, like, shape):
        return self.cp.zeros(shape, dtype=like.dtype)

    def empty_like_shape(self, like, shape):
        return self.cp.empty(shape, dtype=like.dtype)

    def bytes(self, like, n):
        return self.cp.empty(n, dtype=self.cp.uint8)

    def copy_into(self, dst, src):
        dst[tuple(slice(0, s) for s in src.shape)] = src

    def stream(self, stream, device):
        if stream is None:
            return self.cp.cuda.get_current_stream().ptr
        return getattr(stream, "ptr", stream)

    def linear(self, x, w, wt, b, activation, out):
        y = x @ wt
        if b is not None:
            y += b
        if activation != "none":
            raise UserError("the cuBLAS fallback applies activations through torch: pass torch tensors")
        if out is not None:
            out[...] = y
            return out
        return y


_OPS: dict[str, Any] = {}


def _namespace(obj: Any):
    mod = _module(obj)
    ops = _OPS.get(mod)
    if ops is None:
        ops = _OPS[mod] = _make_namespace(mod)
    return ops


def _make_namespace(mod: str):
    if mod == "torch":
        import torch

        return _TorchOps(torch)
    if mod == "cupy":
        import cupy

        return _CupyOps(cupy)
    try:
        import torch

        return _TorchOps(torch)
    except ImportError:
        raise UserError("pass torch tensors or CuPy arrays (needed to allocate outputs and padded weights)") from None




def load(path: str | Path, *, device: int = 0, any_m: bool = False, capability: tuple[int, int] | None = None) -> FcLayer:
    """Check and load an export. `any_m` allows calls with another M (the kernel is M-agnostic)."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path} is not a directory")
    meta = persist.verify_dir(path)
    if meta.get("exported_by") != "cutsearch":
        raise UserError(f"{path} is not a cutsearch export")
    if meta.get("abi") != ABI_VERSION:
        raise UserError(f"{path} has C ABI version {meta.get('abi')}; this cutsearch reads version {ABI_VERSION}")
    if meta["backend"] != "cublas":  # a kernel: CUTLASS's, or the gemv kernel
        check_arch(meta, device, capability)
    return FcLayer(path, meta, device=device, any_m=any_m)
