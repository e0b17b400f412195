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

namespace fp8ext::sm90 {

template <class Base>
struct OverlapPromotionMainloop : Base {
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

    // The two partial-sum fragments (P_t of the header) and the fp32 sum. Every register the loop uses holds a
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

    // Wait for the next K tile's operands and issue its wgmmas into `part`; the first one overwrites `part`
    // (ScaleOut::Zero), so a partial needs no clearing.
    auto issue = [&](auto& part) {
      auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      const int read_stage = smem_pipe_read.index();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(part);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < kBlocksPerTile; ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, read_stage), tCrB(_, _, k_block, read_stage), part);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++smem_pipe_read;
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
    // The tile promoted last is no longer read by any wgmma: its stage goes back to the producer.
    auto release = [&]() {
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
    };

    issue(part0);
    int remaining = k_tile_count - 1;
    // Two tiles per trip so that which fragment is which stays a compile-time fact (registers cannot be
    // indexed at run time).
    CUTLASS_PRAGMA_NO_UNROLL
    for (; remaining >= 2; remaining -= 2) {
      issue(part1);
      warpgroup_wait<1>();  // part0's batch is complete; part1's may still run
      promote(part0);
      release();
      issue(part0);
      warpgroup_wait<1>();
      promote(part1);
      release();
    }
    if (remaining == 1) {
      issue(part1);
      warpgroup_wait<1>();
      promote(part0);
      release();
      warpgroup_wait<0>();
      promote(part1);
    } else {
      warpgroup_wait<0>();
      promote(part0);
    }
    // The last tile's stage is released by mma_tail(), as in CUTLASS's collective.
  }
};

}  // namespace fp8ext::sm90
