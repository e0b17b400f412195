// CUTLASS's TMA pipeline (PipelineTmaAsync), with a consumer release that also covers what the consumer threads
// read from a stage themselves, for cluster kernels.
//
// A stage's empty barrier tells the producer that the consumers are done with the stage, so that it may refill it.
// In PipelineTmaAsync the barrier of CTA b counts
//
//   one CTA:      one arrival per consumer thread                                     (num_consumers)
//   a cluster:    one arrival per consumer warpgroup of each CTA that multicasts into b's stage, b included
//                 ((cluster_m + cluster_n - 1) x warpgroups), each made by one thread of the warpgroup chosen
//                 per destination CTA (detail::spread_arrivals_to_warpgroup)
//
// In a cluster that covers what the warpgroup's wgmmas read (the operands: the wgmma is collective, complete once
// the arriving thread's warpgroup_wait returns), but not what the other 127 threads read with ordinary loads, such
// as the block-wise fold's scales: nothing orders those loads before the producer's cp.async refilling the stage, a
// data race under the PTX memory model (compute-sanitizer's racecheck reports it). So here the barrier of CTA b
// counts
//
//   a cluster:    one arrival per consumer thread of b, made on b's barrier by the thread itself, after its last
//                 read of the stage, plus one arrival per consumer warpgroup of each OTHER CTA that multicasts into
//                 b's stage, made as in PipelineTmaAsync
//                 (num_consumers + (cluster_m + cluster_n - 2) x warpgroups)
//
// which is the one-CTA rule for b's own threads and CUTLASS's rule for the other CTAs. Only the empty barriers'
// count and the consumer release differ from PipelineTmaAsync; the producer side (acquire, commit, tail) and the
// full barriers are its own, so a collective's producer code takes this pipeline as its base class.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace fp8ext::sm90 {

template <class BasePipeline>
class StageReadingPipeline : public BasePipeline {
 public:
  using typename BasePipeline::Params;
  using typename BasePipeline::PipelineState;
  using typename BasePipeline::SharedStorage;

  template <class ClusterShape>
  CUTLASS_DEVICE StageReadingPipeline(SharedStorage& storage, Params params, ClusterShape cluster_shape)
      : BasePipeline(storage, params, cluster_shape, cute::false_type{}, cute::false_type{}),
        empty_barriers_(&storage.empty_barrier_[0]) {
    static_assert(cute::size(ClusterShape{}) > 1, "a one-CTA kernel's PipelineTmaAsync already counts every thread");
    const uint32_t warpgroups = cute::ceil_div(params.num_consumers, uint32_t(cutlass::NumThreadsPerWarpGroup));
    if (cutlass::canonical_warp_idx_sync() == params.initializing_warp) {
      const uint32_t other_ctas = cute::size<0>(cluster_shape) + cute::size<1>(cluster_shape) - 2;
      cutlass::arch::detail::initialize_barrier_array_pair_aligned<decltype(storage.full_barrier_),
                                                                    decltype(storage.empty_barrier_),
                                                                    BasePipeline::Stages>(
          storage.full_barrier_, storage.empty_barrier_, params.num_producers,
          params.num_consumers + other_ctas * warpgroups);
    }
    cutlass::arch::fence_barrier_init();
    // The arrivals for the other CTAs: PipelineTmaAsync's choice of thread and destination, without this CTA.
    const auto [signals, dst] = cutlass::detail::spread_arrivals_to_warpgroup(
        threadIdx.x % cutlass::NumThreadsPerWarpGroup, cutlass::canonical_warp_idx_sync());
    const dim3 block = cute::block_id_in_cluster();
    const uint32_t rank = block.x + block.y * cute::size<0>(cluster_shape);
    remote_dst_ = dst;
    signals_remote_ = signals && dst < cute::size(cluster_shape) && dst != rank &&
                      this->is_same_row_or_col(dst, block, cluster_shape);
  }

  // Every consumer thread calls this once it has read the stage for the last time (its wgmmas complete, its own
  // loads done): it arrives on its own CTA's barrier, and the chosen threads on the other CTAs' too.
  CUTLASS_DEVICE void consumer_release(PipelineState state) {
    empty_barriers_[state.index()].arrive();
    empty_barriers_[state.index()].arrive(remote_dst_, signals_remote_);
  }

 private:
  typename BasePipeline::EmptyBarrier* empty_barriers_;
  uint32_t remote_dst_ = 0;
  uint32_t signals_remote_ = 0;
};

}  // namespace fp8ext::sm90
