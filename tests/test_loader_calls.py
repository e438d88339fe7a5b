"""What `cutsearch.load`'s layer asks of its library, or of torch, per call, without a GPU:
arrays that describe themselves through __cuda_array_interface__, and a library and an array
namespace that record their calls.

The GPU test (tests/test_loader_gpu.py) checks the results when buffers and weights move; this
one checks the host-side rule behind it: the arguments are bound again exactly when x, y or the
weights move, and every call launches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cutsearch import abi, loader
from cutsearch.errors import UserError

M, N, K = 8, 32, 64


class Array:
    """A device array as CuPy or Numba describe one; its address is given, never read."""

    def __init__(self, ptr: int, shape: tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": "<f2",
                                         "strides": None, "version": 3}
        self.shape = shape

    @property
    def T(self) -> Array:
        return Array(self.__cuda_array_interface__["data"][0], self.shape[::-1])


class Ops:
    """The array namespace the loader allocates through; allocations get fresh addresses."""

    def __init__(self) -> None:
        self.next_ptr = 1 << 20
        self.linears: list[tuple] = []

    def empty_like_shape(self, like, shape) -> Array:
        self.next_ptr += 1 << 16
        return Array(self.next_ptr, tuple(shape))

    def zeros_like_shape(self, like, shape) -> Array:
        return self.empty_like_shape(like, shape)

    def bytes(self, like, n: int) -> Array:
        return self.empty_like_shape(like, (n,))

    def copy_into(self, dst, src) -> None:
        pass

    def stream(self, stream, device) -> int:
        return 0 if stream is None else stream

    def linear(self, x, w, wt, b, activation, out):
        self.linears.append((x, w, wt, b, activation, out))
        return out


class Library:
    """The C ABI of a kernel library, recording what it is asked."""

    def __init__(self) -> None:
        self.binds: list[tuple[int, int, int | None, int]] = []
        self.runs = 0
        self.created: list[int] = []
        self.io: list[int] = []  # cs_create's io flags, handle by handle
        self.refusal: bytes | None = None  # cs_create's reason to refuse, where it does
        self.refuse_binds = False

    def cs_create(self, handle, m, *rest) -> int:
        self.created.append(m)
        self.io.append(rest[-1])
        return 1 if self.refusal else 0

    def cs_error(self, handle) -> bytes:
        return self.refusal if handle is None else b"cs_bind: x must be 16-byte aligned"

    def cs_workspace_size(self, handle) -> int:
        return 256

    def cs_bind(self, handle, x, w, b, y, ws) -> int:
        self.binds.append((x, w, b, y))
        return int(self.refuse_binds)

    def cs_run(self, handle, stream) -> int:
        self.runs += 1
        return 0

    def cs_destroy(self, handle) -> None:
        pass


def _kernel_layer(monkeypatch, k: int, pad_k: int, input: str = "contiguous"):
    lib = Library()
    monkeypatch.setattr(loader, "open_library", lambda path: lib)
    monkeypatch.setitem(loader._OPS, __name__.split(".")[0], Ops())
    meta = {"layer": {"M": M, "N": N, "K": k, "dtype": "f16", "bias": True, "activation": "none", "input": input},
            "backend": "cutlass", "library": "kernel.so", "transforms": {"pad_n": N, "pad_k": pad_k}, "knobs": {}}
    fc = loader.FcLayer(Path("export"), meta, device=0, any_m=True)
    return fc, lib


@pytest.fixture
def layer(monkeypatch):
    return _kernel_layer(monkeypatch, K, K)


def test_arguments_are_bound_again_exactly_when_x_y_or_the_weights_move(layer):
    fc, lib = layer
    fc.prepare(Array(0x1000, (N, K)), Array(0x2000, (N,)))
    x, y = Array(0x10000, (M, K)), Array(0x20000, (M, N))
    fc(x, out=y)
    fc(x, out=y)
    assert len(lib.binds) == 1 and lib.runs == 2
    w_ptr, b_ptr = lib.binds[0][1:3]
    assert lib.binds[0] == (0x10000, w_ptr, b_ptr, 0x20000)

    fc(Array(0x30000, (M, K)), out=y)  # x moves
    fc(x, out=Array(0x40000, (M, N)))  # y moves
    fc(x, out=y)  # both back
    assert [(bx, by) for bx, _, _, by in lib.binds[1:]] == [(0x30000, 0x20000), (0x10000, 0x40000),
                                                            (0x10000, 0x20000)]
    fc(x, out=y)
    assert len(lib.binds) == 4 and lib.runs == 6

    fc.prepare(Array(0x5000, (N, K)), Array(0x6000, (N,)))  # new weights, same buffers
    fc(x, out=y)
    assert len(lib.binds) == 5 and lib.binds[-1][1] != w_ptr and lib.binds[-1][2] != b_ptr


def test_a_refused_cs_create_is_an_error_with_the_librarys_reason(layer):
    fc, lib = layer
    lib.refusal = b"cs_create: there is no device 0 (0 devices)"
    fc.prepare(Array(0x1000, (N, K)), Array(0x2000, (N,)))
    with pytest.raises(RuntimeError, match=r"no kernel handle for M=8: cs_create: there is no device 0 \(0 devices\)"):
        fc(Array(0x10000, (M, K)), out=Array(0x20000, (M, N)))
    assert lib.created == [M] and not lib.binds and lib.runs == 0

def test_after_a_refused_binding_the_next_call_binds_again_even_on_the_pointers_before(layer):
    """The library keeps no binding after refusing one, so the loader must not skip the next."""
    fc, lib = layer
    fc.prepare(Array(0x1000, (N, K)), Array(0x2000, (N,)))
    x, y = Array(0x10000, (M, K)), Array(0x20000, (M, N))
    fc(x, out=y)
    lib.refuse_binds = True
    with pytest.raises(RuntimeError, match="refused its arguments: cs_bind: x must be 16-byte aligned"):
        fc(Array(0x30000, (M, K)), out=y)
    lib.refuse_binds = False
    fc(x, out=y)
    assert [bx for bx, _, _, _ in lib.binds] == [0x10000, 0x30000, 0x10000] and lib.runs == 2

def test_another_m_gets_its_own_handle_and_binding(layer):
    fc, lib = layer
    fc.prepare(Array(0x1000, (N, K)), Array(0x2000, (N,)))
    x, y = Array(0x10000, (M, K)), Array(0x20000, (M, N))
    half_x, half_y = Array(0x10000, (M // 2, K)), Array(0x20000, (M // 2, N))  # the same addresses
    fc(x, out=y)
    fc(half_x, out=half_y)
    fc(x, out=y)  # its handle is still bound to x and y
    assert lib.created == [M, M // 2] and len(lib.binds) == 2 and lib.runs == 3


def test_threads_calling_one_layer_each_launch_with_their_own_arguments(layer):
    """bind and run are two C calls: another thread's bind must never fall between them."""
    import threading

    fc, lib = layer
    fc.prepare(Array(0x1000, (N, K)), Array(0x2000, (N,)))
    launched, bound = [], {}

    def bind(handle, x, w, b, y, ws):
        bound[handle.value] = (x, y)
        threading.Event().wait(0.001)  # let another thread in, if it can
        return 0

    def run(handle, stream):
        launched.append(bound[handle.value])
        return 0

    lib.cs_create = lambda handle, m, *rest: setattr(handle._obj, "value", 1) or 0
    lib.cs_bind, lib.cs_run = bind, run
    pairs = [(Array(0x100000 * (i + 1), (M, K)), Array(0x100000 * (i + 1) + 0x80000, (M, N))) for i in range(4)]

    def calls(x, y):
        for _ in range(50):
            fc(x, out=y)

    threads = [threading.Thread(target=calls, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = {(x.__cuda_array_interface__["data"][0], y.__cuda_array_interface__["data"][0]) for x, y in pairs}
    assert len(launched) == 200 and set(launched) == want


@pytest.mark.parametrize(("case", "message"), [
    ("out-misaligned", "out must be 16-byte aligned"),
    ("out-overlaps-x", "out must not overlap x"),
    ("bias-dtype", "b is float32, this layer needs float16"),
], ids=["out-misaligned", "out-overlaps-x", "bias-dtype"])
def test_buffers_the_kernel_cannot_use_are_a_user_error_and_launch_nothing(layer, case, message):
    fc, lib = layer
    b = Array(0x2000, (N,))
    if case == "bias-dtype":
        b.__cuda_array_interface__["typestr"] = "<f4"
    with pytest.raises(UserError, match=message):
        fc.prepare(Array(0x1000, (N, K)), b)
        x = Array(0x10000, (M, K))
        fc(x, out=Array(0x20002 if case == "out-misaligned" else 0x10000 + 2 * K, (M, N)))
    assert lib.binds == [] and lib.runs == 0


def test_an_empty_batch_returns_an_empty_y_and_launches_nothing(layer):
    fc, lib = layer
    fc.prepare(Array(0x1000, (N, K)), Array(0x2000, (N,)))
    y = fc(Array(0x10000, (0, K)), out=Array(0x20000, (0, N)))
    assert y.shape == (0, N) and lib.created == [] and lib.runs == 0


def test_a_call_before_prepare_or_with_a_wrong_shape_is_a_user_error_and_launches_nothing(layer):
    fc, lib = layer
    with pytest.raises(UserError, match="prepare"):
        fc(Array(0x10000, (M, K)))
    fc.prepare(Array(0x1000, (N, K)), Array(0x2000, (N,)))
    with pytest.raises(UserError, match=r"\[M, 64\]"):
        fc(Array(0x10000, (M, K + 1)))
    with pytest.raises(UserError, match="out must be"):
        fc(Array(0x10000, (M, K)), out=Array(0x20000, (M, N + 1)))
    assert lib.binds == [] and lib.runs == 0


@pytest.mark.parametrize(("k", "pad_k", "input", "caller_io"), [
    (62, 64, "contiguous", 0),
    (20001, 20480, "padded", abi.IO_X_ALIGNED),  # copied from K's 16-byte rows, 20008
], ids=["k-padded", "caller-padded-split-k-pitch"])
def test_x_at_the_kernels_pitch_is_read_where_it_lies_through_a_handle_of_its_own(monkeypatch, k, pad_k, input,
                                                                                  caller_io):
    fc, lib = _kernel_layer(monkeypatch, k, pad_k, input)
    x_pitch = fc.spec.x_pitch
    assert fc.kernel_x_pitch == pad_k > x_pitch
    fc.prepare(Array(0x1000, (N, k)), Array(0x2000, (N,)))
    y = Array(0x900000, (M, N))
    as_caller, at_pad_k = Array(0x100000, (M, x_pitch)), Array(0x200000, (M, pad_k))
    for _ in range(2):
        fc(as_caller, out=y)
        fc(at_pad_k, out=y)
    # Each pitch keeps its own handle and binding: alternating them binds nothing again.
    assert lib.created == [M, M] and lib.io == [caller_io, abi.IO_X_PADDED]
    assert [bx for bx, _, _, _ in lib.binds] == [0x100000, 0x200000] and lib.runs == 4
    with pytest.raises(UserError, match=rf"needs \[M, {x_pitch}\].*or \[M, {pad_k}\] \(the kernel's pitch"):
        fc(Array(0x300000, (M, pad_k + 8)), out=y)
    # y may start right past an x at the kernel's pitch, not inside it.
    with pytest.raises(UserError, match="out must not overlap x"):
        fc(at_pad_k, out=Array(0x200000 + 2 * M * x_pitch, (M, N)))
    fc(at_pad_k, out=Array(0x200000 + 2 * M * pad_k, (M, N)))


def test_a_layer_that_reads_x_at_the_callers_pitch_offers_no_other(layer):
    fc, lib = layer
    assert fc.kernel_x_pitch is None
    fc.prepare(Array(0x1000, (N, K)), Array(0x2000, (N,)))
    with pytest.raises(UserError, match=r"needs \[M, 64\]$"):
        fc(Array(0x10000, (M, K + 8)))
    assert lib.binds == [] and lib.runs == 0


@pytest.mark.parametrize("output", ["contiguous", "transposed"])
def test_the_torch_fallback_writes_into_the_callers_y_with_w_transposed_once(monkeypatch, output):
    """GELU has no cuBLASLt epilogue, so the fallback runs F.linear's GEMM through the array
    namespace: into y itself where y is contiguous (a view per call cost host time), into y^T's
    transpose otherwise, with W's transpose made once, at prepare()."""
    ops = Ops()
    monkeypatch.setitem(loader._OPS, __name__.split(".")[0], ops)
    monkeypatch.setattr(loader, "open_library", lambda path: pytest.fail("GELU's fallback has no library to open"))
    meta = {"layer": {"M": M, "N": N, "K": K, "dtype": "f16", "bias": True, "activation": "gelu",
                      "output": output},
            "backend": "cublas", "library": "fallback.so", "transforms": {"pad_n": N, "pad_k": K}}
    fc = loader.FcLayer(Path("export"), meta, device=0, any_m=False)
    assert fc.via == "torch" and fc.kernel_x_pitch is None
    w, b = Array(0x1000, (N, K)), Array(0x2000, (N,))
    fc.prepare(w, b)
    x = Array(0x10000, (M, K))
    y = Array(0x20000, (M, N) if output == "contiguous" else (N, M))
    assert fc(x, out=y) is y and fc(x, out=y) is y
    (x1, w1, wt1, b1, act1, out1), (_, _, wt2, _, _, out2) = ops.linears
    assert (x1, w1, b1, act1) == (x, w, b, "gelu") and wt1.shape == (K, N) and wt2 is wt1
    if output == "contiguous":
        assert out1 is y and out2 is y
    else:
        assert out1.shape == (M, N) and out1.__cuda_array_interface__["data"][0] == 0x20000
