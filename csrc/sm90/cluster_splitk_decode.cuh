// Decode (M <= 128) with K split over the CTAs of a thread-block cluster, on CUTLASS's TMA warp-specialized
// mainloop, the partial sums added through distributed shared memory.
//
//     out[i, j] = round_to_out( fma( scale_a[i] * scale_b[j], acc[i, j], bias[j] ) )      (decode_common.cuh)
//     acc[i, j] = sum over cluster ranks q = 0 .. S-1, in that order, of
//                 sum_{k in slice q} a[i, k] * w[j, k]       (each slice summed by wgmma, fast accumulation)
//
// Why: a swapped CUTLASS kernel gives each 64-row weight tile to one CTA, so a small weight keeps few SMs
// streaming (4096 rows: 64 tiles for 132 SMs), and M = 16-128 on the 4096-10240-row weights ran 1.10-1.27x
// slower than M = 1 on the same weight. Stream-K splits K, but adds the partial tiles in a serial chain through
// global memory (each peer waits for the previous one). The hand-written wgmma decode kernel of session 8
// (dropped) split K over a cluster but fed wgmma with cp.async and no producer warp, and lost 8% to CUTLASS's
// mainloop even unsplit. So here the mainloop is CUTLASS's own (the collective of the swapped ping-pong fast
// kernels: one producer warp issuing TMA into an mbarrier pipeline, one consumer warpgroup issuing wgmma), and
// only the kernel around it is ours:
//   - grid (S, weight row tiles, token tiles), clusters of S CTAs along x; rank q reads the ceil(T / S) K tiles
//     from q * ceil(T / S) (of T), so a 4096-row weight is 64 x S CTAs instead of 64;
//   - each CTA writes its fp32 partial tile into its own shared memory, the cluster synchronises, and rank q
//     adds the S partials of 1/S of the tile's elements, reading them from every CTA of the cluster in rank
//     order (so the sum does not depend on which CTA computes it, or on timing), then applies the epilogue;
//   - no workspace, no counters, nothing to reset: CUDA graphs capture it as it is.
// The CTAs of a cluster also share one mbarrier pipeline release (the pipeline is built for a cluster of S,
// so each stage is refilled once all S consumers are done with it): the collective's pipeline only knows how
// to release to CTAs of its own cluster shape, and the S CTAs run the same number of K tiles anyway.
//
// Only this header (and the gemv_cluster_splitk_*.cu files that instantiate it) include CUTLASS; no libtorch.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "sm90/decode_common.cuh"
#include "sm90/gemm_params.h"
#include "sm90/kernel_registry.h"

namespace fp8ext::sm90::cluster_splitk {

constexpr int kThreads = 256;  // warpgroup 0: the TMA producer (one warp issues); warpgroup 1: the wgmma consumer
constexpr int kTileK = 128;
constexpr int kMaxM = 128;
constexpr int kMaxCluster = 8;  // the portable cluster size

// The mainloop of one (weight rows x tokens) tile: CUTLASS's collective for the swapped ping-pong fast kernels,
// built for a cluster of one CTA (no multicast: the CTAs of our cluster read different K slices).
template <int TileRows, int TileTokens, int CtasPerSm>
struct Mainloop {
  static constexpr int kRows = TileRows;
  static constexpr int kCtasPerSm = CtasPerSm;
  static constexpr int kTokens = TileTokens;
  // Row stride of the partial tile in shared memory, [token][row]: the 4 floats of padding spread the wgmma
  // accumulator layout's writes over all 32 banks, and keep rows 16-byte aligned for float4 reads.
  static constexpr int kLd = TileRows + 4;
  static constexpr int kPartialBytes = TileTokens * kLd * 4;

  using TileShape = cute::Shape<cute::Int<TileRows>, cute::Int<TileTokens>, cute::Int<kTileK>>;
  // As many stages as fit: all of shared memory for one CTA per SM; for two, each at most 112 KiB (an SM has
  // 228 KiB, 1 KiB of it reserved per CTA).
  static constexpr int kCarveout = CtasPerSm == 1 ? 0 : 232448 - 112 * 1024;
  using Collective = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::float_e4m3_t, cutlass::layout::RowMajor, 16,
      cutlass::float_e4m3_t, cutlass::layout::ColumnMajor, 16, float, TileShape, cute::Shape<cute::_1, cute::_1, cute::_1>,
      cutlass::gemm::collective::StageCountAutoCarveout<kCarveout>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>::CollectiveOp;
  using Pipeline = typename Collective::MainloopPipeline;

  struct SharedStorage {
    // The partial tile reuses the operand stages: it is written only after this CTA's last wgmma has finished
    // reading them, and no TMA write is pending then (every load was consumed).
    union Tensors {
      typename Collective::TensorStorage mainloop;
      alignas(16) float partial[TileTokens][kLd];
    };
    alignas(128) Tensors tensors;
    typename Collective::PipelineStorage pipeline;
  };
  static_assert(kPartialBytes <= sizeof(typename Collective::TensorStorage), "the partial tile must fit the stages");
};

template <class ML>
struct KernelParams {
  typename ML::Collective::Params mainloop;
  GemmParams gemm;  // the user's-frame description; the epilogue reads scales, bias and out from it
  int k_tiles;
};

template <class ML, typename Out>
__global__ void __launch_bounds__(kThreads, ML::kCtasPerSm) cluster_splitk_kernel(const __grid_constant__ KernelParams<ML> kp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;
  using Collective = typename ML::Collective;
  using Pipeline = typename ML::Pipeline;
  extern __shared__ char smem_buf[];
  auto& shared = *reinterpret_cast<typename ML::SharedStorage*>(smem_buf);

  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const bool is_producer = threadIdx.x < 128;
  const int lane = threadIdx.x % 32;
  const int S = static_cast<int>(cute::cluster_shape().x);
  const int rank = static_cast<int>(cute::block_rank_in_cluster());

  if (warp_idx == 0 && cute::elect_one_sync()) Collective::prefetch_tma_descriptors(kp.mainloop);

  typename Pipeline::Params pipeline_params;
  if (warp_idx == 0) pipeline_params.role = Pipeline::ThreadCategory::Producer;
  if (!is_producer) pipeline_params.role = Pipeline::ThreadCategory::Consumer;
  pipeline_params.is_leader = threadIdx.x % 128 == 0;
  pipeline_params.num_consumers = 128;
  pipeline_params.num_producers = 1;
  pipeline_params.transaction_bytes = kp.mainloop.tma_transaction_bytes;
  Pipeline pipeline(shared.pipeline, pipeline_params, make_shape(S, _1{}, _1{}));
  // Every CTA's barriers must be initialised before any CTA of the cluster arrives on them.
  cute::cluster_arrive_relaxed();
  cute::cluster_wait();

  // This CTA's K tiles: ceil(T / S) of them from rank * ceil(T / S). Every rank runs the same count, because the
  // ranks share their stage releases (above) and a rank with fewer would leave its peers waiting; tiles past the
  // end of K (the last ranks' when T is not a multiple of S) are zeros from TMA's bounds check and add nothing.
  const int k_count = (kp.k_tiles + S - 1) / S;
  const int k_begin = rank * k_count;
  const GemmParams& p = kp.gemm;
  auto problem = make_shape(static_cast<int>(p.N), static_cast<int>(p.M), static_cast<int>(p.K), 1);
  Collective collective;
  auto load_inputs = collective.load_init(problem, kp.mainloop);

  if (is_producer) {
    if (warp_idx == 0) {
      auto state = cutlass::make_producer_start_state<Pipeline>();
      auto gA_mkl = get<0>(load_inputs);
      auto k_iter = make_coord_iterator(idx2crd(k_begin, shape<3>(gA_mkl)), shape<3>(gA_mkl));
      // Rank 0 of the collective's own one-CTA cluster: the TMA copies are not multicast.
      collective.load(kp.mainloop, pipeline, state, load_inputs,
                      make_coord(static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z), _, 0), k_iter, k_count,
                      lane, 0u, shared.tensors.mainloop);
      state.advance(k_count);
      collective.load_tail(pipeline, state);
    }
  } else {
    const int mma_thread = threadIdx.x - 128;
    typename Collective::TiledMma tiled_mma;
    Tensor accum = partition_fragment_C(tiled_mma, take<0, 2>(typename ML::TileShape{}));
    typename Collective::PipelineState state;
    collective.mma(pipeline, state, accum, k_count, mma_thread, shared.tensors.mainloop, kp.mainloop);
    collective.mma_tail(pipeline, state, k_count);  // waits for the last wgmma, releases the last stages
    Tensor coord = tiled_mma.get_slice(mma_thread).partition_C(make_identity_tensor(take<0, 2>(typename ML::TileShape{})));
    CUTE_UNROLL
    for (int i = 0; i < size(accum); ++i) {
      shared.tensors.partial[get<1>(coord(i))][get<0>(coord(i))] = accum(i);
    }
  }

  // Release/acquire across the cluster: every partial tile is written before any rank reads one.
  cute::cluster_arrive();
  cute::cluster_wait();

  // Rank q adds and stores an even share of the tile's valid (token, 4 rows) groups.
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  constexpr int kGroupsPerToken = ML::kRows / 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * ML::kRows;
  const int64_t token0 = static_cast<int64_t>(blockIdx.z) * ML::kTokens;
  const int tokens = static_cast<int>(min<int64_t>(ML::kTokens, p.M - token0));
  const int groups = tokens * kGroupsPerToken;
  const int g_end = (rank + 1) * groups / S;
  for (int g = rank * groups / S + static_cast<int>(threadIdx.x); g < g_end; g += kThreads) {
    const int t = g / kGroupsPerToken;
    const int r = g % kGroupsPerToken * 4;
    float* local = &shared.tensors.partial[t][r];
    float4 sum = *reinterpret_cast<const float4*>(cluster.map_shared_rank(local, 0));
    for (int q = 1; q < S; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(local, q));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const float s[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (row0 + r + e < p.N) decode::store_output<Out>(p, token0 + t, row0 + r + e, s[e]);
    }
  }

  // No CTA may exit (and release its shared memory) while another still reads it.
  cute::cluster_arrive();
  cute::cluster_wait();
#endif
}

template <int TileRows, int TileTokens, int CtasPerSm, typename Out>
cudaError_t launch_tile(const GemmParams& p, int S) {
  using ML = Mainloop<TileRows, TileTokens, CtasPerSm>;
  using Collective = typename ML::Collective;
  // The MMA's frame (rowwise_gemm.cuh, swap_ab): A = the weight [N, K], B = the activations [M, K].
  typename Collective::Arguments args{};
  args.ptr_A = static_cast<const cutlass::float_e4m3_t*>(p.b);
  args.dA = cute::make_stride(p.ldb, cute::_1{}, int64_t(0));
  args.ptr_B = static_cast<const cutlass::float_e4m3_t*>(p.a);
  args.dB = cute::make_stride(p.lda, cute::_1{}, int64_t(0));
  KernelParams<ML> kp{};
  kp.mainloop = Collective::to_underlying_arguments(
      cute::make_shape(static_cast<int>(p.N), static_cast<int>(p.M), static_cast<int>(p.K), 1), args, nullptr);
  kp.gemm = p;
  kp.k_tiles = static_cast<int>((p.K + kTileK - 1) / kTileK);

  auto* kernel = &cluster_splitk_kernel<ML, Out>;
  constexpr int kSmem = sizeof(typename ML::SharedStorage);
  // Per call, as CUTLASS's adapter does: the attribute belongs to the current device's context.
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;

  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(S), static_cast<unsigned>((p.N + TileRows - 1) / TileRows),
                        static_cast<unsigned>((p.M + TileTokens - 1) / TileTokens));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = p.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(S);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, kp);
}

// Token tile by M: the narrowest of 16, 32, 64, 128 that holds all M tokens (one token tile, so each weight
// byte is read once).
template <int TileRows, int CtasPerSm, typename Out>
LaunchResult launch(const GemmParams& p, int S) {
  if (p.M < 1 || p.M > kMaxM) return {false, "cluster_splitk", "M must be between 1 and 128 for the csk kernels"};
  if (p.a_is_e5m2) return {false, "cluster_splitk", "the csk kernels read e4m3 activations only"};
  const cudaError_t err = p.M <= 16   ? launch_tile<TileRows, 16, CtasPerSm, Out>(p, S)
                          : p.M <= 32 ? launch_tile<TileRows, 32, CtasPerSm, Out>(p, S)
                          : p.M <= 64 ? launch_tile<TileRows, 64, CtasPerSm, Out>(p, S)
                                      : launch_tile<TileRows, 128, CtasPerSm, Out>(p, S);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

constexpr KernelTraits traits() {
  KernelTraits t{};
  t.schedule = Schedule::kGemv;  // a decode kernel of our own: no tile scheduler, no "@" options
  t.accum = Accum::kFast;
  t.out = OutType::kBF16;
  t.in_a = InType::kE4M3;
  t.any_in_a = false;
  t.max_m = kMaxM;
  return t;
}

template <int TileRows, int CtasPerSm, int S>
LaunchResult launch_bf16(const GemmParams& p) {
  return launch<TileRows, CtasPerSm, __nv_bfloat16>(p, S);
}

// Used by the gemv_cluster_splitk_r*.cu files, which name their variants (the names are read from the sources).
template <int TileRows, int CtasPerSm, int S>
bool register_variant(const char* name) {
  static_assert(S >= 1 && S <= kMaxCluster, "a cluster of 1 to 8 CTAs");
  return register_kernel({name, traits(), &launch_bf16<TileRows, CtasPerSm, S>, &decode::no_workspace});
}

}  // namespace fp8ext::sm90::cluster_splitk
