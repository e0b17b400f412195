// The K loop shared by the overlapped mainloops: overlap_promotion_mainloop.cuh (row-wise, precise accumulation)
// and overlap_blockwise_mainloop.cuh (block-scaled). Each K tile's wgmmas go into one of two partial-sum
// fragments; while the tensor core works on tile t+1 in one, the warpgroup folds tile t's finished partial from
// the other into the fp32 sum. Both are an OverlappedMainloop (below): the same Steps, in the order of a Schedule,
// with their own Promotion, which says what "fold" means: an add (row-wise), or a multiply-add by the tile's
// scales (block-wise).
//
// The contract with CUTLASS's kernel is that of its FP8 collectives: the loop leaves the last K tile's
// shared-memory stage unreleased, and the collective's mma_tail() releases it.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

#include "sm90/common/stage_reading_pipeline.cuh"

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

// The steps a K loop is made of, on one consumer thread's state: the pipeline's read and release positions, the
// operand fragments, the fp32 sum and the Promotion, which says what folding a finished partial P_t into the sum
// means. A Promotion has
//   load(stage)               read what the fold of the tile in `stage` needs, before that stage is released
//                             (block-wise: the tile's scales; row-wise: nothing)
//   fold_element(part, acc, i) element i of the fold: acc(i) += part(i), or part(i) times the tile's scales.
// and is built by OverlappedMainloop's MakePromotion::make<Collective>(shared_tensors, thread_idx) (below): the
// row-wise AddPartial is its own maker (a static make), the block-wise StageScales has the factory BlockScales.
// Held in one object, the pipeline positions stay in uniform registers. Captured by the loop's lambdas as locals,
// ptxas kept them in vector registers (the stage index's wrap-around and the release barrier's address computed
// per thread, every tile), and the block-wise loop written that way ran 4-5% slower
// (overlap_blockwise_mainloop.cuh).
template <class Pipeline, class PipelineState, class TiledMma, class FragA, class FragB, class Promotion,
          class Accum>
struct Steps {
  Pipeline& pipeline;
  PipelineState& smem_pipe_read;
  PipelineState smem_pipe_release;
  TiledMma& tiled_mma;
  FragA& tCrA;
  FragB& tCrB;
  Promotion& promotion;
  Accum& accum;
  int k_tile_count;
  int thread_idx;
  int read_stage = 0;
  static constexpr int kBlocksPerTile = decltype(cute::size<2>(FragA{}))::value;

  // Wait for the next tile's stage; the first of its wgmmas then overwrites the partial (ScaleOut::Zero), so a
  // partial needs no clearing.
  CUTLASS_DEVICE void wait_stage() {
    auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
    pipeline.consumer_wait(smem_pipe_read, barrier_token);
    read_stage = smem_pipe_read.index();
    tiled_mma.accumulate_ = cute::GMMA::ScaleOut::Zero;
  }
  // k-blocks [begin, end) of the current tile into `part`, as one commit group; `fence`: a wgmma.fence first.
  template <class Part>
  CUTLASS_DEVICE void issue(Part& part, int begin, int end, bool fence) {
    using namespace cute;
    if (fence) {
      if (begin == 0) warpgroup_fence_operand(part);
      warpgroup_arrive();
    }
    CUTLASS_PRAGMA_UNROLL
    for (int k_block = begin; k_block < end; ++k_block) {
      cute::gemm(tiled_mma, tCrA(_, _, k_block, read_stage), tCrB(_, _, k_block, read_stage), part);
      tiled_mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  }
  CUTLASS_DEVICE void next_stage() { ++smem_pipe_read; }
  // A whole tile, one commit group.
  template <class Part>
  CUTLASS_DEVICE void issue_tile(Part& part) {
    wait_stage();
    issue(part, 0, kBlocksPerTile, true);
    next_stage();
  }
  // What the fold of the tile folded next needs (its stage is still unreleased).
  CUTLASS_DEVICE void load_fold_inputs() { promotion.load(smem_pipe_release.index()); }
  // Elements [c * n / chunks, (c + 1) * n / chunks) of the fold of a finished partial (the caller has waited for
  // its wgmmas), each pinned by its own fences: without the second ones the compiler sinks the fold below the next
  // wgmma into the same fragment, keeps the old partial alive in a copy, and ptxas then serializes every wgmma
  // (C7514: a non-wgmma instruction reads an in-flight accumulator).
  template <int kChunks, class Part>
  CUTLASS_DEVICE void fold_chunk(Part& part, int c) {
    constexpr int kChunk = decltype(cute::size(Accum{}))::value / kChunks;
    CUTLASS_PRAGMA_UNROLL
    for (int i = c * kChunk; i < (c + 1) * kChunk; ++i) cute::warpgroup_fence_operand(part(i));
    CUTLASS_PRAGMA_UNROLL
    for (int i = c * kChunk; i < (c + 1) * kChunk; ++i) promotion.fold_element(part, accum, i);
    CUTLASS_PRAGMA_UNROLL
    for (int i = c * kChunk; i < (c + 1) * kChunk; ++i) cute::warpgroup_fence_operand(accum(i));
  }
  // The whole fold of a finished partial, fenced as a whole (the fences as in fold_chunk).
  template <class Part>
  CUTLASS_DEVICE void fold(Part& part) {
    cute::warpgroup_fence_operand(part);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < cute::size(accum); ++i) promotion.fold_element(part, accum, i);
    cute::warpgroup_fence_operand(accum);
  }
  // The folded tile's stage (operands and whatever the fold read there) is no longer read: back to the producer.
  CUTLASS_DEVICE void release() {
    pipeline.consumer_release(smem_pipe_release);
    ++smem_pipe_release;
  }
};

// The schedules: run(steps, part0, part1) issues every K tile, folds every one but the last into the sum and hands
// their stages back (the last is mma_tail()'s).
//
// WholeTiles: tile t+1's wgmmas, the wait until only they are in flight (tile t is complete), tile t's fold while
// the tensor core works on t+1, tile t's stage released.
struct WholeTiles {
  template <class S, class Part>
  CUTLASS_DEVICE static void run(S& s, Part& part0, Part& part1) {
    two_tile_loop(
        s.k_tile_count, part0, part1, [&](auto& part) { s.issue_tile(part); },
        [&](auto& next, auto& prev) {
          s.issue_tile(next);
          s.load_fold_inputs();
          cute::warpgroup_wait<1>();
          s.fold(prev);
          s.release();
        },
        [&](auto& last) {
          s.load_fold_inputs();
          cute::warpgroup_wait<0>();
          s.fold(last);
        });
  }
};

// HalfTiles: the first half of tile t+1's wgmmas, the wait (tile t is complete), tile t's fold, the second half.
// What the fold reads from its stage is read first: in the block-wise loop, scales loaded after the first wgmma held
// back the second one (ptxas places the scale product's FMULs ahead of it), and the loop ran 6% slower than this
// order. ptxas moves the whole fold ahead of the second half.
struct HalfTiles {
  template <class S, class Part>
  CUTLASS_DEVICE static void run(S& s, Part& part0, Part& part1) {
    constexpr int kHalf = S::kBlocksPerTile / 2;
    two_tile_loop(
        s.k_tile_count, part0, part1, [&](auto& part) { s.issue_tile(part); },
        [&](auto& next, auto& prev) {
          s.load_fold_inputs();
          s.wait_stage();
          s.issue(next, 0, kHalf, true);
          cute::warpgroup_wait<1>();  // every group but the half just issued: prev is complete
          cute::warpgroup_fence_operand(prev);
          s.template fold_chunk<2>(prev, 0);
          s.issue(next, kHalf, S::kBlocksPerTile, true);
          s.template fold_chunk<2>(prev, 1);
          s.next_stage();
          s.release();
        },
        [&](auto& last) {
          s.load_fold_inputs();
          cute::warpgroup_wait<0>();
          s.fold(last);
        });
  }
};

// A CUTLASS collective (Base) with mma() replaced by an overlapped K loop: Schedule (above) says in what order the
// steps run, MakePromotion::make<Base>(shared_tensors, thread_idx) builds the Promotion. Loads, shared storage and
// parameters stay Base's, and so does the contract with the kernel: mma() leaves the last K tile's stage unreleased
// and mma_tail() releases it.
// A Promotion that reads its stage with ordinary loads (MakePromotion::kReadsStage: the block-wise scales) in a
// cluster of more than one CTA needs every consumer thread's release counted: the pipeline is then
// StageReadingPipeline (stage_reading_pipeline.cuh), and mma_tail() is this class's, since Base's takes Base's
// pipeline. The producer's code (Base's load(), load_auxiliary(), load_tail()) takes it as the base class it is.
template <class Base, class Schedule, class MakePromotion>
struct OverlappedMainloop : Base {
  static constexpr bool kEveryThreadReleases =
      MakePromotion::kReadsStage && cute::size(typename Base::DispatchPolicy::ClusterShape{}) > 1;
  using MainloopPipeline = cute::conditional_t<kEveryThreadReleases,
                                               StageReadingPipeline<typename Base::MainloopPipeline>,
                                               typename Base::MainloopPipeline>;
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
    // The sum and two partials: 3 x 64 fp32 registers a thread at a warpgroup's share of 64 x 128.
    static_assert(size(FrgTensorC{}) <= 64, "a warpgroup's share of a tile must stay at 64 x 128 or below");
    auto promotion = MakePromotion::template make<Base>(shared_tensors, thread_idx);
    TiledMma tiled_mma;
    auto fragments = operand_fragments<TiledMma, SmemLayoutA, SmemLayoutB>(tiled_mma, thread_idx, shared_tensors);
    auto part0 = make_fragment_like(accum);
    auto part1 = make_fragment_like(accum);
    clear_fragments(accum, part0, part1);
    if (k_tile_count <= 0) return;
    Steps<MainloopPipeline, PipelineState, TiledMma, remove_cvref_t<decltype(get<0>(fragments))>,
          remove_cvref_t<decltype(get<1>(fragments))>, decltype(promotion), FrgTensorC>
        steps{pipeline, smem_pipe_read, smem_pipe_read, tiled_mma, get<0>(fragments), get<1>(fragments), promotion,
              accum, k_tile_count, thread_idx};
    Schedule::run(steps, part0, part1);
  }

  // Releases the stage mma() left unreleased: the last K tile's.
  CUTLASS_DEVICE void mma_tail(MainloopPipeline pipeline, PipelineState smem_pipe_release, int k_tile_count) {
    if constexpr (kEveryThreadReleases) {
      smem_pipe_release.advance(k_tile_count - 1);
      pipeline.consumer_release(smem_pipe_release);
    } else {
      Base::mma_tail(pipeline, smem_pipe_release, k_tile_count);
    }
  }
};

}  // namespace fp8ext::sm90::overlap
