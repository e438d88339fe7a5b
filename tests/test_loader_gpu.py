"""The exported kernel through `cutsearch.load`, on the GPU, in a fresh process.

Needs an export with a real kernel: CUTSEARCH_TEST_EXPORT names its directory (for example
`cutsearch export <study> --out exports/<study>` after a search on the H200).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

EXPORT = os.environ.get("CUTSEARCH_TEST_EXPORT")

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


@pytest.mark.skipif(not EXPORT, reason="set CUTSEARCH_TEST_EXPORT to an export directory with a real kernel")
def test_exported_kernel_in_a_fresh_process_is_correct_eager_on_a_side_stream_and_in_a_cuda_graph():
    proc = subprocess.run([sys.executable, "-c", SCRIPT, EXPORT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok")
