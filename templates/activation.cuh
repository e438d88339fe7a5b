// Rendered into every kernel's and the cuBLAS fallback's translation unit.
#pragma once
#include <cuda_runtime.h>

// The layer's activations, in fp32: the one definition that the split-K reduction, our own
// epilogues, the visitor tree's SiLU and GELU and the fallback's activation pass all use.
namespace cutsearch_act {

enum { NONE = 0, RELU = 1, GELU = 2, SILU = 3 };

template <int Act>
__device__ __forceinline__ float activate(float v) {
  if constexpr (Act == RELU) return v > 0.f ? v : 0.f;
  if constexpr (Act == GELU) {
    // x Phi(x) as x / (1 + 2^(x p(x^2))): p is a minimax fit of -log2(Phi / (1 - Phi)) / x on
    // |x| <= 7 (studies/scripts/gelu_fit.py), linear in x beyond. Two fast intrinsics and six
    // FMAs where erff takes about 27 instructions; within 2e-7 (1 + |y|) of x Phi(x), as close as
    // 0.5 x (1 + erff(x / sqrt 2)) comes.
    float const s = fminf(v * v, 49.f);
    float p = -5.248854240e-9f;
    p = fmaf(p, s, 3.885392061e-7f);
    p = fmaf(p, s, -1.153177618e-5f);
    p = fmaf(p, s, 1.600688411e-4f);
    p = fmaf(p, s, 9.318753291e-5f);
    p = fmaf(p, s, -1.048352942e-1f);
    p = fmaf(p, s, -2.302208424f);
    return __fdividef(v, 1.f + exp2f(v * p));
  }
  // The fast exponential and division: a handful of instructions where expf and an IEEE
  // division take tens, which an epilogue that does not overlap the mainloop pays per element.
  // Within about 1e-5 of x / (1 + exp(-x)) in relative terms (the fast exponential's error grows
  // with |x|), far below f16/bf16 rounding; it gives 0 where |y| < 1e-35.
  if constexpr (Act == SILU) return __fdividef(v, 1.f + __expf(-v));
  return v;
}

// The visitor tree's compute nodes, in place of CUTLASS's SiLu (expf and an IEEE division) and
// GELU (erff). The tree calls them on a fragment: a cutlass::Array of fp32.
template <int Act, class Fragment>
struct OnFragment {
  __device__ __forceinline__ Fragment operator()(Fragment const& v) const {
    Fragment y;
#pragma unroll
    for (int i = 0; i < int(Fragment::kElements); ++i) y[i] = activate<Act>(v[i]);
    return y;
  }
};

template <class Fragment>
struct SiLu : OnFragment<SILU, Fragment> {};

template <class Fragment>
struct Gelu : OnFragment<GELU, Fragment> {};

}  // namespace cutsearch_act
