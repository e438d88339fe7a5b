// Rendered into the translation unit of each kernel that can read x through row views
// (templates/launcher.cu, cutsearch.space.RowViews).
#pragma once
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

// Shifted W: CUTLASS's SM90 TMA mainloop, with W read at a column offset that moves with the
// batch. x's row view l arrives shifted right by l * q elements, so it needs W shifted right by
// as much: TMA reads W at column k - l * q, and fills the columns left of 0 and right of W's
// with zeros. One copy of W serves every view, where a copy per view cost P times W's bytes.
namespace cutsearch_views {

template <class Base, bool WIsA>
struct ShiftedW : Base {
  using typename Base::ElementA;
  using typename Base::ElementB;
  using typename Base::StrideA;
  using typename Base::StrideB;

  struct Arguments {
    ElementA const* ptr_A;
    StrideA dA;
    ElementB const* ptr_B;
    StrideB dB;
    uint32_t mma_promotion_interval = 4;
    int view_shift = 0;  // q: W's column offset per batch index (0: every batch reads W alike)
  };

  struct Params : Base::Params {
    int view_shift = 0;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    Params params;
    static_cast<typename Base::Params&>(params) = Base::to_underlying_arguments(
        problem_shape, typename Base::Arguments{args.ptr_A, args.dA, args.ptr_B, args.dB, args.mma_promotion_interval},
        workspace);
    params.view_shift = args.view_shift;
    return params;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    return Base::can_implement(problem_shape,
                               typename Base::Arguments{args.ptr_A, args.dA, args.ptr_B, args.dB,
                                                        args.mma_promotion_interval});
  }

  // As the base's, but W's batch mode steps its TMA coordinate along K by -q instead of
  // along the batch: every view reads W's one copy, l * q columns to the left.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    using namespace cute;
    using X = Underscore;
    auto [M, N, K, L] = problem_shape_MNKL;
    Tensor mA_mkl = params.tma_load_a.get_tma_tensor(make_shape(M, K, L));  // (m,k,l)
    Tensor mB_nkl = params.tma_load_b.get_tma_tensor(make_shape(N, K, L));  // (n,k,l)
    auto shifted = [&](auto const& t) {
      auto s = t.layout().stride();
      return make_tensor(t.data(), make_layout(t.layout().shape(),
                                               make_stride(get<0>(s), get<1>(s), get<1>(s) * (-params.view_shift))));
    };
    if constexpr (WIsA) {
      auto gA_mkl = local_tile(shifted(mA_mkl), typename Base::TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});
      auto gB_nkl = local_tile(mB_nkl, typename Base::TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});
      return make_tuple(gA_mkl, gB_nkl);
    } else {
      auto gA_mkl = local_tile(mA_mkl, typename Base::TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{});
      auto gB_nkl = local_tile(shifted(mB_nkl), typename Base::TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{});
      return make_tuple(gA_mkl, gB_nkl);
    }
  }
};

}  // namespace cutsearch_views
