// Rendered into the translation unit of each kernel with the staged, direct or fixup epilogue
// (templates/launcher.cu).
#pragma once
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"

#include "activation.cuh"

// Staged epilogue: y stored through shared memory, for output rows of any pitch.
// TMA cannot store rows whose pitch is not a 16-byte multiple, and CUTLASS's nosmem epilogue
// stores them from the accumulators' own layout: a warp's store then touches eight rows, 2
// bytes each, and the load/store unit handles one cache line a cycle. Here each warp stages
// its 16 rows of the accumulator, 32 columns at a time (16 where the tile's width is not a
// multiple of 32), in shared memory of its own (so it needs no barrier), and writes them back
// row by row: 32 (or 16) consecutive elements a store.
// D = act(alpha * acc + beta * C); C is the bias with a zero stride across y's rows, in y's
// layout (column-major where A and B swap) whatever D's, y's or y^T's.
namespace cutsearch_staged {

// The types of the CUTLASS DefaultEpilogue that an epilogue here replaces: kept, so that the
// launcher binds either the same way.
template <class Base>
struct BaseTypes {
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
};

// An epilogue with no workspace of its own: its parameters are its arguments.
template <class Base>
struct NoWorkspace : BaseTypes<Base> {
  using Arguments = typename Base::Arguments;
  using Params = Arguments;

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
};

// Base: the CUTLASS DefaultEpilogue this replaces. Act: cutsearch_act's activation ids. Warps: the
// consumer warps of one CTA that run the epilogue at the same time.
template <class Base, int Act, int Warps>
class StagedEpilogue : public NoWorkspace<Base> {
 public:
  using Common = NoWorkspace<Base>;
  using typename Common::ElementD;
  using typename Common::StrideD;
  using typename Common::StrideC;
  using typename Common::GmemElementC;
  using typename Common::ThreadEpilogueOp;
  using typename Common::Arguments;
  using typename Common::Params;

  static constexpr int kRows = 16;          // a warp's rows of an SM90 GMMA accumulator
  static constexpr int kCols = 32;          // columns staged at a time
  static constexpr int kPitch = kCols + 8;  // float2 writes and row reads free of bank conflicts

  struct SharedStorage {
    cute::array_aligned<float, Warps * kRows * kPitch> stage;
  };
  using TensorStorage = SharedStorage;

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
    // Chunks of equal width that cover every column: a 208-wide tile (26 groups) goes by 2s.
    constexpr int GroupsPerChunk = Groups % 4 == 0 ? 4 : Groups % 2 == 0 ? 2 : 1;
    static_assert(GroupsPerChunk * 8 <= kCols && Groups % GroupsPerChunk == 0, "chunks that cover the tile's columns");
    constexpr int Width = GroupsPerChunk * 8;
    constexpr bool RowMajor = is_constant<1, decltype(get<1>(StrideD{}))>::value;
    // Where C's layout is not D's (y^T), the bias varies along a lane's stores: the lane adds it
    // as it stages its accumulators, which follow the tile's rows and columns.
    constexpr bool StagedBias = is_constant<1, decltype(get<1>(StrideC{}))>::value != RowMajor;

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
          // This lane's elements of the chunk, in store order: row-major y, a store writes Width
          // consecutive elements of each row it touches; column-major (y^T, or y of a swapped
          // kernel), 16 consecutive elements of two columns.
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
          // The staged bias of the lane's elements (row half h, group g, column j of the pair),
          // all loaded before the chunk's stores.
          float staged[2][GroupsPerChunk][2] = {};
          if constexpr (StagedBias) {
            CUTLASS_PRAGMA_UNROLL
            for (int h = 0; h < 2; ++h) {
              CUTLASS_PRAGMA_UNROLL
              for (int g = 0; g < GroupsPerChunk; ++g) {
                CUTLASS_PRAGMA_UNROLL
                for (int j = 0; j < 2; ++j) {
                  const int r = band + lane / 4 + 8 * h, cc = cols + 8 * g + 2 * (lane % 4) + j;
                  staged[h][g][j] = source && r < res_m && cc < res_n
                                        ? beta * float(c[(m0 + r) * get<0>(params.dC) + (n0 + cc) * get<1>(params.dC)])
                                        : 0.f;
                }
              }
            }
          }
          __syncwarp();  // the previous chunk is read
          CUTLASS_PRAGMA_UNROLL
          for (int g = 0; g < GroupsPerChunk; ++g) {
            CUTLASS_PRAGMA_UNROLL
            for (int h = 0; h < 2; ++h) {
              const int i = chunk * GroupsPerChunk + g;
              float2 v = make_float2(float(accumulators(make_coord(make_coord(0, h, i), mm, nn))),
                                     float(accumulators(make_coord(make_coord(1, h, i), mm, nn))));
              if constexpr (StagedBias) v = make_float2(alpha * v.x + staged[h][g][0], alpha * v.y + staged[h][g][1]);
              *reinterpret_cast<float2*>(mine + h * 8 * kPitch + 8 * g) = v;
            }
          }
          __syncwarp();
          CUTLASS_PRAGMA_UNROLL
          for (int s = 0; s < Stores; ++s) {
            if (inside(s)) {
              const int64_t gm = m0 + band + row(s), gn = n0 + cols + col(s);
              const float cv = StagedBias || !source ? 0.f : broadcast ? bias : float(c_at(s));
              const float v = StagedBias ? stage[row(s) * kPitch + col(s)]
                                         : alpha * stage[row(s) * kPitch + col(s)] + beta * cv;
              d[gm * get<0>(params.dD) + gn * get<1>(params.dD)] = ElementD(cutsearch_act::activate<Act>(v));
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

// Direct epilogue: y stored from the accumulators' registers, as CUTLASS's nosmem epilogue does,
// so rows of any pitch, with the activation fused. CUTLASS's loads C for each element through a
// volatile load that the element's store waits behind, and its stores wait behind it in turn: on
// the unaligned layer that chain, not memory, was the epilogue's cost
// (studies/recorded/h200-2026-11-30-epilogue-profile/). Here C must be the bias: a vector along
// C's unit-stride mode, the tile's columns or (A and B swapped) its rows, with a zero stride
// across the other, whichever layout D has (y or y^T). It is read through the read-only path:
// where it follows the rows a thread loads its few rows' values before any store, where it
// follows the columns one value a column. Addresses and bounds are computed once a row and once
// a column.
namespace cutsearch_direct {

// A 16- or 32-bit value through the non-coherent read-only path, which stores may pass.
template <class T>
CUTLASS_DEVICE float load_nc(T const* p) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "a 16- or 32-bit element");
  T v;
  if constexpr (sizeof(T) == 2) {
    const unsigned short bits = __ldg(reinterpret_cast<unsigned short const*>(p));
    memcpy(&v, &bits, 2);
  } else {
    const unsigned bits = __ldg(reinterpret_cast<unsigned const*>(p));
    memcpy(&v, &bits, 4);
  }
  return float(v);
}

// Base: the CUTLASS DefaultEpilogue this replaces. Act: cutsearch_act's activation ids.
template <class Base, int Act>
class DirectEpilogue : public cutsearch_staged::NoWorkspace<Base> {
 public:
  using Common = cutsearch_staged::NoWorkspace<Base>;
  using typename Common::ElementD;
  using typename Common::StrideD;
  using typename Common::StrideC;
  using typename Common::GmemElementC;
  using typename Common::ThreadEpilogueOp;
  using typename Common::Arguments;
  using typename Common::Params;
  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  static constexpr bool RowMajor = cute::is_constant<1, decltype(cute::get<1>(StrideD{}))>::value;
  static_assert(RowMajor || cute::is_constant<1, decltype(cute::get<0>(StrideD{}))>::value, "D with a unit stride");
  // Whether the bias follows the tile's columns (C row-major) or its rows.
  static constexpr bool BiasCols = cute::is_constant<1, decltype(cute::get<1>(StrideC{}))>::value;
  static_assert(BiasCols || cute::is_constant<1, decltype(cute::get<0>(StrideC{}))>::value, "C with a unit stride");

  // C, where there is one, must be the bias: constant across C's strided mode.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr_C == nullptr || int64_t(BiasCols ? cute::get<0>(args.dC) : cute::get<1>(args.dC)) == 0;
  }

  CUTLASS_HOST_DEVICE explicit DirectEpilogue(Params const& params_) : params(params_) {}

  CUTLASS_DEVICE bool is_source_needed() { return ThreadEpilogueOp(params.thread).is_source_needed(); }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL, BlockShapeMNK blk_shape_MNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma tiled_mma,
                                 ResidueMNK residue_mnk, int thread_idx, char*) {
    using namespace cute;
    // An SM90 GMMA accumulator: ((column pair, row half, 8-column group), MMA_M, MMA_N). A
    // thread's rows follow (row half, MMA_M) alone and its columns the other three.
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2, "an SM90 GMMA accumulator");
    constexpr int Groups = size<0, 2>(FrgLayout{});
    constexpr int MmaM = size<1>(FrgLayout{}), MmaN = size<2>(FrgLayout{});

    const int res_m = int(get<0>(residue_mnk)), res_n = int(get<1>(residue_mnk));
    if (res_m <= 0 || res_n <= 0) return;
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const int64_t m0 = int64_t(m_coord) * size<0>(blk_shape_MNK), n0 = int64_t(n_coord) * size<1>(blk_shape_MNK);
    const auto& thread = params.thread;
    const bool source = ThreadEpilogueOp(thread).is_source_needed();
    const float alpha = thread.alpha_ptr ? float(*thread.alpha_ptr) : float(thread.alpha);
    const float beta = source ? (thread.beta_ptr ? float(*thread.beta_ptr) : float(thread.beta)) : 0.f;

    // This thread's first row and column in the tile; every other element of its fragment is a
    // compile-time offset from them, so each store is a register address plus an immediate.
    Tensor cTile = make_identity_tensor(make_shape(size<0>(blk_shape_MNK), size<1>(blk_shape_MNK)));
    Tensor tCc = tiled_mma.get_thread_slice(thread_idx).partition_C(cTile);
    auto row = [&](int h, int mm) { return int(get<0>(tCc(make_coord(make_coord(0, h, 0), mm, 0)))); };
    auto col = [&](int j, int g, int nn) { return int(get<1>(tCc(make_coord(make_coord(j, 0, g), 0, nn)))); };
    const int r0 = row(0, 0), c0 = col(0, 0, 0);
    auto value = [&](int j, int h, int g, int mm, int nn, float b) {
      return ElementD(cutsearch_act::activate<Act>(alpha * float(accumulators(make_coord(make_coord(j, h, g), mm, nn))) + b));
    };
    // D's strided mode: y's row pitch (or a view's), whichever mode of D it is.
    const int64_t ld = RowMajor ? int64_t(get<0>(params.dD)) : int64_t(get<1>(params.dD));
    ElementD* origin = params.ptr_D + int64_t(l_coord) * int64_t(get<2>(params.dD)) +
                       (RowMajor ? (m0 + r0) * ld + (n0 + c0) : (m0 + r0) + (n0 + c0) * ld);
    // An element's offset from this thread's first, dr rows and dc columns on.
    auto at = [&](int dr, int dc) { return RowMajor ? int64_t(dr) * ld + dc : dr + int64_t(dc) * ld; };
    // The bias at this thread's first element, and its stride along C's unit-stride mode.
    const int64_t cu = BiasCols ? int64_t(get<1>(params.dC)) : int64_t(get<0>(params.dC));
    GmemElementC const* c = source ? params.ptr_C + int64_t(l_coord) * int64_t(get<2>(params.dC)) +
                                         (BiasCols ? n0 + c0 : m0 + r0) * cu
                                   : nullptr;

    bool row_in[MmaM][2];
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < MmaM; ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) row_in[mm][h] = row(h, mm) < res_m;
    }
    if constexpr (BiasCols) {
      // The bias follows the columns: one value a column.
      CUTLASS_PRAGMA_UNROLL
      for (int nn = 0; nn < MmaN; ++nn) {
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < Groups; ++g) {
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < 2; ++j) {
            const int dc = col(j, g, nn) - c0;
            const bool col_in = c0 + dc < res_n;
            const float b = source && col_in ? beta * load_nc(c + dc * cu) : 0.f;
            CUTLASS_PRAGMA_UNROLL
            for (int mm = 0; mm < MmaM; ++mm) {
              CUTLASS_PRAGMA_UNROLL
              for (int h = 0; h < 2; ++h) {
                const ElementD v = value(j, h, g, mm, nn, b);
                if (col_in && row_in[mm][h]) origin[at(row(h, mm) - r0, dc)] = v;
              }
            }
          }
        }
      }
    } else {
      // The bias follows the rows: a thread's few values, loaded before any store.
      float bias[MmaM][2];
      CUTLASS_PRAGMA_UNROLL
      for (int mm = 0; mm < MmaM; ++mm) {
        CUTLASS_PRAGMA_UNROLL
        for (int h = 0; h < 2; ++h) {
          bias[mm][h] = source && row_in[mm][h] ? beta * load_nc(c + (row(h, mm) - r0) * cu) : 0.f;
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int nn = 0; nn < MmaN; ++nn) {
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < Groups; ++g) {
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < 2; ++j) {
            const int dc = col(j, g, nn) - c0;
            const bool col_in = c0 + dc < res_n;
            ElementD* column = origin + at(0, dc);
            CUTLASS_PRAGMA_UNROLL
            for (int mm = 0; mm < MmaM; ++mm) {
              CUTLASS_PRAGMA_UNROLL
              for (int h = 0; h < 2; ++h) {
                const ElementD v = value(j, h, g, mm, nn, bias[mm][h]);
                if (col_in && row_in[mm][h]) column[at(row(h, mm) - r0, 0)] = v;
              }
            }
          }
        }
      }
    }
  }

 private:
  Params params;
};

}  // namespace cutsearch_direct

// Split-K reduced in the GEMM's own epilogue: no second kernel, and no workspace reset per call.
// The CTA of each K slice writes its fp32 partial tile to the workspace and counts itself in
// the tile's counter. The last to arrive sums every slice's partial in slice order (the result
// does not depend on which CTA is last), adds the bias, applies the activation and stores y.
// Its atomicInc wraps the counter back to zero, so the counters are zeroed once, when the
// workspace is bound. Nothing waits for another CTA, so no launch order can hang it.
namespace cutsearch_fixup {

// Base: the CUTLASS DefaultEpilogue this replaces. Act: cutsearch_act's activation ids.
// TileM x TileN: the CTA tile, which sizes the workspace on the host.
template <class Base, int Act, int TileM, int TileN>
class FixupEpilogue : public cutsearch_staged::BaseTypes<Base> {
 public:
  using typename cutsearch_staged::BaseTypes<Base>::ElementD;
  using typename cutsearch_staged::BaseTypes<Base>::StrideD;
  using typename cutsearch_staged::BaseTypes<Base>::StrideC;
  using typename cutsearch_staged::BaseTypes<Base>::GmemElementC;
  using typename cutsearch_staged::BaseTypes<Base>::ThreadEpilogueOp;
  using Arguments = typename Base::Arguments;
  struct Params {
    Arguments args;
    unsigned* counters;  // one a tile
    float* parts;        // [tile][slice][TileM * TileN], each in the accumulators' thread order
  };
  struct SharedStorage {
    int last[2];  // a flag for each consumer warpgroup: pingpong runs two tiles at once
  };
  using TensorStorage = SharedStorage;

  template <class ProblemShape>
  static CUTLASS_HOST_DEVICE int64_t tiles(ProblemShape const& problem_shape) {
    auto mnkl = cute::append<4>(problem_shape, 1);
    return int64_t((int(cute::get<0>(mnkl)) + TileM - 1) / TileM) * ((int(cute::get<1>(mnkl)) + TileN - 1) / TileN);
  }
  static CUTLASS_HOST_DEVICE int64_t counter_bytes(int64_t tiles) { return (tiles * 4 + 255) / 256 * 256; }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const& problem_shape, Arguments const&) {
    const int64_t splits = cute::get<3>(cute::append<4>(problem_shape, 1));
    return size_t(counter_bytes(tiles(problem_shape)) + tiles(problem_shape) * splits * TileM * TileN * 4);
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const& problem_shape, Arguments const&, void* workspace,
                                              cudaStream_t stream, cutlass::CudaHostAdapter* = nullptr) {
    const cudaError_t e = cudaMemsetAsync(workspace, 0, size_t(counter_bytes(tiles(problem_shape))), stream);
    return e == cudaSuccess ? cutlass::Status::kSuccess : cutlass::Status::kErrorInternal;
  }
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    char* ws = static_cast<char*>(workspace);
    return {args, reinterpret_cast<unsigned*>(ws), reinterpret_cast<float*>(ws + counter_bytes(tiles(problem_shape)))};
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) { return true; }

  CUTLASS_HOST_DEVICE explicit FixupEpilogue(Params const& params_) : params(params_) {}

  CUTLASS_DEVICE bool is_source_needed() { return ThreadEpilogueOp(params.args.thread).is_source_needed(); }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_MNK,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK residue_mnk, int thread_idx, char* smem_buf) {
    using namespace cute;
    static_assert(decltype(size<0>(BlockShapeMNK{}))::value == TileM &&
                  decltype(size<1>(BlockShapeMNK{}))::value == TileN, "the CTA tile");
    constexpr int Threads = size(TiledMma{});  // the consumer threads that share this tile
    constexpr int Frag = size(FrgLayout{});
    static_assert(Frag % 4 == 0 && Frag * Threads == TileM * TileN, "a whole tile in the accumulators");
    constexpr int Quads = Frag / 4;

    // The scheduler rounds its grid up to whole clusters and swizzles: a tile past the output
    // has no counter or partial of its own, and its index could alias another tile's.
    const int res_m = int(get<0>(residue_mnk)), res_n = int(get<1>(residue_mnk));
    if (res_m <= 0 || res_n <= 0) return;
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const int splits = int(get<3>(problem_shape_mnkl));
    const int tiles_n = (int(get<1>(problem_shape_mnkl)) + TileN - 1) / TileN;
    const int64_t tile = int64_t(m_coord) * tiles_n + int64_t(n_coord);
    // Each thread's fragment as float4s, at stride Threads: every store and load is coalesced.
    auto part = [&](int slice) {
      return reinterpret_cast<float4*>(params.parts) + (tile * splits + slice) * (TileM * TileN / 4) + thread_idx;
    };
    float4* mine = part(int(l_coord));
    CUTLASS_PRAGMA_UNROLL
    for (int q = 0; q < Quads; ++q) {
      __stcg(mine + q * Threads, make_float4(accumulators(4 * q), accumulators(4 * q + 1), accumulators(4 * q + 2),
                                             accumulators(4 * q + 3)));
    }
    __threadfence();  // the partial is visible before the count that announces it
    const int group = Threads == 128 ? cutlass::canonical_warp_group_idx() - 1 : 0;
    int* last = reinterpret_cast<SharedStorage*>(smem_buf)->last + group;
    cutlass::arch::NamedBarrier::arrive_and_wait(Threads, group);
    if (thread_idx == 0) *last = atomicInc(params.counters + tile, unsigned(splits - 1)) == unsigned(splits - 1);
    cutlass::arch::NamedBarrier::arrive_and_wait(Threads, group);
    if (!*last) return;
    __threadfence();  // every other slice's partial is read after its count

    // Every slice's partial from the workspace, this one's too (this thread wrote it): the
    // accumulators are then dead, and the sums take their registers. Kept live beside the sums,
    // they spilled (64x160 and 128x96 pingpong, nvcc 13.0).
    float sum[Frag];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < Frag; ++i) sum[i] = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float4* theirs = part(s);
      CUTLASS_PRAGMA_UNROLL
      for (int q = 0; q < Quads; ++q) {
        const float4 p = __ldcg(theirs + q * Threads);
        sum[4 * q] += p.x; sum[4 * q + 1] += p.y; sum[4 * q + 2] += p.z; sum[4 * q + 3] += p.w;
      }
    }

    // y from the sums, element by element where the tile's coordinates fall inside it (the
    // outputs split-K serves are small). Batch index 0: the slices share one y.
    const int64_t m0 = int64_t(m_coord) * TileM, n0 = int64_t(n_coord) * TileN;
    ThreadEpilogueOp op(params.args.thread);
    const bool source = op.is_source_needed();
    const auto& thread = params.args.thread;
    const float alpha = thread.alpha_ptr ? float(*thread.alpha_ptr) : float(thread.alpha);
    const float beta = thread.beta_ptr ? float(*thread.beta_ptr) : float(thread.beta);
    Tensor cTile = make_identity_tensor(make_shape(Int<TileM>{}, Int<TileN>{}));
    Tensor tCc = tiled_mma.get_thread_slice(thread_idx).partition_C(cTile);
    static_assert(decltype(size(tCc))::value == Frag, "one coordinate an accumulator");
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < Frag; ++i) {
      const int r = int(get<0>(tCc(i))), c = int(get<1>(tCc(i)));
      if (r < res_m && c < res_n) {
        const int64_t gm = m0 + r, gn = n0 + c;
        const float cv = source ? float(params.args.ptr_C[gm * get<0>(params.args.dC) + gn * get<1>(params.args.dC)]) : 0.f;
        params.args.ptr_D[gm * get<0>(params.args.dD) + gn * get<1>(params.args.dD)] =
            ElementD(cutsearch_act::activate<Act>(alpha * sum[i] + beta * cv));
      }
    }
  }

 private:
  Params params;
};

}  // namespace cutsearch_fixup
