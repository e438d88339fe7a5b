"""The exported kernel through `cutsearch.load`, on the GPU, in a fresh process.

Each test searches and exports its own kernel (two trials). The first test runs the export that
CUTSEARCH_TEST_EXPORT names instead, where it is set (say, one from a long search on the H200).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cutsearch.problem import Layer
from tests.exports import search_and_export

pytestmark = pytest.mark.gpu

EXPORT = os.environ.get("CUTSEARCH_TEST_EXPORT")
ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import sys, torch, torch.nn.functional as F
import cutsearch
from cutsearch.errors import UserError

fc = cutsearch.load(sys.argv[1])
spec = fc.meta["layer"]
dt = {"f16": torch.float16, "bf16": torch.bfloat16}[spec["dtype"]]
m, n, k = spec["M"], spec["N"], spec["K"]
x = torch.randn(m, k, device="cuda", dtype=dt)
w = torch.randn(n, k, device="cuda", dtype=dt) / k ** 0.5
b = torch.randn(n, device="cuda", dtype=dt) if spec["bias"] else None
fc.prepare(w, b)
act = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[spec["activation"]]
ref = act(x.double() @ w.double().T + (b.double() if b is not None else 0))

def err(y):
    return float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref))

# Eager, on the default stream.
y = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
fc(x, out=y)
torch.cuda.synchronize()
assert err(y) < 1e-2, ("eager", err(y))

# On a side stream: the call must run on the current stream, not the default one.
side = torch.cuda.Stream()
y2 = torch.full_like(y, float("nan"))
with torch.cuda.stream(side):
    fc(x, out=y2)
side.synchronize()
assert err(y2) < 1e-2, ("side stream", err(y2))

# Captured in a CUDA graph (after the eager call bound the arguments), then replayed.
y3 = torch.full_like(y, float("nan"))
fc(x, out=y3)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    fc(x, out=y3)
y3.fill_(float("nan"))
graph.replay()
torch.cuda.synchronize()
assert err(y3) < 1e-2, ("graph replay", err(y3))

# New buffers for x and y, then the first ones again: the call must follow every move (the
# loader skips re-binding only while both pointers stay put).
x2 = torch.randn_like(x)
ref2 = act(x2.double() @ w.double().T + (b.double() if b is not None else 0))
y4 = torch.full_like(y, float("nan"))
fc(x2, out=y4)
y.fill_(float("nan"))
fc(x, out=y)
y5 = torch.full_like(y, float("nan"))
fc(x, out=y5)
torch.cuda.synchronize()
err4 = float(torch.linalg.norm(y4.double() - ref2) / torch.linalg.norm(ref2))
assert err4 < 1e-2 and err(y) < 1e-2 and err(y5) < 1e-2, ("moved buffers", err4, err(y), err(y5))

# prepare() with other weights, the buffers unchanged: the call must use the new W and b.
w2 = torch.randn_like(w)
b2 = torch.randn_like(b) if b is not None else None
fc.prepare(w2, b2)
fc(x, out=y5)
torch.cuda.synchronize()
ref3 = act(x.double() @ w2.double().T + (b2.double() if b2 is not None else 0))
err5 = float(torch.linalg.norm(y5.double() - ref3) / torch.linalg.norm(ref3))
assert err5 < 1e-2, ("new weights", err5)
fc.prepare(w, b)

# A wrong M is an error unless other M are allowed; then it is still correct.
try:
    fc(x[: m // 2].contiguous())
    raise SystemExit("a wrong M was accepted")
except UserError:
    pass
any_m = cutsearch.load(sys.argv[1], any_m=True).prepare(w, b)
half = any_m(x[: m // 2].contiguous())
torch.cuda.synchronize()
assert float(torch.linalg.norm(half.double() - ref[: m // 2]) / torch.linalg.norm(ref[: m // 2])) < 1e-2
print("ok", err(y), err(y2), err(y3))
"""


def _run_script(script: str, exported: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", script, str(exported)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok")


@pytest.mark.nvcc
def test_exported_kernel_in_a_fresh_process_is_correct_eager_on_a_side_stream_and_in_a_cuda_graph(
        private_dirs, tmp_path):
    # Unaligned N and K, where cuBLAS is slowest, so that a kernel wins even in two trials.
    exported = Path(EXPORT) if EXPORT else search_and_export(
        Layer(m=300, n=1001, k=999, dtype="bf16", bias=True, activation="gelu"), tmp_path / "export")
    _run_script(SCRIPT, exported)


# A padded or transposed layout through `cutsearch.load`, as an application calls it: x handed over
# with padded rows (the padding finite but not zero, which W's zero padding must cancel), y written
# padded or as y^T into the caller's buffer, or returned when no buffer is given.
LAYOUT_SCRIPT = r"""
import sys, torch, torch.nn.functional as F
import cutsearch

fc = cutsearch.load(sys.argv[1])
assert fc.backend == "cutlass", fc.backend
spec = fc.spec
dt = {"f16": torch.float16, "bf16": torch.bfloat16}[spec.dtype]
gen = torch.Generator(device="cuda").manual_seed(7)
x = torch.full((spec.m, spec.x_pitch), 3.0, device="cuda", dtype=dt)
x[:, : spec.k] = torch.randn(spec.m, spec.k, device="cuda", dtype=dt, generator=gen)
w = torch.randn(spec.n, spec.k, device="cuda", dtype=dt, generator=gen) / spec.k ** 0.5
b = torch.randn(spec.n, device="cuda", dtype=dt, generator=gen) if spec.bias else None
fc.prepare(w, b)
act = {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[spec.activation]
ref = act(x[:, : spec.k].double() @ w.double().T + (b.double() if b is not None else 0))

def err(out):
    y = out.T if spec.output == "transposed" else out[:, : spec.n]
    assert not torch.isnan(y).any()
    return float(torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref))

out = torch.full(spec.y_shape, float("nan"), device="cuda", dtype=dt)
assert fc(x, out=out) is out
returned = fc(x)
torch.cuda.synchronize()
assert tuple(returned.shape) == spec.y_shape, (tuple(returned.shape), spec.y_shape)
assert err(out) < 1e-2 and err(returned) < 1e-2, (err(out), err(returned))
if fc.kernel_x_pitch:  # the same x kept at the kernel's own pitch: read where it lies
    wide = torch.full((spec.m, fc.kernel_x_pitch), 3.0, device="cuda", dtype=dt)
    wide[:, : spec.k] = x[:, : spec.k]
    at_pad_k = torch.full(spec.y_shape, float("nan"), device="cuda", dtype=dt)
    fc(wide, out=at_pad_k)
    fc(x, out=out)  # and the caller's pitch again, on its own handle
    torch.cuda.synchronize()
    assert err(at_pad_k) < 1e-2 and err(out) < 1e-2, (err(at_pad_k), err(out))
print("ok", err(out), err(returned))
"""


@pytest.mark.nvcc
@pytest.mark.parametrize("layer", [
    Layer(m=64, n=1001, k=999, dtype="f16", bias=True, input="padded", output="padded"),
    Layer(m=64, n=1001, k=999, dtype="bf16", bias=True, activation="relu", output="transposed"),
], ids=["x-and-y-padded-f16", "y-transposed-bf16-relu"])
def test_a_layout_export_through_load_in_a_fresh_process_is_correct(layer, private_dirs, tmp_path):
    _run_script(LAYOUT_SCRIPT, search_and_export(layer, tmp_path / "export"))


@pytest.mark.nvcc
def test_a_padded_x_copied_to_split_ks_pitch_through_load_is_correct(private_dirs, tmp_path):
    """K = 20001 arrives at pitch 20008, which no slice count cuts: the model's first picks copy
    x to split-K's pitch, so `cutsearch.load` hands the library x in K's 16-byte rows
    (IO_X_ALIGNED) and the call copies it, its padding columns (3.0 here) left behind; an x
    kept at that pitch is read where it lies (IO_X_PADDED)."""
    import json

    layer = Layer(m=7, n=9, k=20001, dtype="f16", bias=True, activation="gelu", input="padded")
    exported = search_and_export(layer, tmp_path / "export")
    pad_k = json.loads((exported / "meta.json").read_text())["transforms"]["pad_k"]
    assert pad_k > layer.x_pitch == 20008, pad_k
    _run_script(LAYOUT_SCRIPT, exported)
