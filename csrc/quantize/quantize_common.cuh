// Device helpers shared by the fused quantization kernels (quantize_rowwise.cu, quantize_blockwise.cu): the amax
// as a max of integer keys, and the scaled cast to FP8. The formulas they serve are in quantize_rowwise.h and
// quantize_blockwise.h. Plain CUDA: no libtorch.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "quantize/quantize_rowwise.h"

namespace fp8ext {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
// v rounded to nearest even in T (bf16, fp16 or fp32): to_float's inverse.
template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return v;
  }
}

// |x| as an integer key: x's bits with the sign cleared. Keys of an IEEE format order as unsigned integers the way
// the values' |x| do, and every NaN's key is above +inf's, so the integer max of the keys is the key of the row's
// (or group's) amax with NaN propagated: max(|x|) is a few integer instructions a pack, with no float compares, and
// the threads sharing a row reduce it with redux.sync. Keys are 16-bit for bf16 and fp16 and 32-bit for fp32.
__device__ __forceinline__ uint32_t abs_key(__nv_bfloat16 v) { return __bfloat16_as_ushort(v) & 0x7fffu; }
__device__ __forceinline__ uint32_t abs_key(__half v) { return __half_as_ushort(v) & 0x7fffu; }
__device__ __forceinline__ uint32_t abs_key(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// The float value of a key: the row's (or group's) amax.
template <typename In>
__device__ __forceinline__ float key_value(uint32_t key) {
  if constexpr (std::is_same_v<In, __nv_bfloat16>) {
    return __uint_as_float(key << 16);  // bfloat16 is the top half of a float32
  } else if constexpr (std::is_same_v<In, __half>) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(key)));
  } else {
    return __uint_as_float(key);
  }
}

// q for two values, x * inv each, cast with round to nearest even: a in the low byte, b in the high byte. The cast
// saturates finite values and infinities to +-FP8_MAX and keeps NaN (SATFINITE), which is the formula's clamp: the
// CPU path clamps first, and both give the same bits.
template <__nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ uint32_t fp8x2(float a, float b, float inv) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a * inv, b * inv), __NV_SATFINITE, kFormat);
}

// q for one 32-bit word of 16-bit inputs: two values, two bytes.
template <typename In, __nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ uint32_t fp8x2_of_word(uint32_t w, float inv) {
  if constexpr (std::is_same_v<In, __nv_bfloat16>) {
    return fp8x2<kFormat>(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u), inv);
  } else {
    __half2 h;
    memcpy(&h, &w, sizeof(w));
    const float2 f = __half22float2(h);
    return fp8x2<kFormat>(f.x, f.y, inv);
  }
}

template <__nv_fp8_interpretation_t kFormat>
constexpr float kFp8Max = kFormat == __NV_E4M3 ? kE4M3Max : kE5M2Max;

// A launcher's dispatch on a call's input and FP8 types (Params has src and dst): returns
// launch.template operator()<In, kFormat>() for them, a templated lambda of the caller's.
template <class Params, class Launch>
cudaError_t launch_by_types(const Params& p, Launch&& launch) {
  const auto for_src = [&]<__nv_fp8_interpretation_t kFormat>() -> cudaError_t {
    switch (p.src) {
      case QuantSrc::kBF16: return launch.template operator()<__nv_bfloat16, kFormat>();
      case QuantSrc::kFP16: return launch.template operator()<__half, kFormat>();
      case QuantSrc::kFP32: return launch.template operator()<float, kFormat>();
    }
    return cudaErrorInvalidValue;
  };
  return p.dst == QuantDst::kE4M3 ? for_src.template operator()<__NV_E4M3>()
                                  : for_src.template operator()<__NV_E5M2>();
}

}  // namespace fp8ext
