// The block-scaled mainloop with the per-group scaling taken off the tensor core's critical path.
//
// The maths, per output element held by a consumer warpgroup (t runs over the K tiles of 128, one scale group
// each):
//
//     P_t = sum over the 128 k of tile t of A[r,k] * B[c,k]     (wgmma, the tensor core's reduced-precision adder)
//     s_t = sfa(r, t) * sfb(c, t)                                (fp32 FMUL, the scale product)
//     acc = sum over t of P_t * s_t                              (fp32 FFMA in registers, once per tile)
//
// This is exactly CUTLASS's blockwise collective (sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp)
// with its promotion interval of one K tile: the same scale product, formed the same way, and the same fused
// multiply-add into the same fp32 sum in the same order, so the results are bit-identical to it and the accuracy
// bound of docs/accuracy.md is unchanged. What changes is when the FFMAs run, as in overlap_promotion_mainloop.cuh
// for the row-wise family: CUTLASS keeps P_t in one fragment and must wait for all of tile t's wgmmas
// (warpgroup_wait<0>) and scale them before it may issue tile t+1's, so the warpgroup's tensor core work stops
// for the drain latency plus the FFMAs every tile. Here P_t and P_{t+1} live in two fragments: tile t+1's wgmmas
// are issued first, then the warpgroup waits until only that batch is in flight (warpgroup_wait<1>) and scales
// P_t into the sum while the tensor core works on t+1. The price is one more accumulator fragment (main + 2
// partials), so the warpgroup's share of a tile must stay at 64 x 128 or below.
//
// Only mma() is replaced. The loads (TMA operands, cp.async scales), shared storage, parameters and mma_tail()
// are CUTLASS's (Base), and the contract with the kernel is the same: mma() leaves the last K tile's stage
// unreleased and mma_tail() releases it. A stage's scales are read from shared memory before the stage is
// released, so the producer cannot overwrite them under the read.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>

#include "sm90/overlap_k_loop.cuh"

namespace fp8ext::sm90 {

template <class Base>
struct OverlapBlockwiseMainloop : Base {
  using typename Base::ElementBlockScale;
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutSFA;
  using typename Base::SmemLayoutSFB;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::TileShape;
  static constexpr int kScaleMsPerTile = Base::ScaleMsPerTile;
  static constexpr int kScaleNsPerTile = Base::ScaleNsPerTile;
  static_assert(Base::ScalePromotionInterval == 4 &&
                    cute::size<2>(TileShape{}) == 4 * cute::size<2>(typename TiledMma::AtomShape_MNK{}),
                "the overlapped mainloop scales once per K tile: one scale group per 128-deep tile");

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "the accumulator must be in registers");
    static_assert(size(FrgTensorC{}) <= 64, "a warpgroup's share of a tile must stay at 64 x 128 or below");

    // The scales as (BLK_M, BLK_N, (BLK_K, PIPE)) views, broadcast (stride 0) along the other operand's mode,
    // so that partitioning them like the accumulator gives each thread the scale of each of its elements. These
    // are the collective's own views.
    Tensor sSFA = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFA.data()),
        make_layout(make_shape(get<0>(shape(SmemLayoutSFA{})), get<1>(TileShape{}),
                               make_shape(get<1>(shape(SmemLayoutSFA{})), get<2>(shape(SmemLayoutSFA{})))),
                    make_stride(get<0>(stride(SmemLayoutSFA{})), _0{},
                                make_stride(get<1>(stride(SmemLayoutSFA{})), get<2>(stride(SmemLayoutSFA{}))))));
    Tensor sSFB = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFB.data()),
        make_layout(make_shape(get<0>(TileShape{}), get<0>(shape(SmemLayoutSFB{})),
                               make_shape(get<1>(shape(SmemLayoutSFB{})), get<2>(shape(SmemLayoutSFB{})))),
                    make_stride(_0{}, get<0>(stride(SmemLayoutSFB{})),
                                make_stride(get<1>(stride(SmemLayoutSFB{})), get<2>(stride(SmemLayoutSFB{}))))));

    TiledMma tiled_mma;
    Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);  // (MMA, MMA_M, MMA_N, (MMA_K, PIPE))
    Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
    // One stage's scales in registers, shaped like the accumulator (the K mode is sliced away).
    Tensor tCrSFA = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor tCrSFB = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));

    // The scale product s_t of the tile promoted next (its stage is still unreleased), formed as the collective
    // forms it: the per-tile scalar side is multiplied into the per-element side.
    auto load_scales = [&](int stage) {
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), tCrSFA);
      copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), tCrSFB);
      if constexpr (kScaleMsPerTile == 1 && kScaleNsPerTile == 1) {
        tCrSFA(_0{}) = tCrSFA(_0{}) * tCrSFB(_0{});
      } else if constexpr (kScaleMsPerTile > 1 && kScaleNsPerTile == 1) {
        const ElementBlockScale scale_b = tCrSFB(_0{});
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(filter_zeros(tCrSFA)); ++i) {
          filter_zeros(tCrSFA)(i) = filter_zeros(tCrSFA)(i) * scale_b;
        }
      } else if constexpr (kScaleMsPerTile == 1 && kScaleNsPerTile > 1) {
        const ElementBlockScale scale_a = tCrSFA(_0{});
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(filter_zeros(tCrSFB)); ++i) {
          filter_zeros(tCrSFB)(i) = filter_zeros(tCrSFB)(i) * scale_a;
        }
      }
    };
    // acc += P_t * s_t for a finished partial (the caller has waited for its wgmmas). The fences pin the FFMAs
    // between that wait and the next issue (overlap_promotion_mainloop.cuh explains the C7514 serialization
    // that follows otherwise).
    auto promote = [&](auto& part) {
      warpgroup_fence_operand(part);
      if constexpr (kScaleMsPerTile == 1 && kScaleNsPerTile == 1) {
        const ElementBlockScale scale_ab = tCrSFA(_0{});
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) accum(i) += part(i) * scale_ab;
      } else if constexpr (kScaleMsPerTile > 1 && kScaleNsPerTile == 1) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) accum(i) += part(i) * tCrSFA(i);
      } else if constexpr (kScaleMsPerTile == 1 && kScaleNsPerTile > 1) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) accum(i) += part(i) * tCrSFB(i);
      } else {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) accum(i) += part(i) * tCrSFA(i) * tCrSFB(i);
      }
      warpgroup_fence_operand(accum);
    };
    // The scales are read while the tensor core still works; only the FFMAs wait (overlap_k_loop.cuh).
    overlap::run_overlapped_mma<TiledMma, SmemLayoutA, SmemLayoutB>(pipeline, smem_pipe_read, accum, k_tile_count,
                                                                    thread_idx, shared_tensors, load_scales, promote);
  }
};

}  // namespace fp8ext::sm90
