// Rendered into the translation unit of every kernel launched early (templates/launcher.cu).
#pragma once
#include <cstdint>

#include "cutlass/cutlass.h"

// The mainloop around CUTLASS's collective, for two things a call with a copy of x can do better.
// W prefetched while the kernel waits: CUTLASS's SM90 kernels wait for the kernel before them
// (griddepcontrol.wait) before their first load. Where that kernel is the call's own copy of x,
// the wait holds back W's loads too, though W is constant and no copy writes it. The kernel's
// descriptor-prefetch hook runs before the wait, on one thread of each CTA: here it also asks
// L2 for the CTA's share of W, so that the mainloop's first loads of W hit L2.
// x copied by the GEMM itself (OwnCopy): no copy kernel, no launch between. Before its first
// TMA load, the producer warp writes the rows of x its tile reads into the padded buffer (its
// columns past K zero), under split-K only its slice's columns. CTAs that share rows write the
// same values, and each TMA load reads only what its own CTA wrote, so no CTA waits for another.
namespace cutsearch_mainloop {

// No prefetch of a W larger than half the H200's 50 MB L2: it would evict what it brought in.
constexpr uint64_t MAX_BYTES = 24ull << 20;
constexpr uint32_t CHUNK = 1u << 16;  // bytes of one bulk prefetch instruction
constexpr size_t STAGE_BYTES = 32u << 10;  // shared memory a block of x's rows is staged in at most

// Base: the CUTLASS collective mainloop. WeightIsA: W is the kernel's A (A and B swapped).
// OwnCopy: compiled with the copy of x (kernels without a register cap on the producer).
template <class Base, bool WeightIsA, bool OwnCopy>
struct Mainloop : Base {
  using ElementX = cute::conditional_t<WeightIsA, typename Base::ElementB, typename Base::ElementA>;

  // x is staged in the stages' buffers of the operand that no other CTA of the cluster multicasts
  // into: nothing is in them before this CTA's first TMA load (the ws kernel calls load once).
  using Cluster = typename Base::DispatchPolicy::ClusterShape;
  static constexpr bool kStageInA = cute::size<1>(Cluster{}) == 1;
  static_assert(!OwnCopy || kStageInA || cute::size<0>(Cluster{}) == 1, "no stage buffers of this CTA's alone");
  using TensorStorage = typename Base::TensorStorage;
  static constexpr size_t kStageBytes = kStageInA ? sizeof(decltype(cute::declval<TensorStorage&>().smem_A))
                                                  : sizeof(decltype(cute::declval<TensorStorage&>().smem_B));
  static constexpr size_t kScratchBytes = kStageBytes < STAGE_BYTES ? kStageBytes : STAGE_BYTES;

  // Whether k elements of a row of x (a whole row, or a K slice's columns), and the lead to their
  // 16-byte boundary, fit the staging.
  static constexpr bool copies_rows_of(int k) {
    return OwnCopy && size_t(k) * sizeof(ElementX) + 16 <= kScratchBytes;
  }

  struct Arguments : Base::Arguments {
    bool prefetch_w = false;  // set where the kernel waits, on the call's copy of x or its own
    void const* x = nullptr;  // x as the caller has it, where the GEMM copies it (OwnCopy)
    int x_k = 0;              // x's row length
    int x_pitch = 0;          // the buffer's: the problem's K, or under split-K all its slices'
  };
  struct Params : Base::Params {
    char const* w = nullptr;
    uint64_t w_bytes = 0;  // 0: no prefetch
    ElementX const* x = nullptr;  // nullptr: x arrives padded
    ElementX* x_pad = nullptr;
    int x_rows = 0, x_k = 0, x_pitch = 0;
    int x_slice = 0;  // the buffer's columns a CTA reads: the problem's K, one slice under split-K
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
    void const* x_pad = WeightIsA ? static_cast<void const*>(args.ptr_B) : static_cast<void const*>(args.ptr_A);
    return {{Base::to_underlying_arguments(problem_shape, args, workspace)}, w,
            args.prefetch_w && bytes <= MAX_BYTES ? bytes : 0,
            OwnCopy ? static_cast<ElementX const*>(args.x) : nullptr,
            const_cast<ElementX*>(static_cast<ElementX const*>(x_pad)), WeightIsA ? int(n) : int(m), args.x_k,
            args.x_pitch, int(k)};
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

  // The producer warp, all its lanes, after the kernel's wait for the kernel before it.
  template <class Pipeline, class State, class Inputs, class BlockCoord, class KTileIterator, class Storage>
  CUTLASS_DEVICE void load(Params const& params, Pipeline pipeline, State state, Inputs const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, Storage& shared_tensors) {
    if constexpr (OwnCopy) {
      if (params.x != nullptr) {
        constexpr int tile_rows = WeightIsA ? cute::size<1>(typename Base::TileShape{})
                                            : cute::size<0>(typename Base::TileShape{});
        const int r0 = int(WeightIsA ? cute::get<1>(blk_coord) : cute::get<0>(blk_coord)) * tile_rows;
        const int c0 = int(cute::get<3>(blk_coord)) * params.x_slice;  // the batch: split-K's slice
        if constexpr (kStageInA) {
          copy_rows(params, r0, r0 + tile_rows, c0, shared_tensors.smem_A.data());
        } else {
          copy_rows(params, r0, r0 + tile_rows, c0, shared_tensors.smem_B.data());
        }
      }
    }
    Base::load(params, pipeline, state, load_inputs, blk_coord, k_tile_iter, k_tile_count, thread_idx,
               block_rank_in_cluster, shared_tensors);
  }

  // Rows [r0, r1) of x into the buffer's columns [c0, c0 + x_slice), those past K zero, a block
  // of rows at a time. The block's part of x is one contiguous range where the columns are whole
  // rows, else a range per row. The lanes bring the ranges into shared memory as aligned 16-byte
  // cp.async copies, all in flight together, and the ranges' ragged ends element by element,
  // then write each 16-byte vector of the buffer's rows with one store.
  template <class Scratch>
  CUTLASS_DEVICE static void copy_rows(Params const& params, int r0, int r1, int c0, Scratch* scratch_ptr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using T = ElementX;
    constexpr int V = 16 / sizeof(T);
    constexpr int kScratch = int(kScratchBytes / sizeof(T));
    const int lane = threadIdx.x % 32;
    const int k = params.x_k, pitch = params.x_pitch;
    const int c1 = c0 + params.x_slice, ce = c1 < k ? c1 : k;  // x's columns of the slice: [c0, ce)
    const int64_t len = ce > c0 ? ce - c0 : 0;
    const bool whole = c0 == 0 && ce == k;
    T const* src = params.x;
    T* dst = params.x_pad;
    T* staged = reinterpret_cast<T*>(scratch_ptr);
    r1 = r1 < params.x_rows ? r1 : params.x_rows;
    // Rows a block: each range, plus the lead to the 16-byte boundary below it, must fit.
    const int row_stride = whole ? k : int((len + 2 * V - 1) / V * V);
    const int block = whole ? (kScratch - V) / k : kScratch / row_stride;
    for (int ra = r0; ra < r1; ra += block) {
      const int rb = ra + block < r1 ? ra + block : r1;
      int lead = 0;  // where the block's range starts in shared memory (whole rows)
      if (whole) {
        const int64_t s0 = int64_t(ra) * k, s1 = int64_t(rb) * k;
        lead = stage(src, s0, s1, staged, lane);
        stage_ends(src, 1, [&](int) { return Range{s0, s1, staged}; }, lane);
      } else {
        auto row = [&](int q) {
          const int64_t s0 = int64_t(ra + q) * k + c0;
          return Range{s0, s0 + len, staged + q * row_stride};
        };
        for (int q = 0; q < rb - ra; ++q) {
          const Range at = row(q);
          stage(src, at.s0, at.s1, at.to, lane);
        }
        stage_ends(src, rb - ra, row, lane);
      }
      asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
      __syncwarp();
      const int row_vectors = (c1 - c0) / V;
      for (int i = lane; i < (rb - ra) * row_vectors; i += 32) {
        const int r = ra + i / row_vectors, c = c0 + (i % row_vectors) * V;
        // Row r's first column of the slice in shared memory.
        T const* row = whole ? staged + lead + int64_t(r - ra) * k
                             : staged + (r - ra) * row_stride + lead_of(src + int64_t(r) * k + c0);
        alignas(16) T out[V];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < V; ++j) out[j] = c + j < k ? row[c + j - c0] : T(0);
        *reinterpret_cast<uint4*>(dst + int64_t(r) * pitch + c) = *reinterpret_cast<uint4 const*>(out);
      }
      __syncwarp();  // the block's reads of shared memory before the next block's copies
    }
    // The writes are the generic proxy's; the TMA loads after them (of the buffer, and into the
    // shared memory used here) are the async proxy's.
    asm volatile("fence.proxy.async.global;\nfence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
#endif
  }

  // Elements of x from p down to the 16-byte boundary at or below it.
  CUTLASS_DEVICE static int lead_of(ElementX const* p) {
    return int((reinterpret_cast<uintptr_t>(p) & 15) / sizeof(ElementX));
  }

  // x's elements [s0, s1), staged in shared memory from `to` on, from the 16-byte boundary at or
  // below s0.
  struct Range {
    int64_t s0, s1;
    ElementX* to;
  };

  // A range's whole 16-byte vectors: cp.async copies issued by the warp's lanes, not yet waited
  // for. Returns the lead.
  CUTLASS_DEVICE static int stage(ElementX const* src, int64_t s0, int64_t s1, ElementX* to, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int V = 16 / sizeof(ElementX);
    const int lead = lead_of(src + s0);
    const int64_t base = s0 - lead;
    const int vectors = int((s1 - base + V - 1) / V);
    for (int v = lane; v < vectors; v += 32) {
      const int64_t e = base + int64_t(v) * V;
      if (e >= s0 && e + V <= s1) {
        const uint32_t at = uint32_t(__cvta_generic_to_shared(to + int64_t(v) * V));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(at), "l"(src + e) : "memory");
      }
    }
    return lead;
#else
    return 0;
#endif
  }

  // The ragged first and last vectors of ranges 0..n-1 (range(q) gives each), element by element.
  // The warp's lanes share the elements of all the ranges, and each lane issues a batch of loads
  // before it stores any, so that the loads' latencies overlap rather than add up range by range.
  template <class RangeOf>
  CUTLASS_DEVICE static void stage_ends(ElementX const* src, int n, RangeOf range, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int V = 16 / sizeof(ElementX);
    constexpr int kBatch = 8;  // loads in flight per lane
    const int slots = n * 2 * V;  // a range's slots: its first vector's V elements, then its last's
    for (int t0 = lane; t0 < slots; t0 += 32 * kBatch) {
      ElementX got[kBatch];
      ElementX* at[kBatch];
      CUTLASS_PRAGMA_UNROLL
      for (int b = 0; b < kBatch; ++b) {
        const int t = t0 + 32 * b;
        at[b] = nullptr;
        if (t >= slots) continue;
        const Range r = range(t / (2 * V));
        const int64_t first = r.s0 - lead_of(src + r.s0);
        const int64_t last = r.s1 > first ? first + (r.s1 - first - 1) / V * V : first;
        const bool is_last = (t / V) % 2;
        const int64_t v = is_last ? last : first;  // the vector's first element
        const int64_t e = v + t % V;
        const bool whole = v >= r.s0 && v + V <= r.s1;  // copied by stage
        if (!whole && !(is_last && last == first) && e >= r.s0 && e < r.s1) {
          got[b] = src[e];
          at[b] = r.to + (e - first);
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int b = 0; b < kBatch; ++b)
        if (at[b] != nullptr) *at[b] = got[b];
    }
#endif
  }
};

}  // namespace cutsearch_mainloop
