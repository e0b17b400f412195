// Decode on wgmma: M <= 128 tokens against an fp8 weight, K split over the CTAs of a thread-block cluster.
//
//     out[i, j] = round_to_out( fma( scale_a[i] * scale_b[j], acc[i, j], bias[j] ) )      (decode_common.cuh)
//     acc[i, j] = sum over slices s = 0 .. S-1, in that order, of  sum_{k in slice s} a[i, k] * w[j, k]
//                 (each slice's sum accumulated by wgmma in fp32 registers over its whole slice; w[j, :] = column
//                 j of b)
//
// Why: at M = 32-128 the swapped CUTLASS kernels give each 64- or 128-row weight tile to one CTA, so a weight of
// 4096-10240 rows keeps 32-160 CTAs reading, and those rows ran 10-25% slower than the same weight at M = 1
// (bench/results/h200-2026-11-30-llama-84b1019.json), where the GEMV spreads the read over every SM. gemv_tc
// (gemv_tensor_core.cu) spreads it too, but its mma.sync runs out of tensor-core rate from M = 32 on. Here a CTA
// owns R = 64 or 128 weight rows (one warpgroup per 64) and one of S slices of K, and the S CTAs of a row tile
// form one cluster: a 4096-row weight with R = 128, S = 4 is 128 CTAs. The slices' partial sums meet in
// distributed shared memory and are added in a fixed order, so no global workspace is needed (CUDA graphs keep
// the kernel) and the result does not depend on timing.
//
// Main loop: every thread copies its share of a stage (R weight rows and the M token rows of 128 bytes of K)
// with cp.async into a ring of shared-memory stages in the 128-byte-swizzled K-major layout that wgmma reads;
// stages - 2 copies stay in flight and one wgmma batch (4 x k32 over the stage) runs while the next stage lands.
// Tokens beyond M are zero-filled (no global read), and their output columns are dropped.
//
// The tensor core sums fp8 products with reduced precision before they reach the fp32 registers (as in the
// CUTLASS fast kernels), so these kernels are registered for fast accumulation only.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "sm90/decode_common.cuh"
#include "sm90/gemm_params.h"
#include "sm90/kernel_registry.h"

namespace fp8ext::sm90 {
namespace {

namespace cg = cooperative_groups;
using namespace cute;

constexpr int kTileK = 128;  // bytes of K per stage: one 128-byte swizzle row, 4 wgmma k-blocks of 32
constexpr int kMaxM = 128;
constexpr int kMaxDevices = 64;

// Rows: weight rows per CTA (64 per warpgroup). N: the wgmma's N, M rounded up to 32, 64 or 128.
// R = 64 CTAs keep to ~110 KB of shared memory so that two fit on an SM; R = 128 CTAs take one SM each.
template <class ElementB, int Rows, int N>
struct WgConfig {
  static constexpr int kWarpgroups = Rows / 64;
  static constexpr int kThreads = kWarpgroups * 128;
  static constexpr int kMinBlocks = Rows == 64 ? 2 : 1;
  static constexpr int kBudget = Rows == 64 ? 110 * 1024 : 200 * 1024;
  static constexpr int kStageBytes = (Rows + N) * kTileK;
  static constexpr int kStages = kBudget / kStageBytes < 8 ? kBudget / kStageBytes : 8;
  static_assert(kStages >= 4, "two stages in flight at least");
  static_assert(Rows * 8 % kThreads == 0 && N * 8 % kThreads == 0, "every thread copies as many pieces");
  // The slices' sums, [token][row] with 4 floats of padding, reuse the stages once the main loop is done.
  static constexpr int kRedStride = Rows + 4;
  static constexpr int kRedBytes = N * kRedStride * 4;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kSmemBytes = kPipeBytes > kRedBytes ? kPipeBytes : kRedBytes;

  using ElementA = cutlass::float_e4m3_t;
  using SmemLayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<ElementA>{},
                                             make_shape(Int<Rows>{}, Int<kTileK>{}, Int<kStages>{})));
  using SmemLayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<ElementB>{},
                                             make_shape(Int<N>{}, Int<kTileK>{}, Int<kStages>{})));
  using Atom = decltype(SM90::GMMA::ss_op_selector<ElementA, ElementB, float, Shape<_64, Int<N>, Int<kTileK>>>());
  using TiledMma = decltype(make_tiled_mma(Atom{}, Layout<Shape<Int<kWarpgroups>, _1, _1>>{}));
};

// 16 bytes global -> shared; src_bytes = 0 writes zeros and reads nothing (K beyond the end, rows beyond N, tokens
// beyond M). The L2::cache_hint form (an evict-first policy for the weight) trapped with an illegal instruction on
// the H200 (compute-sanitizer, 62cf8ee), so both operands take the plain copy.
__device__ __forceinline__ void copy_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending> __device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(Pending));
}
// cp.async writes through the generic proxy; wgmma reads shared memory through the async proxy.
__device__ __forceinline__ void fence_for_wgmma() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <typename Out, class ElementB, int Rows, int N>
__global__ void __launch_bounds__(WgConfig<ElementB, Rows, N>::kThreads, WgConfig<ElementB, Rows, N>::kMinBlocks)
    gemv_wg_kernel(const GemmParams p, int slices) {
  using Cfg = WgConfig<ElementB, Rows, N>;
  constexpr int kStages = Cfg::kStages;
  constexpr int kThreads = Cfg::kThreads;
  extern __shared__ __align__(1024) uint8_t smem[];  // the 128-byte swizzle repeats every 1024 bytes
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem + cosize(typename Cfg::SmemLayoutA{});
  const uint32_t smem_a_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_a));
  const uint32_t smem_b_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_b));

  const int tid = threadIdx.x;
  const int slice = blockIdx.x;  // = the CTA's rank in its cluster
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * Rows;
  const int k_tiles = static_cast<int>((p.K + kTileK - 1) / kTileK);
  const int kt_begin = slice * k_tiles / slices;
  const int n_tiles = (slice + 1) * k_tiles / slices - kt_begin;
  const int m_valid = p.M < N ? static_cast<int>(p.M) : N;

  const auto* w = static_cast<const uint8_t*>(p.b);
  const auto* a = static_cast<const uint8_t*>(p.a);

  // Every thread runs the same number of copies, out-of-range ones as zero fills: wgmma is a warpgroup-wide
  // (.aligned) instruction, and the warps must arrive at it converged.
  auto load_tile = [&](int t, int stage) {
    const int64_t k0 = static_cast<int64_t>(kt_begin + t) * kTileK;
#pragma unroll
    for (int i = 0; i < Rows * 8 / kThreads; ++i) {  // Rows x 8 pieces of 16 bytes
      const int c = tid + i * kThreads, r = c / 8, piece = c % 8;
      const int64_t row = row0 + r, k = k0 + piece * 16;
      const bool in = row < p.N && k < p.K;  // K is a multiple of 16: a piece is whole or absent
      const uint32_t off = typename Cfg::SmemLayoutA{}(r, piece * 16, stage);
      copy_16(smem_a_addr + off, in ? w + row * p.ldb + k : w, in ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < N * 8 / kThreads; ++i) {  // N x 8 pieces; tokens beyond M are zeros
      const int c = tid + i * kThreads, token = c / 8, piece = c % 8;
      const int64_t k = k0 + piece * 16;
      const bool in = token < m_valid && k < p.K;
      const uint32_t off = typename Cfg::SmemLayoutB{}(token, piece * 16, stage);
      copy_16(smem_b_addr + off, in ? a + token * p.lda + k : a, in ? 16 : 0);
    }
  };

  Tensor sA = make_tensor(make_smem_ptr(reinterpret_cast<typename Cfg::ElementA*>(smem_a)),
                          typename Cfg::SmemLayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<ElementB*>(smem_b)), typename Cfg::SmemLayoutB{});
  typename Cfg::TiledMma mma;
  auto thr = mma.get_thread_slice(tid);
  Tensor tCrA = thr.make_fragment_A(thr.partition_A(sA));  // smem descriptors, (MMA, MMA_M, MMA_K, stage)
  Tensor tCrB = thr.make_fragment_B(thr.partition_B(sB));
  Tensor acc = partition_fragment_C(mma, Shape<Int<Rows>, Int<N>>{});
  clear(acc);
  mma.accumulate_ = GMMA::ScaleOut::One;

#pragma unroll
  for (int t = 0; t < kStages - 2; ++t) {
    if (t < n_tiles) load_tile(t, t);
    copy_commit();  // an empty group past the slice's end keeps the group count uniform
  }
  for (int t = 0; t < n_tiles; ++t) {
    copy_wait<kStages - 3>();  // tile t has landed (this thread's copies) ...
    fence_for_wgmma();
    __syncthreads();  // ... everyone's; and everyone's wgmma on tile t - 2 has retired (wait<1> below)
    if (t + kStages - 2 < n_tiles) load_tile(t + kStages - 2, (t + kStages - 2) % kStages);
    copy_commit();
    const int stage = t % kStages;
    __syncwarp();
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
#pragma unroll
    for (int kb = 0; kb < size<2>(tCrA); ++kb) {
      cute::gemm(mma, tCrA(_, _, kb, stage), tCrB(_, _, kb, stage), acc);
    }
    warpgroup_commit_batch();
    warpgroup_wait<1>();
    warpgroup_fence_operand(acc);
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);
  copy_wait<0>();
  __syncthreads();  // the stages are free: the slice sums go there

  float* red = reinterpret_cast<float*>(smem);
  Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<Rows>, Int<N>>{}));
#pragma unroll
  for (int i = 0; i < size(acc); ++i) {
    const int r = get<0>(coord(i)), token = get<1>(coord(i));
    red[token * Cfg::kRedStride + r] = acc(i);
  }

  // Each CTA of the cluster finishes Rows / slices rows, reading every slice's sums in rank order.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rows_per_rank = Rows / slices;
  for (int idx = tid; idx < rows_per_rank * m_valid; idx += kThreads) {
    const int token = idx / rows_per_rank;
    const int r = slice * rows_per_rank + idx % rows_per_rank;
    const int64_t j = row0 + r;
    if (j < p.N) {
      const int at = token * Cfg::kRedStride + r;
      float sum = cluster.map_shared_rank(red, 0)[at];
      for (int q = 1; q < slices; ++q) sum += cluster.map_shared_rank(red, q)[at];
      decode::store_output<Out>(p, token, j, sum);
    }
  }
  cluster.sync();  // no CTA leaves while another still reads its shared memory
}

template <typename Out, class ElementB, int Rows, int N>
cudaError_t launch_variant(const GemmParams& p, int slices) {
  using Cfg = WgConfig<ElementB, Rows, N>;
  auto kernel = gemv_wg_kernel<Out, ElementB, Rows, N>;
  // Beyond 48 KB of dynamic shared memory needs an opt-in, once per device.
  static std::atomic<bool> opted_in[kMaxDevices] = {};
  if (p.device_id < 0 || p.device_id >= kMaxDevices) return cudaErrorInvalidDevice;
  if (!opted_in[p.device_id].load(std::memory_order_acquire)) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
    if (err != cudaSuccess) return err;
    opted_in[p.device_id].store(true, std::memory_order_release);
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(slices), static_cast<unsigned>((p.N + Rows - 1) / Rows));
  config.blockDim = dim3(Cfg::kThreads);
  config.dynamicSmemBytes = Cfg::kSmemBytes;
  config.stream = p.stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(slices);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, p, slices);
}

template <typename Out, class ElementB, int Rows>
cudaError_t launch_tokens(const GemmParams& p, int slices) {
  if (p.M <= 32) return launch_variant<Out, ElementB, Rows, 32>(p, slices);
  if (p.M <= 64) return launch_variant<Out, ElementB, Rows, 64>(p, slices);
  return launch_variant<Out, ElementB, Rows, 128>(p, slices);
}

template <typename Out, int Rows, int S>
LaunchResult launch_gemv_wg(const GemmParams& p) {
  static_assert(Rows % S == 0, "each CTA of a cluster finishes whole rows");
  if (p.M < 1 || p.M > kMaxM) return {false, "gemv_wg", "M must be between 1 and 128 for the gemv_wg kernels"};
  const cudaError_t err = p.a_is_e5m2 ? launch_tokens<Out, cutlass::float_e5m2_t, Rows>(p, S)
                                      : launch_tokens<Out, cutlass::float_e4m3_t, Rows>(p, S);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

template <int Rows, int S>
bool register_variant(const char* name) {
  return register_kernel(
      {name, decode::tensor_core_traits(kMaxM), &launch_gemv_wg<__nv_bfloat16, Rows, S>, &decode::no_workspace});
}

// gemv_wg_m128_r<rows per CTA>_s<K slices = cluster size>. The slice count only sets the launch, so the variants
// share two compiled kernels per token count; the dispatch table carries the measured best per shape. bf16 output
// only: the decode rows of the table are bf16.
const bool kRegistered = register_variant<64, 1>("gemv_wg_m128_r64_s1_fast_bf16") &&
                         register_variant<64, 2>("gemv_wg_m128_r64_s2_fast_bf16") &&
                         register_variant<64, 4>("gemv_wg_m128_r64_s4_fast_bf16") &&
                         register_variant<128, 1>("gemv_wg_m128_r128_s1_fast_bf16") &&
                         register_variant<128, 2>("gemv_wg_m128_r128_s2_fast_bf16") &&
                         register_variant<128, 4>("gemv_wg_m128_r128_s4_fast_bf16") &&
                         register_variant<128, 8>("gemv_wg_m128_r128_s8_fast_bf16");

}  // namespace
}  // namespace fp8ext::sm90
