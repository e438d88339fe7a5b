"""templates/activation.cuh's GELU, evaluated as the kernel does (fp32, its own coefficients),
against the float64 GELU. No GPU: the fast exponential and division are taken as exact here;
tests/test_layouts_gpu.py checks the kernels themselves against float64."""

import math
import re
from pathlib import Path

import numpy as np

SOURCE = (Path(__file__).resolve().parent.parent / "templates" / "activation.cuh").read_text()


def gelu_as_the_kernel_computes_it(x: np.ndarray) -> np.ndarray:
    body = SOURCE[SOURCE.index("Act == GELU"):SOURCE.index("Act == SILU")]
    limit = np.float32(re.search(r"fminf\(v \* v, ([-+.\deE]+)f\)", body).group(1))
    first = float(re.search(r"float p = ([-+.\deE]+)f;", body).group(1))
    rest = [float(c) for c in re.findall(r"fmaf\(p, s, ([-+.\deE]+)f\)", body)]
    assert len(rest) == 6, body
    x = x.astype(np.float32)
    with np.errstate(over="ignore"):  # x * x and 2^(x p) overflow to inf far out, as in fp32 on the GPU
        s = np.minimum(x * x, limit)
        p = np.full_like(x, first)
        for c in rest:
            p = (p.astype(np.float64) * s + np.float32(c)).astype(np.float32)
        return (x / (np.float32(1) + np.exp2(x * p))).astype(np.float32)


def exact_gelu(x: np.ndarray) -> np.ndarray:
    return np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) for v in x.tolist()])


def test_gelu_is_within_fp32_reach_of_x_phi_x():
    x = np.concatenate([np.linspace(-9, 9, 180_001), np.logspace(-7, 1, 2_000), -np.logspace(-7, 1, 2_000)])
    y, exact = gelu_as_the_kernel_computes_it(x), exact_gelu(x)
    # 0.5 x (1 + erff(x / sqrt 2)) in fp32 comes within 1.2e-7 (1 + |y|) (studies/scripts/gelu_fit.py).
    assert np.max(np.abs(y - exact) / (1 + np.abs(exact))) < 2e-7
    # Near zero, relatively too: GELU(x) ~ x / 2.
    small = (np.abs(x) < 1e-3) & (x != 0)
    assert np.max(np.abs(y[small] - exact[small]) / np.abs(exact[small])) < 1e-5


def test_gelu_has_its_limits_far_out():
    x = np.array([-1e30, -1e4, -60.0, 0.0, 60.0, 1e4, 1e30, np.inf], dtype=np.float32)
    y = gelu_as_the_kernel_computes_it(x)
    assert np.all(np.isfinite(y[:-1]))
    assert np.all(np.abs(y[:4]) < 1e-30)
    assert np.array_equal(y[4:], x[4:])
