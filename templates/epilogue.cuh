// Rendered into the translation unit of each kernel with the staged epilogue (templates/launcher.cu).
#pragma once
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

#include "reduce.cuh"  // its activations

// Staged epilogue: y stored through shared memory, for output rows of any pitch.
// TMA cannot store rows whose pitch is not a 16-byte multiple, and CUTLASS's nosmem epilogue
// stores them from the accumulators' own layout: a warp's store then touches eight rows, 2
// bytes each, and the load/store unit handles one cache line a cycle. Here each warp stages
// its 16 rows of the accumulator, 32 columns at a time, in shared memory of its own (so it
// needs no barrier), and writes them back row by row: 32 consecutive elements a store.
// D = act(alpha * acc + beta * C); C is the bias with a zero stride across y's rows.
namespace cutsearch_staged {

// Base: the CUTLASS DefaultEpilogue this replaces (its types and arguments are kept, so that
// the launcher binds either the same way). Act: cutsearch_reduce's activation ids. Warps: the
// consumer warps of one CTA that run the epilogue at the same time.
template <class Base, int Act, int Warps>
class StagedEpilogue {
 public:
  using EpilogueSchedule = typename Base::EpilogueSchedule;
  using DispatchPolicy = EpilogueSchedule;
  using ThreadEpilogueOp = typename Base::ThreadEpilogueOp;
  using ElementOutput = typename Base::ElementOutput;
  using ElementAccumulator = typename Base::ElementAccumulator;
  using ElementCompute = typename Base::ElementCompute;
  using ElementScalar = ElementCompute;
  using ElementC = typename Base::ElementC;
  using StrideC = typename Base::StrideC;
  using ElementD = typename Base::ElementD;
  using StrideD = typename Base::StrideD;
  using GmemElementC = cute::conditional_t<cute::is_void_v<ElementC>, ElementD, ElementC>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  using Arguments = typename Base::Arguments;
  using Params = Arguments;

  static constexpr int kRows = 16;          // a warp's rows of an SM90 GMMA accumulator
  static constexpr int kCols = 32;          // columns staged at a time
  static constexpr int kPitch = kCols + 8;  // float2 writes and row reads free of bank conflicts

  struct SharedStorage {
    cute::array_aligned<float, Warps * kRows * kPitch> stage;
  };
  using TensorStorage = SharedStorage;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) { return true; }

  CUTLASS_HOST_DEVICE explicit StagedEpilogue(Params const& params_) : params(params_) {}

  CUTLASS_DEVICE bool is_source_needed() { return ThreadEpilogueOp(params.thread).is_source_needed(); }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL, BlockShapeMNK blk_shape_MNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma tiled_mma,
                                 ResidueMNK residue_mnk, int thread_idx, char* smem_buf) {
    using namespace cute;
    // An SM90 GMMA accumulator: ((column pair, row half, 8-column group), MMA_M, MMA_N).
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2, "an SM90 GMMA accumulator");
    constexpr int Groups = size<0, 2>(FrgLayout{});
    constexpr int GroupsPerChunk = Groups < kCols / 8 ? Groups : kCols / 8;
    constexpr int Width = GroupsPerChunk * 8;
    constexpr bool RowMajor = is_constant<1, decltype(get<1>(StrideD{}))>::value;

    const int res_m = int(get<0>(residue_mnk)), res_n = int(get<1>(residue_mnk));
    if (res_m <= 0 || res_n <= 0) return;
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const int64_t m0 = int64_t(m_coord) * size<0>(blk_shape_MNK);
    const int64_t n0 = int64_t(n_coord) * size<1>(blk_shape_MNK);
    ElementD* d = params.ptr_D + int64_t(l_coord) * get<2>(params.dD);
    GmemElementC const* c = params.ptr_C;

    ThreadEpilogueOp op(params.thread);
    const bool source = op.is_source_needed();
    const float alpha = params.thread.alpha_ptr ? float(*params.thread.alpha_ptr) : float(params.thread.alpha);
    const float beta = params.thread.beta_ptr ? float(*params.thread.beta_ptr) : float(params.thread.beta);
    // Whether C is constant along the 16 rows or 32 columns a lane stores (see below).
    const bool broadcast = RowMajor ? get<0>(params.dC) == 0 : get<1>(params.dC) == 0;

    // The warp's first accumulator coordinates in the CTA tile; the rest follow the GMMA layout
    // (lane l holds rows l/4 and l/4 + 8 of its warp's 16, columns 2(l%4) + {0,1} of each 8).
    Tensor cTile = make_identity_tensor(make_shape(size<0>(blk_shape_MNK), size<1>(blk_shape_MNK)));
    Tensor tCc = tiled_mma.get_thread_slice(thread_idx).partition_C(cTile);
    const int lane = thread_idx % 32;
    float* stage = reinterpret_cast<SharedStorage*>(smem_buf)->stage.data() + (thread_idx / 32 % Warps) * kRows * kPitch;
    float* mine = stage + (lane / 4) * kPitch + 2 * (lane % 4);
    constexpr int Stores = kRows * Width / 32;

    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < size<1>(FrgLayout{}); ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int nn = 0; nn < size<2>(FrgLayout{}); ++nn) {
        CUTLASS_PRAGMA_UNROLL
        for (int chunk = 0; chunk < Groups / GroupsPerChunk; ++chunk) {
          auto first = tCc(make_coord(make_coord(0, 0, chunk * GroupsPerChunk), mm, nn));
          const int band = int(get<0>(first)) / kRows * kRows;
          const int cols = int(get<1>(first)) / Width * Width;
          // This lane's elements of the chunk, in store order: row-major y, a store writes 32
          // consecutive elements of a row; column-major (y^T, or y of a swapped kernel), 16
          // consecutive elements of two columns.
          auto row = [&](int s) { const int e = lane + 32 * s; return RowMajor ? e / Width : e % kRows; };
          auto col = [&](int s) { const int e = lane + 32 * s; return RowMajor ? e % Width : e / kRows; };
          auto inside = [&](int s) { return band + row(s) < res_m && cols + col(s) < res_n; };
          // The bias (C with a zero stride across y's rows) is the same for each of this lane's
          // elements: one load, before the stores (a store to y could alias C for all the
          // compiler knows). Any other C is loaded element by element.
          auto c_at = [&](int s) {
            return c[(m0 + band + row(s)) * get<0>(params.dC) + (n0 + cols + col(s)) * get<1>(params.dC)];
          };
          const float bias = source && broadcast && inside(0) ? float(c_at(0)) : 0.f;
          __syncwarp();  // the previous chunk is read
          CUTLASS_PRAGMA_UNROLL
          for (int g = 0; g < GroupsPerChunk; ++g) {
            CUTLASS_PRAGMA_UNROLL
            for (int h = 0; h < 2; ++h) {
              const int i = chunk * GroupsPerChunk + g;
              *reinterpret_cast<float2*>(mine + h * 8 * kPitch + 8 * g) =
                  make_float2(float(accumulators(make_coord(make_coord(0, h, i), mm, nn))),
                              float(accumulators(make_coord(make_coord(1, h, i), mm, nn))));
            }
          }
          __syncwarp();
          CUTLASS_PRAGMA_UNROLL
          for (int s = 0; s < Stores; ++s) {
            if (inside(s)) {
              const int64_t gm = m0 + band + row(s), gn = n0 + cols + col(s);
              const float cv = !source ? 0.f : broadcast ? bias : float(c_at(s));
              const float v = alpha * stage[row(s) * kPitch + col(s)] + beta * cv;
              d[gm * get<0>(params.dD) + gn * get<1>(params.dD)] = ElementD(cutsearch_reduce::activate<Act>(v));
            }
          }
        }
      }
    }
  }

 private:
  Params params;
};

}  // namespace cutsearch_staged
