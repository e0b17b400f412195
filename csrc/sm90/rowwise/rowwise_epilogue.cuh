// The row-wise scaling epilogue, as a CUTLASS 3.x epilogue visitor tree (EVT).
//
// In the MMA's frame (rows r, columns c of the tile-level output D, fp32 accumulator acc):
//
//     D[r, c] = round_to_out( fma( s_row[r] * s_col[c], acc[r, c], bias ) )          all in fp32
//
//   not swapped (D = out):    s_row = scale_a (per token),  s_col = scale_b (per weight row), bias = bias[c]
//   swap_ab     (D = out^T):  s_row = scale_b,              s_col = scale_a,                 bias = bias[r]
//
// which is out[i, j] = (scale_a[i] * scale_b[j]) * acc[i, j] + bias[j] in the user's frame either way. The two
// scales are multiplied first: the product is the same float in both frames (so a swapped and an unswapped
// kernel round identically), and no intermediate overflows unless the scale product itself does (scaling acc
// by one huge scale first turned in-range results into inf; seen on the H200 with scale_a = 3e38).
// Each scale is either a vector (row-wise) or a single value (tensor-wise): the broadcast nodes take a runtime
// bool stride, so mixed row-wise x tensor-wise needs no extra kernel and no expanded copy of the scalar.
// A null bias pointer reads as 0 (the nodes' null_default), so one kernel serves with and without bias.
// The scales are read straight from the caller's tensors; nothing is padded or copied.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>
#include <cutlass/functional.h>

#include "sm90/common/cutlass_common.cuh"

namespace fp8ext::sm90 {

template <class TileShape, class ElementOut, bool SwapAB>
struct RowwiseEpilogue {
  using ElementBias = ElementOut;  // bias has the output dtype (checked by the entry), so it is read in place
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // One value per row of D, or one value for all rows (dCol = {false, ...}).
  using RowScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float,
                                                                cute::Stride<bool, cute::_0, cute::_0>>;
  // One value per column of D, or one value for all columns (dRow = {..., false, ...}).
  using ColScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float,
                                                                cute::Stride<cute::_0, bool, cute::_0>>;
  using Bias = BiasBroadcast<TileShape, ElementBias, SwapAB>;  // bias[j], along the user's N

  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using Scale = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, RowScale, ColScale>;
  // homogeneous_multiply_add(x, y, z) = x * y + z
  using EVT = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementOut, float, kRound>,
      Scale, Acc, Bias>;

  // The visitor tree's arguments, built from the user's-frame pointers.
  static typename EVT::Arguments arguments(const float* scale_a, bool scale_a_per_row, const float* scale_b,
                                           bool scale_b_per_col, const void* bias) {
    const float* row_ptr = SwapAB ? scale_b : scale_a;
    const bool row_is_vector = SwapAB ? scale_b_per_col : scale_a_per_row;
    const float* col_ptr = SwapAB ? scale_a : scale_b;
    const bool col_is_vector = SwapAB ? scale_a_per_row : scale_b_per_col;
    return typename EVT::Arguments{
        {{row_ptr, 0.0f, {row_is_vector, {}, {}}},                // Scale = RowScale * ColScale
         {col_ptr, 0.0f, {{}, col_is_vector, {}}},
         {}},
        {},                                                           // Acc
        {static_cast<const ElementBias*>(bias), ElementBias(0), {}},  // Bias (null -> 0)
        {}};                                                          // the multiply-add itself
  }
};

}  // namespace fp8ext::sm90
