// Precise FP8 accumulation with the fp32 promotion taken off the tensor core's critical path.
//
// The maths, per output element held by a consumer warpgroup (t runs over the K tiles of 128):
//
//     P_t = sum over the 128 k of tile t of a[m,k] * b[k,n]   (wgmma, the tensor core's reduced-precision adder)
//     acc = sum over t of P_t                                  (fp32 FADD in registers, one per tile: "promotion")
//
// This is the same sum, with the same promotion interval (once per 128 of K), as CUTLASS's precise FP8
// mainloop (GmmaFP8Accumulation with mma_promotion_interval = 4), so the accuracy bound of docs/accuracy.md is
// unchanged. What changes is when the FADDs run. CUTLASS keeps P_t in one register fragment: before it may
// issue tile t+1's wgmmas into that fragment it waits for all of tile t's (warpgroup_wait<0>) and adds, so the
// warpgroup's tensor core work stops for the wgmma drain latency plus the adds, every tile. Here P_t and
// P_{t+1} live in two fragments: tile t+1's wgmmas are issued into the other fragment first, then the warpgroup
// waits until only that batch is in flight (warpgroup_wait<1>) and adds P_t while the tensor core works on
// t+1. The price is one more accumulator fragment of registers (main + 2 partials), so the warpgroup's share
// of a tile must stay at 64 x 128 or below (3 x 64 fp32 registers per thread).
//
// Only mma() is replaced. Loads, shared storage, parameters and mma_tail() are CUTLASS's precise FP8 collective
// (Base), and the contract with the kernel is the same: mma() leaves the last K tile's shared-memory stage
// unreleased and mma_tail() releases it.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>

#include "sm90/common/overlap_k_loop.cuh"

namespace fp8ext::sm90 {

namespace overlap {
// The row-wise Promotion of Steps (overlap_k_loop.cuh): acc += P_t, with nothing to read from the stage.
struct AddPartial {
  static constexpr bool kReadsStage = false;
  template <class Collective, class TensorStorage>
  CUTLASS_DEVICE static AddPartial make(TensorStorage&, int /*thread_idx*/) {
    return {};
  }
  CUTLASS_DEVICE void load(int /*stage*/) {}
  template <class Part, class Accum>
  CUTLASS_DEVICE void fold_element(Part& part, Accum& accum, int i) {
    accum(i) += part(i);
  }
};
}  // namespace overlap

// Only mma() is replaced (overlap::OverlappedMainloop): tile t+1's wgmmas, the wait, tile t's adds.
template <class Base>
using OverlapPromotionMainloop = overlap::OverlappedMainloop<Base, overlap::WholeTiles, overlap::AddPartial>;

}  // namespace fp8ext::sm90
