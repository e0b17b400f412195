// The fused row-wise FP8 quantization kernel: per-row amax, scale and cast in one launch (numerics in
// quantize_rowwise.h). Plain CUDA; the libtorch entry is quantize_rowwise_cuda.cpp.
//
// kThreadsPerRow threads share a row: pass 1 reads it with 16-byte loads and reduces |x| to the row's amax
// (warp shuffles, then shared memory across the row's warps); pass 2 reads it again, from L1/L2, and writes q.
// The width is chosen so that the rows in flight on the whole GPU fit in L2 and pass 2 does not go back to HBM:
// a warp per row for rows up to 2 KiB (64 warps per SM keep 128 KiB in flight, about L1's size), 128 threads up
// to 8 KiB, else 512 threads (4 rows per SM, 132 x 4 x 56 KiB = 30 MiB for a 28672-wide bf16 row).
#include <climits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "quantize_rowwise.h"

namespace fp8ext {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }

// kVec elements loaded as one access: 16 bytes when the rows are 16-byte aligned, else one element.
template <typename In, int kVec>
struct alignas(sizeof(In) * kVec) InPack {
  In v[kVec];
};
template <int kVec>
struct alignas(kVec) OutPack {
  __nv_fp8_storage_t v[kVec];
};

template <__nv_fp8_interpretation_t kFormat, int kVec>
__device__ __forceinline__ OutPack<kVec> to_fp8(const float (&v)[kVec]) {
  OutPack<kVec> out;
  // Round to nearest even; SATFINITE only matters for NaN (kept NaN), as the values are clamped already.
  if constexpr (kVec % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 2) {
      const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(make_float2(v[i], v[i + 1]), __NV_SATFINITE, kFormat);
      out.v[i] = static_cast<__nv_fp8_storage_t>(pair & 0xff);
      out.v[i + 1] = static_cast<__nv_fp8_storage_t>(pair >> 8);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) out.v[i] = __nv_cvt_float_to_fp8(v[i], __NV_SATFINITE, kFormat);
  }
  return out;
}

template <typename In, __nv_fp8_interpretation_t kFormat, int kVec, int kThreadsPerRow>
__global__ void __launch_bounds__(kThreadsPerRow < 256 ? 256 : kThreadsPerRow)
    quantize_rowwise_kernel(QuantizeRowwiseParams p) {
  constexpr int kThreads = kThreadsPerRow < 256 ? 256 : kThreadsPerRow;
  constexpr int kRowsPerCta = kThreads / kThreadsPerRow;
  constexpr int kWarpsPerRow = kThreadsPerRow / 32;
  constexpr float kMax = kFormat == __NV_E4M3 ? kE4M3Max : kE5M2Max;
  using Pack = InPack<In, kVec>;
  __shared__ float warp_amax[kRowsPerCta][kWarpsPerRow];

  const int row_in_cta = threadIdx.x / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t nvec = p.K / kVec;
  const int64_t groups = (p.rows + kRowsPerCta - 1) / kRowsPerCta;
  // Every thread of the CTA runs the same iterations (rows past the end only skip the memory work), so the
  // __syncthreads() of the cross-warp reduction is reached by all of them.
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const int64_t r = g * kRowsPerCta + row_in_cta;
    const bool active = r < p.rows;
    const Pack* x = nullptr;
    float amax = 0.0f;
    if (active) {
      x = reinterpret_cast<const Pack*>(static_cast<const In*>(p.x) + (r / p.inner_rows) * p.outer_stride +
                                        (r % p.inner_rows) * p.inner_stride);
#pragma unroll 4
      for (int64_t i = lane; i < nvec; i += kThreadsPerRow) {
        const Pack v = x[i];
#pragma unroll
        for (int j = 0; j < kVec; ++j) amax = abs_max_nan(amax, to_float(v.v[j]));
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) amax = abs_max_nan(amax, __shfl_xor_sync(kFullMask, amax, offset));
    if constexpr (kWarpsPerRow > 1) {
      if (lane % 32 == 0) warp_amax[row_in_cta][lane / 32] = amax;
      __syncthreads();
#pragma unroll
      for (int w = 0; w < kWarpsPerRow; ++w) amax = abs_max_nan(amax, warp_amax[row_in_cta][w]);
      __syncthreads();  // the next iteration overwrites warp_amax
    }
    if (!active) continue;
    const float scale = rowwise_scale(amax, p.scale_ub, kMax);
    if (lane == 0) p.scale[r] = scale;
    OutPack<kVec>* q = reinterpret_cast<OutPack<kVec>*>(static_cast<__nv_fp8_storage_t*>(p.q) + r * p.K);
#pragma unroll 4
    for (int64_t i = lane; i < nvec; i += kThreadsPerRow) {
      const Pack v = x[i];
      float f[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) f[j] = rowwise_scaled(to_float(v.v[j]), scale, kMax);
      q[i] = to_fp8<kFormat, kVec>(f);
    }
  }
}

template <typename In, __nv_fp8_interpretation_t kFormat, int kVec, int kThreadsPerRow>
cudaError_t launch_with(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  constexpr int kThreads = kThreadsPerRow < 256 ? 256 : kThreadsPerRow;
  constexpr int kRowsPerCta = kThreads / kThreadsPerRow;
  const int64_t groups = (p.rows + kRowsPerCta - 1) / kRowsPerCta;
  const unsigned grid = static_cast<unsigned>(groups < INT_MAX ? groups : INT_MAX);
  quantize_rowwise_kernel<In, kFormat, kVec, kThreadsPerRow><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename In, __nv_fp8_interpretation_t kFormat, int kVec>
cudaError_t launch_width(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  const int64_t row_bytes = p.K * static_cast<int64_t>(sizeof(In));
  if (row_bytes <= 2048) return launch_with<In, kFormat, kVec, 32>(p, stream);
  if (row_bytes <= 8192) return launch_with<In, kFormat, kVec, 128>(p, stream);
  return launch_with<In, kFormat, kVec, 512>(p, stream);
}

template <typename In, __nv_fp8_interpretation_t kFormat>
cudaError_t launch_typed(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  // 16-byte loads need every row start 16-byte aligned: the base address and both row strides. K is a multiple
  // of 16, so 16 bytes never straddle a row's end.
  constexpr int64_t kVec16 = 16 / sizeof(In);
  const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.outer_stride % kVec16 == 0 &&
                       p.inner_stride % kVec16 == 0;
  return aligned ? launch_width<In, kFormat, kVec16>(p, stream) : launch_width<In, kFormat, 1>(p, stream);
}

template <__nv_fp8_interpretation_t kFormat>
cudaError_t launch_format(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  switch (p.src) {
    case QuantSrc::kBF16: return launch_typed<__nv_bfloat16, kFormat>(p, stream);
    case QuantSrc::kFP16: return launch_typed<__half, kFormat>(p, stream);
    case QuantSrc::kFP32: return launch_typed<float, kFormat>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_quantize_rowwise(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  if (p.rows == 0) return cudaSuccess;
  return p.dst == QuantDst::kE4M3 ? launch_format<__NV_E4M3>(p, stream) : launch_format<__NV_E5M2>(p, stream);
}

}  // namespace fp8ext
