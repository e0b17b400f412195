// fp8ext::linear_rowwise's decode kernel (decode_linear.cu): the activation quantize and the tensor-core GEMV in
// one launch. The plain-C++ interface between the libtorch entry (linear_rowwise_cuda.cpp) and the kernel.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace fp8ext::sm90 {

// out = quantize_rowwise(x) @ w.t(), scaled per row and per column, + bias: bf16 x, e4m3 w, bf16 out.
struct DecodeLinearParams {
  int64_t M = 0, N = 0, K = 0;  // x [M, K], w [N, K], out [M, N]; K a multiple of 16

  const void* x = nullptr;  // bf16, x(i, k) at x + i * ldx + k; every row start 16-byte aligned
  int64_t ldx = 0;          // in elements
  const void* b = nullptr;  // e4m3 weight, w(j, k) at b + j * ldb + k (the scaled_mm `b` = w.t(), column-major)
  int64_t ldb = 0;
  const float* scale_b = nullptr;  // N values, one per weight row
  const void* bias = nullptr;      // N bf16 values, or nullptr
  void* out = nullptr;             // bf16, out(i, j) at out + i * ldo + j
  int64_t ldo = 0;

  int sm_count = 0;
  cudaStream_t stream = nullptr;
};

// The most tokens the kernel takes, and the most shared memory its quantized activations may fill: M rows of
// K + 16 bytes (the 16-byte pad puts consecutive rows in different banks), so that two blocks fit on an SM.
constexpr int64_t kDecodeLinearMaxM = 32;
constexpr int64_t kDecodeLinearMaxSmem = 96 * 1024;
__host__ __device__ constexpr int64_t decode_linear_row_bytes(int64_t K) { return K + 16; }
__host__ __device__ constexpr bool decode_linear_fits(int64_t M, int64_t K) {
  return M >= 1 && M <= kDecodeLinearMaxM && M * decode_linear_row_bytes(K) <= kDecodeLinearMaxSmem;
}

// Launches the kernel with `slices` K slices per weight row group (4 or 8: the twins of the scaled_mm kernels
// gemv_tc_m32_r16_s4 and _s8, whose sums it reproduces bit for bit) on p.stream, as a programmatic dependent
// (grid_dependency.cuh). Allocates nothing. Returns the launch's error, or cudaErrorInvalidValue for an M or
// `slices` it does not take (decode_linear_fits).
cudaError_t launch_decode_linear(const DecodeLinearParams& p, int slices);

}  // namespace fp8ext::sm90
