// torch's row-wise path called as torch 2.11 calls cuBLASLt, with less of the host's time (cublaslt_rowwise.cpp).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace fp8ext {

// An e4m3 a [M, K] row-major (stride K) times b [K, N] column-major (stride K), float32 scales of M and N values,
// into a bf16 out [M, N] contiguous; every pointer 256-byte aligned (cuBLASLt's default assumption) but the scales
// (16 bytes).
struct RowwiseLtCall {
  const void* a = nullptr;
  const void* b = nullptr;
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  void* out = nullptr;
  int64_t M = 0, N = 0, K = 0;
  bool use_fast_accum = false;
  int device = 0;
};

// Whether the cuBLASLt torch loaded is one this call mirrors.
bool rowwise_lt_available();

// Runs the call on `stream` (of c.device, the current device) and returns true, or returns false having done
// nothing (cuBLASLt not available, the stream being captured): then the caller calls torch. Throws on a cuBLASLt
// error.
bool run_rowwise_lt(const RowwiseLtCall& c, cudaStream_t stream);

}  // namespace fp8ext
