// The K loop shared by the overlapped mainloops: overlap_promotion_mainloop.cuh (row-wise, precise accumulation)
// and overlap_blockwise_mainloop.cuh (block-scaled). Both run on two_tile_loop(); the row-wise one calls
// run_overlapped_mma() with its fold, the block-scaled one its own step (it splits each tile's wgmmas). Each K
// tile's wgmmas go into one of two partial-sum fragments; while the tensor core works on tile t+1 in one, the
// warpgroup folds tile t's finished partial from the other into the fp32 sum (what "fold" means is the caller's:
// an add, or a multiply-add by the tile's scales).
//
// The contract with CUTLASS's kernel is that of its FP8 collectives: the loop leaves the last K tile's
// shared-memory stage unreleased, and the collective's mma_tail() releases it.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

namespace fp8ext::sm90::overlap {

// This warpgroup's wgmma descriptors for A and B over every pipeline stage: (MMA, MMA_M|N, MMA_K, PIPE).
template <class TiledMma, class SmemLayoutA, class SmemLayoutB, class TensorStorage>
CUTLASS_DEVICE auto operand_fragments(TiledMma& tiled_mma, int thread_idx, TensorStorage& shared_tensors) {
  using namespace cute;
  Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
  Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
  constexpr int kMmaWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  Layout warp_group_thread_layout = make_layout(Int<kMmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
  const int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
  auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
  return make_tuple(thread_mma.make_fragment_A(thread_mma.partition_A(sA)),
                    thread_mma.make_fragment_B(thread_mma.partition_B(sB)));
}

// Clear the fp32 sum and both partials. Every register the loop uses must hold a defined value before the first
// wgmma: a wgmma names its accumulator as an input too, and left undefined the compiler materialises those
// (ignored) inputs where it likes, which made ptxas inject a wait (C7517).
template <class Accum, class Part>
CUTLASS_DEVICE void clear_fragments(Accum& accum, Part& part0, Part& part1) {
  cute::clear(accum);
  cute::clear(part0);
  cute::clear(part1);
  cute::warpgroup_fence_operand(accum);
  cute::warpgroup_fence_operand(part0);
  cute::warpgroup_fence_operand(part1);
}

// Wait for the next K tile's stage and issue its wgmmas into `part`; the first one overwrites `part`
// (ScaleOut::Zero), so a partial needs no clearing.
template <class Pipeline, class PipelineState, class TiledMma, class FragA, class FragB, class Part>
CUTLASS_DEVICE void issue_k_tile(Pipeline& pipeline, PipelineState& smem_pipe_read, TiledMma& tiled_mma,
                                 FragA& tCrA, FragB& tCrB, Part& part) {
  using namespace cute;
  constexpr int kBlocksPerTile = decltype(size<2>(tCrA))::value;
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
}

// The K loop's skeleton over k_tile_count >= 1 tiles and two partial fragments: first(part) starts tile 0,
// step(next, prev) starts the next tile in one fragment and folds the previous one from the other, drain(last)
// folds the last. Two tiles a trip, so that which fragment is which stays a compile-time fact (registers cannot be
// indexed at run time). Both overlapped mainloops run on it; each says what a step is.
template <class Part, class First, class Step, class Drain>
CUTLASS_DEVICE void two_tile_loop(int k_tile_count, Part& part0, Part& part1, First&& first, Step&& step,
                                  Drain&& drain) {
  first(part0);
  int remaining = k_tile_count - 1;
  CUTLASS_PRAGMA_NO_UNROLL
  for (; remaining >= 2; remaining -= 2) {
    step(part1, part0);
    step(part0, part1);
  }
  if (remaining == 1) {
    step(part1, part0);
    drain(part1);
  } else {
    drain(part0);
  }
}

// The row-wise step: issue(part) starts a tile into a fragment; before_wait() runs while the tensor core still
// works on the newest tile (work that needs no finished partial); fold(part) adds a finished partial into the sum;
// release() hands the folded tile's stage back to the producer.
template <class Part, class Issue, class BeforeWait, class Fold, class Release>
CUTLASS_DEVICE void run_two_fragment_loop(int k_tile_count, Part& part0, Part& part1, Issue&& issue,
                                          BeforeWait&& before_wait, Fold&& fold, Release&& release) {
  using namespace cute;
  two_tile_loop(
      k_tile_count, part0, part1, issue,
      [&](auto& next, auto& prev) {
        issue(next);
        before_wait();
        warpgroup_wait<1>();  // prev's batch is complete; next's may still run
        fold(prev);
        release();
      },
      [&](auto& last) {
        before_wait();
        warpgroup_wait<0>();
        fold(last);
      });
  // The last tile's stage is released by mma_tail().
}

// A collective's whole overlapped mma(): the operand fragments, the fp32 sum and both partials cleared, every K
// tile issued through the collective's pipeline, and every folded tile's stage handed back to the producer. The
// caller says only what folding is: before_wait(stage) runs while the tensor core works on the newest tile, given
// the shared-memory stage of the tile folded next (still unreleased: the block-scaled loop reads that tile's scales
// there), and fold(part) adds a finished partial into the sum (the fences around it are the caller's).
template <class TiledMma, class SmemLayoutA, class SmemLayoutB, class Pipeline, class PipelineState,
          class TensorStorage, class Accum, class BeforeWait, class Fold>
CUTLASS_DEVICE void run_overlapped_mma(Pipeline& pipeline, PipelineState smem_pipe_read, Accum& accum,
                                       int k_tile_count, int thread_idx, TensorStorage& shared_tensors,
                                       BeforeWait&& before_wait, Fold&& fold) {
  using namespace cute;
  TiledMma tiled_mma;
  auto fragments = operand_fragments<TiledMma, SmemLayoutA, SmemLayoutB>(tiled_mma, thread_idx, shared_tensors);
  auto& tCrA = get<0>(fragments);  // (MMA, MMA_M, MMA_K, PIPE)
  auto& tCrB = get<1>(fragments);  // (MMA, MMA_N, MMA_K, PIPE)

  // The two partial-sum fragments and the fp32 sum, cleared.
  auto part0 = make_fragment_like(accum);
  auto part1 = make_fragment_like(accum);
  clear_fragments(accum, part0, part1);
  if (k_tile_count <= 0) return;

  PipelineState smem_pipe_release = smem_pipe_read;
  auto issue = [&](auto& part) { issue_k_tile(pipeline, smem_pipe_read, tiled_mma, tCrA, tCrB, part); };
  // The tile folded last is no longer read by any wgmma (nor its scales): its stage goes back to the producer.
  auto release = [&]() {
    pipeline.consumer_release(smem_pipe_release);
    ++smem_pipe_release;
  };
  run_two_fragment_loop(k_tile_count, part0, part1, issue, [&]() { before_wait(smem_pipe_release.index()); }, fold,
                        release);
}

}  // namespace fp8ext::sm90::overlap
