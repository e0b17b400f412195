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
// for the drain latency plus the FFMAs every tile. Here P_t and P_{t+1} live in two fragments: the first half of
// tile t+1's wgmmas is issued first, then the warpgroup waits until only that half is in flight
// (warpgroup_wait<1>), scales P_t into the sum while the tensor core works on it, and issues the second half. The
// price is one more accumulator fragment (main + 2 partials), so the warpgroup's share of a tile must stay at
// 64 x 128 or below.
//
// The halves: in a standalone probe of this loop (docs/decisions.md), issuing all four of tile t+1's wgmmas before
// the wait and the fold was slower than two, the fold, then two, by 2-7% (geomean over ten large problems, each of
// four runs). How the loop is written matters as much as its wgmmas, waits and FFMAs: a loop with the same ones ran
// 4-5% behind this one with three differences in its source (docs/decisions.md; which of them costs the time is not
// isolated): its pipeline positions were locals captured by the loop's lambdas, which ptxas keeps in vector
// registers (the stage index's wrap-around and the release barrier's address computed per thread), its first tile
// went out as two commit groups, and its fold was fenced as a whole. Here the pipeline positions are held in one
// object (overlap::Steps, overlap_k_loop.cuh), which ptxas keeps in uniform registers, the first tile is one commit
// group, and the fold is fenced element by element; the loop compiles to the probe's fastest one byte for byte.
// The results are bit-identical either way. The fold is what this kernel loses most to: without it the same loop
// ran 1.5x as fast (docs/blockwise.md, "The fold is the gap").
//
// Only mma() is replaced. The loads (TMA operands, cp.async scales), shared storage, parameters and mma_tail()
// are CUTLASS's (Base), and the contract with the kernel is the same: mma() leaves the last K tile's stage
// unreleased and mma_tail() releases it. Each thread reads a stage's scales from shared memory before it releases
// the stage, so the producer cannot overwrite them under the read. In a cluster that needs every thread's release
// counted, which CUTLASS's pipeline does not (it counts one thread a warpgroup there): these kernels then run on
// StageReadingPipeline (common/stage_reading_pipeline.cuh), and CUTLASS's own blockwise mma(), which keeps
// CUTLASS's pipeline, is not used in a cluster (blockwise_gemm.cuh asserts it).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>

#include "sm90/common/overlap_k_loop.cuh"

namespace fp8ext::sm90 {
namespace blockwise_loop {

// One consumer thread's share of every stage's scales, and the fold acc += P_t * s_t of the file comment: the
// Promotion of overlap::Steps. Collective is CUTLASS's blockwise collective (its shared-memory layouts, tile and
// MMA); make_stage_scales() below builds one.
template <class Collective, class SmemSFA, class SmemSFB, class RegSFA, class RegSFB>
struct StageScales {
  using ElementBlockScale = typename Collective::ElementBlockScale;
  static constexpr int kScaleMsPerTile = Collective::ScaleMsPerTile;
  static constexpr int kScaleNsPerTile = Collective::ScaleNsPerTile;

  SmemSFA tCsSFA;  // (MMA, MMA_M, MMA_N, (MMA_K, PIPE)): each accumulator element's scale_a, in every stage
  SmemSFB tCsSFB;  // the same for scale_b
  RegSFA tCrSFA;   // one stage's, shaped like the accumulator (the K mode sliced away)
  RegSFB tCrSFB;

  // The scale product s_t of the tile folded next (its stage is still unreleased), formed as the collective forms
  // it: the per-tile scalar side is multiplied into the per-element side.
  CUTLASS_DEVICE void load(int stage) {
    using namespace cute;
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
  }

  // Element i of acc += P_t * s_t.
  template <class Part, class Accum>
  CUTLASS_DEVICE void fold_element(Part& part, Accum& accum, int i) {
    using namespace cute;
    if constexpr (kScaleMsPerTile == 1 && kScaleNsPerTile == 1) {
      accum(i) += part(i) * tCrSFA(_0{});
    } else if constexpr (kScaleMsPerTile > 1 && kScaleNsPerTile == 1) {
      accum(i) += part(i) * tCrSFA(i);
    } else if constexpr (kScaleMsPerTile == 1 && kScaleNsPerTile > 1) {
      accum(i) += part(i) * tCrSFB(i);
    } else {
      accum(i) += part(i) * tCrSFA(i) * tCrSFB(i);
    }
  }
};

// The scales as (BLK_M, BLK_N, (BLK_K, PIPE)) views, broadcast (stride 0) along the other operand's mode, so that
// partitioning them like the accumulator gives each thread the scale of each of its elements. These are the
// collective's own views.
template <class Collective>
CUTLASS_DEVICE auto make_stage_scales(typename Collective::TensorStorage& shared_tensors, int thread_idx) {
  using namespace cute;
  using SmemLayoutSFA = typename Collective::SmemLayoutSFA;
  using SmemLayoutSFB = typename Collective::SmemLayoutSFB;
  using TileShape = typename Collective::TileShape;
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
  typename Collective::TiledMma tiled_mma;
  Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);
  Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
  Tensor tCrSFA = make_tensor_like<typename Collective::ElementBlockScale>(tCsSFA(_, _, _, _0{}));
  Tensor tCrSFB = make_tensor_like<typename Collective::ElementBlockScale>(tCsSFB(_, _, _, _0{}));
  return StageScales<Collective, decltype(tCsSFA), decltype(tCsSFB), decltype(tCrSFA), decltype(tCrSFB)>{
      tCsSFA, tCsSFB, tCrSFA, tCrSFB};
}

// make<Collective>() of OverlappedMainloop: the stage scales of CUTLASS's blockwise collective.
struct BlockScales {
  static constexpr bool kReadsStage = true;  // the scales, with ordinary shared-memory loads (OverlappedMainloop)
  template <class Collective>
  CUTLASS_DEVICE static auto make(typename Collective::TensorStorage& shared_tensors, int thread_idx) {
    static_assert(Collective::ScalePromotionInterval == 4 &&
                      cute::size<2>(typename Collective::TileShape{}) ==
                          4 * cute::size<2>(typename Collective::TiledMma::AtomShape_MNK{}),
                  "the overlapped mainloop scales once per K tile: one scale group per 128-deep tile");
    return make_stage_scales<Collective>(shared_tensors, thread_idx);
  }
};

}  // namespace blockwise_loop

// Only mma() is replaced (overlap::OverlappedMainloop): half of tile t+1's wgmmas, the wait, tile t's fold, the
// other half (the halves above).
template <class Base>
using OverlapBlockwiseMainloop =
    overlap::OverlappedMainloop<Base, overlap::HalfTiles, blockwise_loop::BlockScales>;

}  // namespace fp8ext::sm90
