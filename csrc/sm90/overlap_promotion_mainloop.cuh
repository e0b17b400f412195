// Precise FP8 accumulation with the fp32 promotion taken off the tensor core's critical path.
//
// The maths, per output element held by a consumer warpgroup (j runs over the partials: runs of T consecutive
// K tiles of 128, T = kTilesPerPartial = 1 or 2; the last run may be shorter):
//
//     P_j = sum over the 128 T k of partial j of a[m,k] * b[k,n]  (wgmma, the tensor core's reduced-precision adder)
//     acc = sum over j of P_j                                      (fp32 FADD in registers: "promotion")
//
// This is the same sum, in the same order and with the same promotion interval (every 128 T of K), as CUTLASS's
// precise FP8 mainloop with mma_promotion_interval = 4 T (GmmaFP8Accumulation), so the accuracy bound of
// DESIGN.md is unchanged and the results are bitwise CUTLASS's (a GPU test checks it). What changes is when the
// FADDs run. CUTLASS keeps P_j in one register fragment: before it may issue the next partial's wgmmas into that
// fragment it waits for all of P_j's (warpgroup_wait<0>) and adds, so the warpgroup's tensor core work stops for
// the wgmma drain latency plus the adds, once per partial. Here P_j and P_{j+1} live in two fragments: the first
// tile of P_{j+1} is issued into the other fragment, the warpgroup waits until only that tile may be in flight
// (warpgroup_wait<1>) and adds P_j while the tensor core works. The price is one more accumulator fragment of
// registers (main + 2 partials), so the warpgroup's share of a tile must stay at 64 x 128 or below (3 x 64 fp32
// registers per thread).
//
// Only mma() is replaced. Loads, shared storage, parameters and mma_tail() are CUTLASS's precise FP8 collective
// (Base), and the contract with the kernel is the same: mma() leaves the last K tile's shared-memory stage
// unreleased and mma_tail() releases it.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>

namespace fp8ext::sm90 {

template <class Base, int kTilesPerPartial>
struct OverlapPromotionMainloop : Base {
  static_assert(kTilesPerPartial == 1 || kTilesPerPartial == 2);
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "the accumulator must be in registers");

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)

    constexpr int kMmaWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout = make_layout(Int<kMmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    const int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);

    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA, MMA_M, MMA_K, PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA, MMA_N, MMA_K, PIPE)
    constexpr int kBlocksPerTile = decltype(size<2>(tCrA))::value;

    // The two partial-sum fragments (P_t of the header, over kTilesPerPartial K tiles) and the fp32 sum. Every register the loop uses holds a
    // defined value before the first wgmma: a wgmma names its accumulator as an input too, and left undefined
    // the compiler materialises those (ignored) inputs where it likes, which made ptxas inject a wait (C7517).
    auto part0 = make_fragment_like(accum);
    auto part1 = make_fragment_like(accum);
    clear(accum);
    clear(part0);
    clear(part1);
    warpgroup_fence_operand(accum);
    warpgroup_fence_operand(part0);
    warpgroup_fence_operand(part1);
    if (k_tile_count <= 0) return;

    PipelineState smem_pipe_release = smem_pipe_read;

    // Wait for the next K tile's operands and issue its wgmmas into `part`. The first tile of a partial
    // overwrites it (ScaleOut::Zero), so a partial needs no clearing.
    int remaining = k_tile_count;
    auto issue = [&](auto& part, bool first) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      const int read_stage = smem_pipe_read.index();
      tiled_mma.accumulate_ = first ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      warpgroup_fence_operand(part);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < kBlocksPerTile; ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, read_stage), tCrB(_, _, k_block, read_stage), part);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++smem_pipe_read;
      --remaining;
    };
    // Add a finished partial into the fp32 sum (the caller has waited for its wgmmas). The fences pin the adds
    // between that wait and the next issue: without the second one the compiler sinks them below the next
    // wgmma into the same fragment, keeps the old partial alive in a copy, and ptxas then serializes every
    // wgmma (C7514: a non-wgmma instruction reads an in-flight accumulator).
    auto promote = [&](auto& part) {
      warpgroup_fence_operand(part);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += part(i);
      warpgroup_fence_operand(accum);
    };
    // A promoted tile is no longer read by any wgmma: its stage goes back to the producer.
    auto release = [&]() {
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
    };
    // The tiles of a partial after its first (a partial spans kTilesPerPartial tiles; only the last may be
    // short). Returns the partial's tile count.
    auto fill = [&](auto& part) {
      int tiles = 1;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 1; i < kTilesPerPartial; ++i) {
        if (remaining > 0) {
          issue(part, false);
          ++tiles;
        }
      }
      return tiles;
    };
    // Start the next partial in `cur`, wait until only its first tile may be in flight, promote the previous
    // partial from `prev` and give its stages back, then issue the rest of cur's tiles.
    auto next_partial = [&](auto& cur, auto& prev) {
      issue(cur, true);
      warpgroup_wait<1>();
      promote(prev);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kTilesPerPartial; ++i) release();
      return fill(cur);
    };

    // The loop runs whole pairs of partials only, and the tail is spelled out per case: which fragment is which
    // stays a compile-time fact (registers cannot be indexed at run time), and ptxas proves the loop's waits
    // sufficient only in this shape (a loop with a mid-trip exit and a run-time choice of the last fragment had
    // every wgmma serialized, C7514).
    issue(part0, true);
    int last_tiles = fill(part0);
    CUTLASS_PRAGMA_NO_UNROLL
    for (; remaining >= 2 * kTilesPerPartial;) {
      next_partial(part1, part0);
      last_tiles = next_partial(part0, part1);
    }
    if (remaining == 0) {
      warpgroup_wait<0>();
      promote(part0);
    } else if (kTilesPerPartial == 1 || remaining <= kTilesPerPartial) {  // one tile short of two partials
      last_tiles = next_partial(part1, part0);
      warpgroup_wait<0>();
      promote(part1);
    } else {
      if constexpr (kTilesPerPartial > 1) {
        next_partial(part1, part0);
        last_tiles = next_partial(part0, part1);
        warpgroup_wait<0>();
        promote(part0);
      }
    }
    for (int i = 1; i < last_tiles; ++i) release();  // all but the last tile's stage
    // The last tile's stage is released by mma_tail(), as in CUTLASS's collective.
  }
};

}  // namespace fp8ext::sm90
