"""The coefficients of templates/activation.cuh's GELU, and how close they come.

    python studies/scripts/gelu_fit.py    (needs scipy)

GELU(x) = x Phi(x) = x / (1 + 2^(x p(x^2))), where -x p(x^2) / log2(e) is the logit of Phi. p, a
degree-6 polynomial in s = x^2, is the minimax fit of that logit over 0 < x <= 7 (a linear
programme), weighted by how much an error in it moves y: x^2 Phi (1 - Phi), plus a little
relative weight in the negative tail. Beyond |x| = 7 the kernel holds s at 49: y is then x or 0
to well within fp32. The fit is checked the way the kernel computes it, in fp32 with fp32
coefficients, against the float64 GELU, beside 0.5 x (1 + erf(x / sqrt 2)) in fp32.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.special import erf, log_ndtr, ndtr

DEGREE, LIMIT = 6, 7.0


def fit() -> np.ndarray:
    """p's coefficients, constant term first, as fp32, -1/ln 2 folded in."""
    x = np.linspace(1e-3, LIMIT, 8000)
    phi = ndtr(x)
    weight = x * x * phi * (1 - phi) + 1e-3 * x * (1 - phi)
    target = (log_ndtr(x) - log_ndtr(-x)) / x
    basis = np.stack([x ** (2 * k) for k in range(DEGREE + 1)], 1) * weight[:, None]
    n = basis.shape[1]
    ones = np.ones((len(x), 1))
    # min e subject to |basis c - target| <= e, in the weighted norm
    bound = np.vstack([np.hstack([basis, -ones]), np.hstack([-basis, -ones])])
    rhs = np.concatenate([target * weight, -target * weight])
    cost = np.r_[np.zeros(n), 1.0]
    solution = linprog(cost, A_ub=bound, b_ub=rhs, bounds=[(None, None)] * n + [(0, None)], method="highs")
    return (-solution.x[:n] / np.log(2)).astype(np.float32)


def fast_gelu(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    s = np.minimum(x * x, np.float32(LIMIT * LIMIT))
    acc = np.full_like(x, p[-1])
    for c in p[-2::-1]:
        acc = (acc.astype(np.float64) * s + c).astype(np.float32)  # fmaf
    with np.errstate(over="ignore"):
        return (x / (np.float32(1) + np.exp2(x * acc))).astype(np.float32)


def erf_gelu(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    e = erf((x * np.float32(0.70710678)).astype(np.float64)).astype(np.float32)
    return (np.float32(0.5) * x * (np.float32(1) + e)).astype(np.float32)


def main() -> None:
    p = fit()
    print("    float p = %.9ef;" % p[-1])
    for c in p[-2::-1]:
        print("    p = fmaf(p, s, %.9ef);" % c)
    x = np.concatenate([np.linspace(-12, 12, 2_000_001), np.logspace(-8, 1.2, 100_000),
                        -np.logspace(-8, 1.2, 100_000)])
    exact = x * ndtr(x)
    for name, y in (("fit", fast_gelu(x, p)), ("erf", erf_gelu(x))):
        err = np.abs(y - exact) / (1 + np.abs(exact))
        print(f"{name}: max |y - x Phi(x)| / (1 + |y|) = {err.max():.2e}")


if __name__ == "__main__":
    main()
