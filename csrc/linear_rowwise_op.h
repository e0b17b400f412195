// fp8ext::linear_rowwise (PyTorch's stable ABI): a Float8Linear's forward as one op,
//
//     x_q, x_scale = quantize_rowwise(x)                                  (e4m3, one scale per row of x)
//     out = scaled_mm(x_q.view(M, K), weight.t(), x_scale.view(M, 1), weight_scale, bias, x.dtype, use_fast_accum)
//     returned with x's leading dimensions: x.shape[:-1] + (N,)
//
// Shared by its torch-facing files: the validation on metadata (which the fake implementation calls too, through
// _check_linear_rowwise_meta) and the two-op composition above, which is the CPU backend and the CUDA backend
// wherever the fused decode kernel (linear_rowwise_cuda.cpp, sm90/decode_linear.cu) does not run.
#pragma once

#include <optional>

#include <torch/csrc/stable/tensor.h>

#include "quantize_rowwise.h"
#include "scaled_mm_checks.h"

namespace fp8ext {

using Tensor = torch::stable::Tensor;

// What validation learned: x's rows as quantize_rowwise reads them (no pointers) and the GEMM's problem.
struct LinearRowwiseProblem {
  QuantizeRowwiseParams x;
  ScaledMmProblem gemm;
};

// Checks the arguments (messages start with "fp8ext.linear_rowwise: <argument>: ", docs/errors.md): x as
// quantize_rowwise takes it; weight a 2-D float8_e4m3fn [N, K] with K = x's last dimension; weight_scale float32
// [N]; bias None or [N] in x's dtype; all on x's device; then the GEMM as scaled_mm checks it.
LinearRowwiseProblem check_linear_rowwise(const TensorMeta& x, const TensorMeta& weight, const TensorMeta& weight_scale,
                                          const std::optional<TensorMeta>& bias);

// The composition above, through the dispatcher (so that each op runs on the inputs' device, forced kernels and
// the autotuner included). Call it after check_linear_rowwise.
Tensor linear_rowwise_two_ops(const Tensor& x, const Tensor& weight, const Tensor& weight_scale,
                              const std::optional<Tensor>& bias, bool use_fast_accum);

}  // namespace fp8ext
