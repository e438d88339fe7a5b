"""The C ABI every cutsearch kernel library exports (templates/launcher.cu), seen from ctypes."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from pathlib import Path

ABI_VERSION = 3
# cs_create's io flags: the layouts the caller hands over and accepts, and how the call's kernels
# are launched. Libraries that predate a flag refuse it (cs_error says which).
IO_X_PADDED = 1
IO_Y_PADDED = 2
IO_PDL = 4  # programmatic dependent launch between the call's copies and its GEMM
IO_X_VIEWS = 8  # unaligned x read in place through row views instead of copied (space.RowViews)
IO_W_PREFETCH = 16  # with IO_PDL, W pulled into L2 while the GEMM waits for the copy of x
IO_X_OWN_COPY = 32  # x copied by the GEMM itself, no copy kernel (kernels built with it)
IO_X_ALIGNED = 64  # x in K's 16-byte rows, copied to a longer pad_k (split-K's pitch)


def io_flags(x_padded: bool, y_padded: bool, knobs: Mapping[str, int] | None = None, *,
             x_aligned: bool = False) -> int:
    """The flags of a layer's layouts and of a config's run-time knobs (`Knobs.to_dict()`).
    x_padded: x comes at the kernel's pitch pad_k; x_aligned: in K's 16-byte rows, shorter."""
    knobs = knobs or {}
    return ((IO_X_PADDED if x_padded else 0) | (IO_X_ALIGNED if x_aligned else 0) | (IO_Y_PADDED if y_padded else 0)
            | (IO_PDL if knobs.get("pdl") else 0) | (IO_X_VIEWS if knobs.get("views") else 0)
            | (IO_W_PREFETCH if knobs.get("prefetch") else 0) | (IO_X_OWN_COPY if knobs.get("own_copy") else 0))


def caller_x(padded: bool, x_pitch: int, pad_k: int) -> dict[str, bool]:
    """io_flags' x arguments for x as the caller hands it over: where padded, at the kernel's
    pitch, or in shorter 16-byte rows that the call copies to split-K's pitch. (The cuBLAS
    fallback's pad_k is K: it reads a padded x where it lies.)"""
    return {"x_padded": padded and pad_k <= x_pitch, "x_aligned": padded and pad_k > x_pitch}


def open_library(path: str | Path) -> ctypes.CDLL:
    """Load a kernel library and declare its functions (loading runs its initialisers)."""
    lib = ctypes.CDLL(str(path))
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.cs_abi_version.restype = i
    lib.cs_create.argtypes = [ctypes.POINTER(vp), i, i, i, i, i, i, i, i, i, i, i, i]
    lib.cs_create.restype = i
    lib.cs_workspace_size.argtypes = [vp]
    lib.cs_workspace_size.restype = ctypes.c_size_t
    lib.cs_bind.argtypes = [vp, vp, vp, vp, vp, vp]
    lib.cs_bind.restype = i
    lib.cs_run.argtypes = [vp, vp]
    lib.cs_run.restype = i
    lib.cs_error.argtypes = [vp]
    lib.cs_error.restype = ctypes.c_char_p
    lib.cs_destroy.argtypes = [vp]
    lib.cs_destroy.restype = None
    return lib
