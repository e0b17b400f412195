// The element-wise maths of the row-wise FP8 quantization on the GPU (the formula is in quantize_rowwise.h): a
// pack's amax, and a pack scaled by the row's inv and cast. Shared by the quantize kernels (quantize_rowwise.cu)
// and the decode kernel that quantizes its activations as it loads them (sm90/decode_linear.cu), so that both
// produce the same bits. Plain CUDA.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "quantize_rowwise.h"

namespace fp8ext::quantize_device {

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
  // Round to nearest even; SATFINITE clamps to the finite range and keeps NaN.
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

template <__nv_fp8_interpretation_t kFormat>
constexpr float kFp8Max = kFormat == __NV_E4M3 ? kE4M3Max : kE5M2Max;

// max(amax, |v[0]|, ..., |v[kVec-1]|), NaN-propagating. 16-bit packs are reduced pairwise in their own type first
// (exact: the max of 16-bit values is one of them), so that the float conversions happen once, when the pack is
// scaled, and the kernel keeps only the raw packs live across the row's reduction.
template <typename In, int kVec>
__device__ __forceinline__ float pack_amax(float amax, const InPack<In, kVec>& v) {
  if constexpr (kVec >= 4 && (std::is_same_v<In, __nv_bfloat16> || std::is_same_v<In, __half>)) {
    using Pair = std::conditional_t<std::is_same_v<In, __nv_bfloat16>, __nv_bfloat162, __half2>;
    const Pair* pairs = reinterpret_cast<const Pair*>(v.v);
    auto pair = [&](int j) { return __habs2(pairs[j]); };
    auto m = pair(0);
#pragma unroll
    for (int j = 1; j < kVec / 2; ++j) m = __hmax2_nan(m, pair(j));
    return abs_max_nan(abs_max_nan(amax, __low2float(m)), __high2float(m));
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) amax = abs_max_nan(amax, to_float(v.v[j]));
    return amax;
  }
}

// q for one pack: x * inv, cast with round to nearest even. The cast saturates finite values and infinities to
// +-FP8_MAX and keeps NaN (SATFINITE), which is the formula's clamp: the CPU path clamps first, and both give the
// same bits.
template <typename In, __nv_fp8_interpretation_t kFormat, int kVec>
__device__ __forceinline__ OutPack<kVec> scaled_pack(const InPack<In, kVec>& v, float inv) {
  float f[kVec];
  if constexpr (std::is_same_v<In, __nv_bfloat16> && kVec % 2 == 0) {
    // bfloat16 is the top half of a float32: widen each half of the packed 32-bit words in place, which keeps the
    // pack in its 4 registers instead of one register per element.
    const uint32_t* w = reinterpret_cast<const uint32_t*>(v.v);
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      f[2 * j] = __uint_as_float(w[j] << 16) * inv;
      f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u) * inv;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[j] = to_float(v.v[j]) * inv;
  }
  return to_fp8<kFormat, kVec>(f);
}

}  // namespace fp8ext::quantize_device
