// The float32 reference path of scaled_mm (scaled_mm_cpu.cpp, which also registers the CPU backend): the CPU
// backend itself, and the CUDA backend's fallback.
#pragma once

#include <cstdint>
#include <optional>

#include "ops/scaled_mm.h"

namespace fp8ext {

// out = (a @ b) * scale_a * scale_b (+ bias) computed in float32 with aten ops on whatever device the inputs
// are on. The CPU backend, the CUDA backend on GPUs without an sm_90a kernel for the case, and every backend's
// empty M, N or K (answered without a GEMM). It works on tiles of rows of a and columns of b whose float32
// temporaries (a's rows, b's columns, the tile's result, its scale product and a sum's temporary) take at most
// kReferenceChunkBytes together, as long as K <= 8M (beyond, one row and one column at a time: 8 bytes per K), in
// buffers allocated once per call and reused by every tile; only the output is full size.
constexpr int64_t kReferenceChunkBytes = int64_t{64} << 20;
Tensor scaled_mm_reference(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                           const std::optional<Tensor>& bias, const ScaledMmProblem& problem);

}  // namespace fp8ext
