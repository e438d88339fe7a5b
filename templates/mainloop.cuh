// Rendered into the translation unit of every kernel launched early (templates/launcher.cu).
#pragma once
#include <cstdint>

#include "cutlass/cutlass.h"

// Weights prefetched while the kernel waits: CUTLASS's SM90 kernels wait for the kernel before
// them (griddepcontrol.wait) before their first load. Where that kernel is the call's own copy
// of x, the wait holds back W's loads too, though W is constant and no copy writes it. The
// kernel's descriptor-prefetch hook runs before the wait, on one thread of each CTA: here it
// also asks L2 for the CTA's share of W, so that the mainloop's first loads of W hit L2.
namespace cutsearch_prefetch {

// No prefetch of a W larger than half the H200's 50 MB L2: it would evict what it brought in.
constexpr uint64_t MAX_BYTES = 24ull << 20;
constexpr uint32_t CHUNK = 1u << 16;  // bytes of one bulk prefetch instruction

// Base: the CUTLASS collective mainloop. WeightIsA: W is the kernel's A (A and B swapped).
template <class Base, bool WeightIsA>
struct PrefetchWeights : Base {
  struct Arguments : Base::Arguments {
    bool prefetch_w = false;  // set where the kernel waits on the call's copy of x
  };
  struct Params : Base::Params {
    char const* w = nullptr;
    uint64_t w_bytes = 0;  // 0: no prefetch
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                                  void* workspace) {
    auto [m, n, k, l] = cute::append<4>(problem_shape, 1);
    // W's rows of K, over the kernel's batch (the K slices of split-K, the copies of the views).
    const uint64_t rows = WeightIsA ? uint64_t(m) : uint64_t(n);
    using ElementW = cute::conditional_t<WeightIsA, typename Base::ElementA, typename Base::ElementB>;
    const uint64_t bytes = rows * uint64_t(k) * uint64_t(l) * sizeof(ElementW);
    char const* w = reinterpret_cast<char const*>(WeightIsA ? static_cast<void const*>(args.ptr_A)
                                                            : static_cast<void const*>(args.ptr_B));
    return {{Base::to_underlying_arguments(problem_shape, args, workspace)}, w,
            args.prefetch_w && bytes <= MAX_BYTES ? bytes : 0};
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    Base::prefetch_tma_descriptors(params);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (params.w_bytes == 0) return;
    // Shares of whole 16-byte vectors, as the bulk prefetch needs; W's rows are 16-byte multiples.
    const uint64_t ctas = uint64_t(gridDim.x) * gridDim.y * gridDim.z;
    const uint64_t cta = blockIdx.x + uint64_t(gridDim.x) * (blockIdx.y + uint64_t(gridDim.y) * blockIdx.z);
    const uint64_t share = (params.w_bytes / ctas + 15) / 16 * 16;
    const uint64_t begin = cta * share;
    const uint64_t end = begin + share < params.w_bytes ? begin + share : params.w_bytes;
    for (uint64_t at = begin; at < end; at += CHUNK) {
      const uint32_t bytes = uint32_t(end - at < CHUNK ? end - at : CHUNK);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(params.w + at), "r"(bytes) : "memory");
    }
#endif
  }
};

}  // namespace cutsearch_prefetch
