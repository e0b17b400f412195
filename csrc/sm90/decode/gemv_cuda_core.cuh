// The CUDA-core decode GEMV of both families: M <= 4 tokens against an fp8 weight, bound by the weight read from
// HBM. Row-wise (gemv_rowwise.cu) and block-scaled (bw_gemv_m4.cu) differ only in where the
// scales enter, which a Policy says:
//
//   row-wise:      acc[i, j] = sum_k float(a[i, k]) * float(w[j, k]),  scaled in Policy::store (the EVT's maths)
//   block-scaled:  acc[i, j] = sum over 16-wide K chunks c of (scale_a(i, g) * scale_b(g, j / 128)) * partial_c,
//                  partial_c = sum_{k in c} a[i, k] * w[j, k],  g = c / 128 (a chunk never straddles two groups)
//
// w[j, :] is column j of b. Why not the tensor cores: with M <= 4 a 64-row wgmma does at most 4 useful rows, and
// the time is the weight read plus a fixed launch/prologue cost. The kernel streams the weight with 16-byte
// loads, one warp per two weight rows, lanes striding K in 16-byte chunks (two chunks in flight per row), and
// reduces with shuffles. Products and sums are fp32 FMAs, at least as precise as either tensor-core accumulation
// mode, so the row-wise kernels are registered as "precise" (which also serves fast-accumulation calls).
//
// A Policy has: Params (GemmParams or BlockwiseParams: M, N, K, a, lda, b, ldb, stream), kBlockScaled, and
//   store<Out>(p, i, j, acc)                       writes out[i, j]
//   chunk_scale(p, i, k, weight_scales)            (block-scaled) the scale product of token i's chunk at k
//   weight_scales(p, row0)                         (block-scaled) where row0's 128-row block keeps its scales
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "sm90/common/grid_dependency.cuh"
#include "sm90/decode/decode_common.cuh"

namespace fp8ext::sm90::gemv {

constexpr int kMaxM = 4;
constexpr int kWarps = 8;        // warps per block
constexpr int kRowsPerWarp = 2;  // weight rows per warp; row0 is even, so both rows are in one 128-row block
constexpr int kChunk = 16;       // bytes per lane per load
constexpr int kUnroll = 2;       // K chunks per lane per loop iteration

template <class Policy, typename Out, __nv_fp8_interpretation_t KindA, int M>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(typename Policy::Params p, int prefetch_blocks) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  if (row0 >= p.N) return;
  const auto* a = static_cast<const uint8_t*>(p.a);
  const auto* w = static_cast<const uint8_t*>(p.b);
  const bool row_valid[kRowsPerWarp] = {true, row0 + 1 < p.N};
  // Launched as a dependent of the activation quantize (grid_dependency.cuh): while it may still run, lane r asks
  // the L2 for the start of weight row row0 + r (the block's share of kPrefetchBytesPerBlock), in the first wave's
  // blocks; everything is read after the wait.
  constexpr int64_t kPrefetchPerRow = pdl::kPrefetchBytesPerBlock / (kWarps * kRowsPerWarp) / 16 * 16;
  if (static_cast<int>(blockIdx.x) < prefetch_blocks && lane < kRowsPerWarp && row0 + lane < p.N) {
    pdl::prefetch_l2(w + (row0 + lane) * p.ldb, static_cast<uint32_t>(p.K < kPrefetchPerRow ? p.K : kPrefetchPerRow));
  }
  pdl::wait_for_prior_grids();
  pdl::allow_dependent_grids();  // the next fp8ext kernel (a decode step's next quantize) may start waiting

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
      if constexpr (Policy::kBlockScaled) {
        if (k >= p.K) break;  // the chunk is absent: nothing to add, and its scales would be out of range
      }
      float wf[kRowsPerWarp][16];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) decode::fp8x16_to_float<__NV_E4M3>(wv[u][r], wf[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float af[16];
        decode::fp8x16_to_float<KindA>(av[u][m], af);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          if constexpr (Policy::kBlockScaled) {
            float part = 0.0f;
#pragma unroll
            for (int e = 0; e < 16; ++e) part = fmaf(af[e], wf[r][e], part);
            acc[m][r] = fmaf(Policy::chunk_scale(p, m, k, Policy::weight_scales(p, row0)), part, acc[m][r]);
          } else {
#pragma unroll
            for (int e = 0; e < 16; ++e) acc[m][r] = fmaf(af[e], wf[r][e], acc[m][r]);
          }
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
      if (lane == m * kRowsPerWarp + r && row_valid[r]) Policy::template store<Out>(p, m, row0 + r, acc[m][r]);
    }
  }
}

// Launches the kernel for p.M (1 to kMaxM; the caller checks), as a dependent (grid_dependency.cuh).
template <class Policy, typename Out, __nv_fp8_interpretation_t KindA>
cudaError_t launch(const typename Policy::Params& p) {
  const int64_t rows_per_block = kWarps * kRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((p.N + rows_per_block - 1) / rows_per_block));
  switch (p.M) {
    case 1: return pdl::launch_decode<gemv_kernel<Policy, Out, KindA, 1>>(p, grid, kWarps * 32);
    case 2: return pdl::launch_decode<gemv_kernel<Policy, Out, KindA, 2>>(p, grid, kWarps * 32);
    case 3: return pdl::launch_decode<gemv_kernel<Policy, Out, KindA, 3>>(p, grid, kWarps * 32);
    case 4: return pdl::launch_decode<gemv_kernel<Policy, Out, KindA, 4>>(p, grid, kWarps * 32);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fp8ext::sm90::gemv
