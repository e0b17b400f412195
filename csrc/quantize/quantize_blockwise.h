// Block-wise FP8 quantization of activations, one scale per 1 x 128 group of a row (DeepSeek-V3's and torch's
// BlockWise1x128 recipe): the numerics that the CPU path (quantize_blockwise_op.cpp) and the CUDA kernel
// (quantize_blockwise.cu) share, and the plain-C++ interface of the kernel's launcher. No libtorch here.
//
// For each group x[m, 128 g : 128 g + 128] (the last group of a row may be shorter, a multiple of 16), in float32:
//   amax  = max(max |x| over the group, 1e-12)
//   scale[m, g] = amax / FP8_MAX                  (448 for e4m3fn, 57344 for e5m2)
//   q[m, k] = fp8(clamp(x[m, k] * (FP8_MAX / amax), -FP8_MAX, FP8_MAX))   (round to nearest even)
// which is quantize_rowwise.h's formula with a group in place of a row (and no bound on amax), computed with the
// same helpers, so the two share their rounding and their NaN rule: a NaN makes its group's scale and every q of
// the group NaN. The scales are stored group-major, scale[g * M + m]: the (M, G) tensor with strides (1, M) that
// fp8ext.scaled_mm and torch._scaled_mm take as a block-wise scale_a.
#pragma once

#include <cstdint>

#include "quantize/quantize_rowwise.h"

namespace fp8ext {

constexpr int64_t kQuantizeGroup = 128;

// One call: x is [M, K] with rows `row_stride` elements apart and a contiguous last dimension; q a contiguous
// [M, K] byte buffer; scale a contiguous [G, M] float buffer, G = ceil(K / 128). K is a positive multiple of 16.
struct QuantizeBlockwiseParams {
  const void* x = nullptr;
  QuantSrc src = QuantSrc::kBF16;
  int64_t M = 0, K = 0, row_stride = 0;  // in elements
  void* q = nullptr;
  QuantDst dst = QuantDst::kE4M3;
  float* scale = nullptr;
};

}  // namespace fp8ext

#if defined(FP8EXT_WITH_CUDA)
#include <cuda_runtime_api.h>

namespace fp8ext {
// Launches the kernel on `stream` (nothing for M == 0) and returns the launch's error. Allocates nothing.
cudaError_t launch_quantize_blockwise(const QuantizeBlockwiseParams& p, cudaStream_t stream);
}  // namespace fp8ext
#endif
