// Decode-sized GEMV: M <= 4 tokens against an fp8 weight, bound by the weight read from HBM.
//
//     out[i, j] = round_to_out( fma( scale_a[i] * scale_b[j], acc[i, j], bias[j] ) )      (fp32, as the EVT)
//     acc[i, j] = sum_k float(a[i, k]) * float(w[j, k]),   w[j, :] = column j of b (K contiguous bytes)
//
// Why not the tensor cores: with M <= 4 a 64-row wgmma does at most 4 useful rows, and the time is the weight
// read plus a fixed launch/prologue cost. This kernel streams the weight with 16-byte loads, one warp per two
// weight rows, lanes striding K in 16-byte chunks (two chunks in flight per row), and reduces with shuffles.
// Products and sums are fp32 FMAs, so it is at least as precise as either tensor-core accumulation mode and
// is registered as "precise" (which also serves fast-accumulation calls).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "sm90/decode_common.cuh"
#include "sm90/gemm_params.h"
#include "sm90/kernel_registry.h"

namespace fp8ext::sm90 {
namespace {

constexpr int kMaxM = 4;
constexpr int kWarps = 8;        // warps per block
constexpr int kRowsPerWarp = 2;  // weight rows per warp: enough warps for small N, two loads in flight per chunk
constexpr int kChunk = 16;       // bytes per lane per load
constexpr int kUnroll = 2;       // K chunks per lane per loop iteration

template <typename Out, __nv_fp8_interpretation_t KindA, int M>
__global__ void __launch_bounds__(kWarps * 32) gemv_rowwise_kernel(GemmParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  if (row0 >= p.N) return;
  const auto* a = static_cast<const uint8_t*>(p.a);
  const auto* w = static_cast<const uint8_t*>(p.b);
  const bool row_valid[kRowsPerWarp] = {true, row0 + 1 < p.N};

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
      float wf[kRowsPerWarp][16];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) decode::fp8x16_to_float<__NV_E4M3>(wv[u][r], wf[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float af[16];
        decode::fp8x16_to_float<KindA>(av[u][m], af);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
          for (int e = 0; e < 16; ++e) acc[m][r] = fmaf(af[e], wf[r][e], acc[m][r]);
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
      if (lane == m * kRowsPerWarp + r && row_valid[r]) decode::store_output<Out>(p, m, row0 + r, acc[m][r]);
    }
  }
}

template <typename Out, __nv_fp8_interpretation_t KindA>
cudaError_t launch_m(const GemmParams& p) {
  const int64_t rows_per_block = kWarps * kRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((p.N + rows_per_block - 1) / rows_per_block));
  const dim3 block(kWarps * 32);
  switch (p.M) {
    case 1: gemv_rowwise_kernel<Out, KindA, 1><<<grid, block, 0, p.stream>>>(p); break;
    case 2: gemv_rowwise_kernel<Out, KindA, 2><<<grid, block, 0, p.stream>>>(p); break;
    case 3: gemv_rowwise_kernel<Out, KindA, 3><<<grid, block, 0, p.stream>>>(p); break;
    case 4: gemv_rowwise_kernel<Out, KindA, 4><<<grid, block, 0, p.stream>>>(p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename Out>
LaunchResult launch_gemv(const GemmParams& p) {
  if (p.M < 1 || p.M > kMaxM) return {false, "gemv", "M must be between 1 and 4 for the gemv kernel"};
  const cudaError_t err = p.a_is_e5m2 ? launch_m<Out, __NV_E5M2>(p) : launch_m<Out, __NV_E4M3>(p);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

constexpr KernelTraits gemv_traits(OutType out) {
  KernelTraits t{};
  t.schedule = Schedule::kGemv;
  t.accum = Accum::kPrecise;
  t.out = out;
  t.in_a = InType::kE4M3;
  t.any_in_a = true;
  t.max_m = kMaxM;
  return t;
}

const bool kRegistered = register_kernel({"gemv_m4_precise_bf16", gemv_traits(OutType::kBF16),
                                          &launch_gemv<__nv_bfloat16>, &decode::no_workspace}) &&
                         register_kernel({"gemv_m4_precise_fp16", gemv_traits(OutType::kFP16),
                                          &launch_gemv<__half>, &decode::no_workspace}) &&
                         register_kernel({"gemv_m4_precise_fp32", gemv_traits(OutType::kFP32),
                                          &launch_gemv<float>, &decode::no_workspace});

}  // namespace
}  // namespace fp8ext::sm90
