// Decode-sized block-scaled GEMV: M <= 4 tokens against an fp8 weight with 1 x 128 / 128 x 128 scales, bound by
// the weight read from HBM (blockwise_gemm.h has the contract):
//
//     out[i, j] = round_to_out( acc[i, j] + bias[j] )                                         fp32
//     acc[i, j] = sum over 16-wide K chunks c of  (scale_a(i, g) * scale_b(g, j / 128)) * sum_{k in c} a[i, k] w[j, k]
//                 with g = c / 128 the chunk's K group (a chunk never straddles two groups)
//
// The structure of gemv_rowwise.cu: one warp per two weight rows, lanes striding K in 16-byte chunks with two
// chunks in flight per row, fp32 products and sums, shuffles to reduce. The scales enter once per chunk: its
// 16-product sum is multiplied by the group's scale product (read through the runtime strides; they stay in L1)
// and added to the running fp32 sum. The CUTLASS kernels waste most of a 64-row wgmma at M <= 4 and run their K
// tiles in sequence; this kernel puts every SM on the weight.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "sm90/blockwise_gemm.h"
#include "sm90/decode_common.cuh"

namespace fp8ext::sm90 {
namespace {

constexpr int kMaxM = 4;
constexpr int kWarps = 8;        // warps per block
constexpr int kRowsPerWarp = 2;  // weight rows per warp; row0 is even, so both rows are in one 128-row block
constexpr int kChunk = 16;       // bytes per lane per load
constexpr int kUnroll = 2;       // K chunks per lane per loop iteration

template <typename Out, int M>
__global__ void __launch_bounds__(kWarps * 32) blockwise_gemv_kernel(BlockwiseParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  if (row0 >= p.N) return;
  const auto* a = static_cast<const uint8_t*>(p.a);
  const auto* w = static_cast<const uint8_t*>(p.b);
  const bool row_valid[kRowsPerWarp] = {true, row0 + 1 < p.N};
  const float* sb_block = p.scale_b + (row0 / kBlockwiseBlockN) * p.sb_stride_n;  // this warp's 128-row block

  float acc[M][kRowsPerWarp] = {};
  for (int64_t k_base = static_cast<int64_t>(lane) * kChunk; k_base < p.K; k_base += 32 * kChunk * kUnroll) {
    uint4 wv[kUnroll][kRowsPerWarp];
    uint4 av[kUnroll][M];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k_base + static_cast<int64_t>(u) * 32 * kChunk;
      const bool in_k = k < p.K;  // K is a multiple of 16, so a chunk is either whole or absent
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        wv[u][r] = (in_k && row_valid[r]) ? decode::load_streaming(w + (row0 + r) * p.ldb + k) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        av[u][m] = in_k ? __ldg(reinterpret_cast<const uint4*>(a + m * p.lda + k)) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k_base + static_cast<int64_t>(u) * 32 * kChunk;
      if (k >= p.K) break;  // the chunk is absent: nothing to add, and its scales would be out of range
      const int64_t g = k / kBlockwiseGroupK;
      const float sb = __ldg(sb_block + g * p.sb_stride_g);
      float wf[kRowsPerWarp][16];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) decode::fp8x16_to_float<__NV_E4M3>(wv[u][r], wf[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float af[16];
        decode::fp8x16_to_float<__NV_E4M3>(av[u][m], af);
        const float s = __ldg(p.scale_a + m * p.sa_stride_m + g * p.sa_stride_g) * sb;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          float part = 0.0f;
#pragma unroll
          for (int e = 0; e < 16; ++e) part = fmaf(af[e], wf[r][e], part);
          acc[m][r] = fmaf(s, part, acc[m][r]);
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], offset);
    }
  }
  // Lane (m * kRowsPerWarp + r) writes out[m, row0 + r].
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      if (lane == m * kRowsPerWarp + r && row_valid[r]) {
        const int64_t j = row0 + r;
        const float bias = p.bias != nullptr ? decode::to_float(static_cast<const Out*>(p.bias)[j]) : 0.0f;
        static_cast<Out*>(p.out)[m * p.ldo + j] = decode::from_float<Out>(acc[m][r] + bias);
      }
    }
  }
}

template <typename Out>
LaunchResult launch_blockwise_gemv(const BlockwiseParams& p) {
  if (p.M < 1 || p.M > kMaxM || p.N < 1 || p.K < 1) {
    return {false, "gemv", "M must be between 1 and 4, and N and K positive, for the block-scaled gemv"};
  }
  const int64_t rows_per_block = kWarps * kRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((p.N + rows_per_block - 1) / rows_per_block));
  const dim3 block(kWarps * 32);
  switch (p.M) {
    case 1: blockwise_gemv_kernel<Out, 1><<<grid, block, 0, p.stream>>>(p); break;
    case 2: blockwise_gemv_kernel<Out, 2><<<grid, block, 0, p.stream>>>(p); break;
    case 3: blockwise_gemv_kernel<Out, 3><<<grid, block, 0, p.stream>>>(p); break;
    default: blockwise_gemv_kernel<Out, 4><<<grid, block, 0, p.stream>>>(p); break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

size_t no_workspace(const BlockwiseParams&) { return 0; }

constexpr BlockwiseTraits gemv_traits(OutType out) {
  return BlockwiseTraits{0, 0, 0, 1, 1, Schedule::kGemv, out, false, kMaxM};
}

const bool kRegistered =
    register_blockwise_kernel({"bw_gemv_m4_bf16", gemv_traits(OutType::kBF16), &launch_blockwise_gemv<__nv_bfloat16>,
                               &no_workspace}) &&
    register_blockwise_kernel({"bw_gemv_m4_fp16", gemv_traits(OutType::kFP16), &launch_blockwise_gemv<__half>,
                               &no_workspace}) &&
    register_blockwise_kernel({"bw_gemv_m4_fp32", gemv_traits(OutType::kFP32), &launch_blockwise_gemv<float>,
                               &no_workspace});

}  // namespace
}  // namespace fp8ext::sm90
