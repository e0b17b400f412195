// fp8ext::linear: a linear layer's forward on an FP8 weight in one call,
//
//     q, s = quantize_rowwise(x)                       (x: [M, K] or [B, S, K], bf16 / fp16 / fp32)
//     y    = scaled_mm(q, weight.t(), s, weight_scale, bias, out_dtype=x.dtype, use_fast_accum)
//
// with the same kernels and the same kernel choice as those two ops, so the result is theirs bit for bit; y has
// x's shape with K replaced by N. One call instead of two saves a dispatcher round trip and the Python views
// between them: eager decode and small prefills are bound by the host's time per layer (docs/model_path.md).
// Validation here, on metadata alone (shared with the fake implementation through _check_linear_meta); the CUDA
// backend is in linear_cuda.cpp, the CPU one (the two ops in turn) in python/fp8ext/ops.py.
#pragma once

#include <optional>

#include "quantize/quantize_rowwise.h"
#include "ops/scaled_mm_checks.h"

namespace fp8ext {

struct LinearProblem {
  QuantizeRowwiseParams quant;  // x's quantize, without the pointers
  ScaledMmProblem mm;           // the GEMM of x's M rows against the [N, K] weight
};

// Checks x as quantize_rowwise does, weight ([N, K] float8_e4m3fn rows, each starting at a multiple of 16
// elements), weight_scale (float32, (N,) or (N, 1), contiguous) and bias ([N] in x's dtype), then the GEMM as
// scaled_mm sees it. Every message starts with "fp8ext.linear: <argument>: ".
LinearProblem check_linear_meta(const TensorMeta& x, const TensorMeta& weight, const TensorMeta& weight_scale,
                                const std::optional<TensorMeta>& bias);

}  // namespace fp8ext
