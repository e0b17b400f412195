// The plain-C++ interface between the libtorch entry (ops/scaled_mm_cuda.cpp) and the CUTLASS kernels.
//
// Everything is in the user's frame:
//   out[i, j] = scale_a[i] * scale_b[j] * sum_k a[i, k] * b[k, j]  (+ bias[j])
// with a [M, K] row-major, b [K, N] column-major (b(k, j) at b + j * ldb + k), out [M, N] row-major.
// A kernel compiled with swap_ab maps this onto its own frame itself; callers never transpose anything.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "sm90/common/kernel_config.h"

namespace fp8ext::sm90 {

// How the persistent tile scheduler walks the output tiles, in the kernel's own (MMA) frame: a swapped kernel's
// M is the user's N. Tiles are visited in bands `max_swizzle` tiles wide (1, 2, 4 or 8) across the raster
// direction, so that the CTAs of one wave share operand rows in L2. Which order reads the fewest bytes from
// HBM depends on the shape; the dispatch table carries the measured best per row (dispatch.h). The GEMV and
// kernels without a persistent scheduler ignore it.
enum class Raster : uint8_t { kHeuristic, kAlongM, kAlongN };  // kHeuristic: CUTLASS's (along the longer side)
struct SchedulerOptions {
  Raster raster = Raster::kHeuristic;
  int max_swizzle = 8;
  bool operator==(const SchedulerOptions& o) const { return raster == o.raster && max_swizzle == o.max_swizzle; }
};

struct GemmParams {
  int64_t M = 0, N = 0, K = 0;

  const void* a = nullptr;  // fp8, a(i, k) at a + i * lda + k
  int64_t lda = 0;
  bool a_is_e5m2 = false;   // kernels compiled for one input type ignore it; the GEMV reads it
  const void* b = nullptr;  // fp8 e4m3, b(k, j) at b + j * ldb + k
  int64_t ldb = 0;
  void* out = nullptr;  // out(i, j) at out + i * ldo + j, element type = the kernel's OutType
  int64_t ldo = 0;

  const float* scale_a = nullptr;  // M values when scale_a_per_row, else a single value
  bool scale_a_per_row = true;
  const float* scale_b = nullptr;  // N values when scale_b_per_col, else a single value
  bool scale_b_per_col = true;
  const void* bias = nullptr;  // N values of the output type, or nullptr for no bias

  void* workspace = nullptr;  // at least workspace_size(params) bytes, from the caller's allocator
  size_t workspace_bytes = 0;

  SchedulerOptions sched;

  int device_id = 0;
  int sm_count = 0;
  cudaStream_t stream = nullptr;
};

// What a launch reports. `stage` says which step failed, `detail` the CUTLASS or CUDA message.
struct LaunchResult {
  bool ok = true;
  const char* stage = "";
  const char* detail = "";
};

}  // namespace fp8ext::sm90
