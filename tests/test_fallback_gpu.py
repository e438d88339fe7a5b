"""The cuBLAS fallback on the GPU: the C ABI library an export ships when cuBLAS won, and the
Python loader's path for it, each against a float64 reference.

The library is the one `cutsearch export` builds (cuBLASLt, bias fused into the GEMM's epilogue,
GELU and SiLU in a second kernel). Its headers come with the CUDA toolkit's cuBLAS, which the GPU
machines have; without a GPU these tests skip.
"""

from __future__ import annotations

import ctypes

import pytest

from cutsearch.abi import io_flags, open_library
from cutsearch.cache import Cache
from cutsearch.codegen import cutlass_version, render_fallback
from cutsearch.compiler import CompiledKernel, Compiler, Toolchain
from cutsearch.problem import Layer

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

LAYERS = {
    "tiny bf16, bias, SiLU": Layer(m=5, n=7, k=9, dtype="bf16", bias=True, activation="silu"),
    "f16, bias, ReLU": Layer(m=300, n=1001, k=999, bias=True, activation="relu"),
    "f16, bias, GELU": Layer(m=64, n=256, k=512, bias=True, activation="gelu"),
    "bf16, no bias, M=1": Layer(m=1, n=4096, k=4096, dtype="bf16"),
    "f16, bias, y^T": Layer(m=33, n=96, k=128, bias=True, output="transposed"),
    "f16, bias, padded x and y": Layer(m=17, n=99, k=77, bias=True, input="padded", output="padded"),
}


@pytest.fixture(scope="module")
def libraries(kernel_cache):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    compiler = Compiler(Cache(kernel_cache), Toolchain.find(cutlass_version()), jobs=4)
    built = dict(compiler.compile_many((name, render_fallback(layer)) for name, layer in LAYERS.items()))
    for name, result in built.items():
        assert isinstance(result, CompiledKernel), (name, result)
    return {name: open_library(result.library) for name, result in built.items()}


def _reference(layer: Layer, x, w, b):
    F = torch.nn.functional
    y = x[:, : layer.k].double() @ w.double().T + (b.double() if b is not None else 0)
    return getattr(F, layer.activation)(y) if layer.activation != "none" else y


def _inputs(layer: Layer):
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[layer.dtype]
    g = torch.Generator(device="cuda").manual_seed(layer.m * 7 + layer.n)
    x = torch.zeros(layer.m, layer.x_pitch, dtype=dtype, device="cuda")
    x[:, : layer.k] = torch.randn(layer.m, layer.k, device="cuda", generator=g).to(dtype)
    w = (torch.randn(layer.n, layer.k, device="cuda", generator=g) / layer.k ** 0.5).to(dtype)
    b = torch.randn(layer.n, device="cuda", generator=g).to(dtype) if layer.bias else None
    return x, w, b


def _as_layer_output(layer: Layer, y):
    """y in the layer's own [M, N] orientation, without its padding."""
    return y.T if layer.output == "transposed" else y[:, : layer.n]


@pytest.mark.parametrize("name", list(LAYERS))
def test_the_c_abi_fallback_computes_the_layer(libraries, name):
    layer, lib = LAYERS[name], libraries[name]
    x, w, b = _inputs(layer)
    handle = ctypes.c_void_p()
    assert lib.cs_create(ctypes.byref(handle), layer.m, layer.n, layer.k, layer.n, layer.k, 0, 0, 1, 1, 0, 0,
                         io_flags(layer.input == "padded", layer.output == "padded")) == 0
    try:
        ws = torch.empty(max(16, lib.cs_workspace_size(handle)), dtype=torch.uint8, device="cuda")
        y = torch.full(layer.y_shape, float("nan"), dtype=x.dtype, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        assert lib.cs_bind(handle, x.data_ptr(), w.data_ptr(), b.data_ptr() if b is not None else None,
                           y.data_ptr(), ws.data_ptr()) == 0, lib.cs_error(handle)
        for _ in range(3):  # repeated calls stay correct
            assert lib.cs_run(handle, stream) == 0, lib.cs_error(handle)
        torch.cuda.synchronize()
        want = _reference(layer, x, w, b)
        got = _as_layer_output(layer, y).double()
        err = float(torch.linalg.norm(got - want) / torch.linalg.norm(want))
        assert err < 1e-2, (name, err)
    finally:
        lib.cs_destroy(handle)


def test_the_fallback_refuses_missing_pointers_and_says_why(libraries):
    """cuBLASLt takes any alignment, so only a missing pointer is refused, before any call."""
    layer, lib = LAYERS["f16, bias, ReLU"], libraries["f16, bias, ReLU"]
    x, w, b = _inputs(layer)
    handle = ctypes.c_void_p()
    assert lib.cs_create(ctypes.byref(handle), layer.m, layer.n, layer.k, layer.n, layer.k, 0, 0, 1, 1, 0, 0, 0) == 0
    try:
        ws = torch.empty(lib.cs_workspace_size(handle), dtype=torch.uint8, device="cuda")
        y = torch.empty(layer.y_shape, dtype=x.dtype, device="cuda")
        good = [x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr()]
        missing = {0: "x, w and y must not be null", 2: "this layer adds a bias: b must not be null",
                   4: "the workspace must not be null (cs_workspace_size bytes)"}
        for i, reason in missing.items():
            args = [None if j == i else p for j, p in enumerate(good)]
            assert lib.cs_bind(handle, *args) == 1 and lib.cs_error(handle).decode() == "cs_bind: " + reason
        assert lib.cs_bind(handle, *good) == 0, lib.cs_error(handle)
        assert lib.cs_bind(handle, None, *good[1:]) == 1
        assert lib.cs_run(handle, torch.cuda.current_stream().cuda_stream) == 1  # a refusal leaves no binding
        assert lib.cs_error(handle).decode() == "cs_bind was not called"
    finally:
        lib.cs_destroy(handle)


@pytest.mark.parametrize("name", ["tiny bf16, bias, SiLU", "f16, bias, GELU", "f16, bias, y^T"])
def test_the_python_fallback_writes_into_out_and_matches_f_linear(name):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from cutsearch.loader import _TorchOps

    layer = LAYERS[name]
    x, w, b = _inputs(layer)
    out = torch.full(layer.y_shape, float("nan"), dtype=x.dtype, device="cuda")
    view = out.T if layer.output == "transposed" else out[:, : layer.n]
    assert _TorchOps(torch).linear(x[:, : layer.k], w, w.T, b, layer.activation, view) is view
    want = _reference(layer, x, w, b)
    err = float(torch.linalg.norm(view.double() - want) / torch.linalg.norm(want))
    assert err < 1e-2, (name, err)


@pytest.mark.parametrize("name", ["f16, bias, ReLU", "f16, bias, GELU", "f16, bias, y^T",
                                  "f16, bias, padded x and y"])
def test_the_loaded_fallback_computes_the_layer(tmp_path, name):
    """`cutsearch.load` of a fallback export: through its C library where cuBLASLt fuses the
    activation (ReLU), through torch elsewhere; with and without `out`."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import cutsearch
    from cutsearch.export import LIBRARY, _fallback_export, _write

    layer = LAYERS[name]
    files, body = _fallback_export(layer, "no kernel was searched", None)
    fc = cutsearch.load(_write(tmp_path / "export", files, body, layer=layer, study="fallback", summary=None))
    assert (fc.via == LIBRARY) is (layer.activation == "relu"), fc
    x, w, b = _inputs(layer)
    fc.prepare(w, b)
    want = _reference(layer, x, w, b)
    out = torch.full(layer.y_shape, float("nan"), dtype=x.dtype, device="cuda")
    for y in (fc(x), fc(x, out=out), fc(x)):  # the second call on the same pointers binds nothing new
        got = _as_layer_output(layer, y).double()
        err = float(torch.linalg.norm(got - want) / torch.linalg.norm(want))
        assert err < 1e-2, (name, err)
    assert fc(x, out=out) is out
