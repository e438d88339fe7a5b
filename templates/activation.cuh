// Rendered into every kernel's and the cuBLAS fallback's translation unit.
#pragma once
#include <cuda_runtime.h>

// The layer's activations, in fp32: the one definition that the split-K reduction, our own
// epilogues, the visitor tree's SiLU and the fallback's activation pass all use.
namespace cutsearch_act {

enum { NONE = 0, RELU = 1, GELU = 2, SILU = 3 };

template <int Act>
__device__ __forceinline__ float activate(float v) {
  if constexpr (Act == RELU) return v > 0.f ? v : 0.f;
  if constexpr (Act == GELU) return 0.5f * v * (1.f + erff(v * 0.70710678f));
  // The fast exponential and division: a handful of instructions where expf and an IEEE
  // division take tens, which an epilogue that does not overlap the mainloop pays per element.
  // Within about 1e-5 of x / (1 + exp(-x)) in relative terms (the fast exponential's error grows
  // with |x|), far below f16/bf16 rounding; it gives 0 where |y| < 1e-35.
  if constexpr (Act == SILU) return __fdividef(v, 1.f + __expf(-v));
  return v;
}

// The visitor tree's compute node for SiLU, in place of cutlass::epilogue::thread::SiLu (expf
// and an IEEE division). The tree calls it on a fragment: a cutlass::Array of fp32.
template <class Fragment>
struct SiLu {
  __device__ __forceinline__ Fragment operator()(Fragment const& v) const {
    Fragment y;
#pragma unroll
    for (int i = 0; i < int(Fragment::kElements); ++i) y[i] = activate<SILU>(v[i]);
    return y;
  }
};

}  // namespace cutsearch_act
