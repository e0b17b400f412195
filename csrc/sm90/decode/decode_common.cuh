// What the hand-written decode kernels (gemv_rowwise.cu, gemv_tensor_core.cu, bw_gemv_m4.cu)
// share: the fp8 unpacking, the streaming weight load and the (row-wise) epilogue, which in the user's frame is
//
//     out[i, j] = round_to_out( fma( scale_a[i] * scale_b[j], acc[i, j], bias[j] ) )          all in fp32
//
// the same operations in the same order as the CUTLASS kernels' EVT (rowwise_epilogue.cuh), so a decode kernel
// and a CUTLASS kernel that reach the same fp32 accumulator write the same bits. Plain CUDA: no CUTLASS, no
// libtorch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstddef>
#include <cstdint>

#include "sm90/common/gemm_params.h"

namespace fp8ext::sm90::decode {

// 16 fp8 values (one 16-byte load) as floats; exact, since every fp8 value is a half.
template <__nv_fp8_interpretation_t Kind>
__device__ __forceinline__ void fp8x16_to_float(const uint4& v, float (&f)[16]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(words[w] >> (16 * h));
      const __half2 hv = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, Kind));
      const float2 fv = __half22float2(hv);
      f[4 * w + 2 * h] = fv.x;
      f[4 * w + 2 * h + 1] = fv.y;
    }
  }
}

// The weight is read once: a streaming load (ld.global.cs, evict-first) keeps it from displacing the
// activations, which every warp re-reads, in L1 and L2.
__device__ __forceinline__ uint4 load_streaming(const void* p) { return __ldcs(static_cast<const uint4*>(p)); }

template <typename Out> __device__ __forceinline__ Out from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }

template <typename Out> __device__ __forceinline__ float to_float(Out x);
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<float>(float x) { return x; }

// Writes out[i, j] from its fp32 accumulator; Out is the kernel's output element type.
template <typename Out>
__device__ __forceinline__ void store_output(const GemmParams& p, int64_t i, int64_t j, float acc) {
  const float sa = p.scale_a[p.scale_a_per_row ? i : 0];
  const float sb = p.scale_b[p.scale_b_per_col ? j : 0];
  const float bias = p.bias != nullptr ? to_float(static_cast<const Out*>(p.bias)[j]) : 0.0f;
  static_cast<Out*>(p.out)[i * p.ldo + j] = from_float<Out>(fmaf(sa * sb, acc, bias));
}

// The row-wise decode kernels' policy (gemv_cuda_core.cuh, gemv_tensor_core.cuh): the scales and bias enter
// once, at the store; the block-scaled hooks are never called (kBlockScaled is false).
struct RowwisePolicy {
  using Params = GemmParams;
  static constexpr bool kBlockScaled = false;
  template <typename Out>
  __device__ static void store(const GemmParams& p, int64_t i, int64_t j, float acc) {
    store_output<Out>(p, i, j, acc);
  }
  __device__ static const float* weight_scales(const GemmParams&, int64_t) { return nullptr; }
  __device__ static float chunk_scale(const GemmParams&, int, int64_t, const float*) { return 1.0f; }
  __device__ static float token_scale(const GemmParams&, int, int64_t) { return 1.0f; }
  __device__ static float weight_scale(const GemmParams&, int64_t, int64_t) { return 1.0f; }
};

// The decode kernels need no global-memory workspace (the registry entry's workspace_size).
inline size_t no_workspace(const GemmParams&) { return 0; }

}  // namespace fp8ext::sm90::decode
