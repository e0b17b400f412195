// Row-wise FP8 quantization: the numerics that the CPU path (quantize_rowwise_op.cpp) and the CUDA kernel
// (quantize_rowwise.cu) share, and the plain-C++ interface of the kernel's launcher. No libtorch here.
//
// For each row x[r, :] of K values (computed in float32):
//   amax  = max |x[r, k]|;  amax = min(amax, scale_ub) if scale_ub is given;  amax = max(amax, 1e-12)
//   scale = amax / FP8_MAX                       (448 for e4m3fn, 57344 for e5m2)
//   inv   = FP8_MAX / amax
//   q[r, k] = fp8(clamp(x[r, k] * inv, -FP8_MAX, FP8_MAX))   (round to nearest even)
// so that q * scale approximates x. Each element costs one multiplication by the row's inv, not a division (an
// IEEE float32 division is about ten instructions, and at that cost the kernel is bound by instruction issue, not
// by memory). A NaN in a row makes its amax, its scale and every q of it NaN; the comparisons below are written so
// that both paths propagate it the same way (fminf/fmaxf would drop it).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FP8EXT_HOST_DEVICE __host__ __device__
#else
#define FP8EXT_HOST_DEVICE
#endif

namespace fp8ext {

// The smallest amax: an all-zero row gets a finite, nonzero scale (and all-zero q) instead of 0 / 0.
constexpr float kQuantizeMinAmax = 1e-12f;
constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;

// max(a, |v|), NaN-propagating: once a NaN is seen the result stays NaN, with its sign bit cleared (+NaN), as the
// kernels' amax, which comes from integer keys with the sign cleared.
FP8EXT_HOST_DEVICE inline float abs_max_nan(float a, float v) {
  const float m = fabsf(v);  // also a NaN's magnitude: v < 0 ? -v : v would keep a negative NaN's sign
  return (m > a || m != m) ? m : a;
}

// The row's amax after the bound and the floor (scale_ub <= 0 means none was given; validation admits only finite
// ub > 0): scale = amax / fp8_max and inv = fp8_max / amax.
FP8EXT_HOST_DEVICE inline float rowwise_amax(float amax, float scale_ub) {
  if (scale_ub > 0.0f && amax > scale_ub) amax = scale_ub;
  if (amax < kQuantizeMinAmax) amax = kQuantizeMinAmax;
  return amax;
}

// x * inv clamped to the finite FP8 range (NaN passes through), before the round-to-nearest-even cast.
FP8EXT_HOST_DEVICE inline float rowwise_scaled(float x, float inv, float fp8_max) {
  const float v = x * inv;
  return v > fp8_max ? fp8_max : (v < -fp8_max ? -fp8_max : v);
}

enum class QuantSrc : uint8_t { kBF16, kFP16, kFP32 };
enum class QuantDst : uint8_t { kE4M3, kE5M2 };

// One call: `rows` rows of K elements. Row r starts at element
//   (r / inner_rows) * outer_stride + (r % inner_rows) * inner_stride
// of x (a 2-D [M, K] tensor is inner_rows = M, outer_stride = 0; a 3-D [B, S, K] one is inner_rows = S); the
// last dimension is contiguous. q is a contiguous [rows, K] byte buffer, scale a contiguous [rows] float buffer.
struct QuantizeRowwiseParams {
  const void* x = nullptr;
  QuantSrc src = QuantSrc::kBF16;
  int64_t rows = 0, K = 0;
  int64_t inner_rows = 1, outer_stride = 0, inner_stride = 0;  // in elements
  void* q = nullptr;
  QuantDst dst = QuantDst::kE4M3;
  float* scale = nullptr;
  float scale_ub = 0.0f;  // <= 0: none
  // Gated (fp8ext.silu_mul_quantize_rowwise): x's row holds 2K values, the gate then the up half, and the row
  // quantized is y = silu(gate) * up as torch computes it in x's dtype (silu_mul below), K values.
  bool gated = false;
  // Gathered (fp8ext.moe_dispatch): row r of q is row row_index[r] of x (the layout above), when given.
  const int32_t* row_index = nullptr;
};

// One element of a gated row, as torch's silu and mul compute it: each in float32 and rounded to the input type
// (`round` returns its argument in that type, as a float): silu(g) = g / (1 + exp(-g)), then silu(g) * u.
template <typename Round>
FP8EXT_HOST_DEVICE inline float silu_mul(float g, float u, Round round) {
  const float s = round(g / (1.0f + expf(-g)));
  return round(s * u);
}

}  // namespace fp8ext

#if defined(FP8EXT_WITH_CUDA)
#include <cuda_runtime_api.h>

namespace fp8ext {
// Launches the kernel on `stream` (nothing for rows == 0) and returns the launch's error. Allocates nothing.
cudaError_t launch_quantize_rowwise(const QuantizeRowwiseParams& p, cudaStream_t stream);
}  // namespace fp8ext
#endif
