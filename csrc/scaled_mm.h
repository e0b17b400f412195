// Declarations shared by the libtorch-facing files: the one validation of the op's contract, the reference
// path, and the per-backend entries registered in bindings.cpp / scaled_mm_cuda.cu.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

namespace fp8ext {

// What validation learned about a call, so the backends need not re-derive it.
struct ScaledMmProblem {
  int64_t M = 0, N = 0, K = 0;
  bool scale_a_per_row = false;  // false: scale_a is one value (tensor-wise)
  bool scale_b_per_col = false;  // false: scale_b is one value (tensor-wise)
  at::ScalarType out_dtype = at::kBFloat16;

  bool tensorwise() const { return !scale_a_per_row && !scale_b_per_col; }
};

// Checks every argument against the contract in README.md ("Inputs") and throws c10::Error naming the
// argument, what was expected and what was given. Runs before anything is allocated or launched.
ScaledMmProblem check_scaled_mm_args(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                                     const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                                     std::optional<at::ScalarType> out_dtype);

// out = (a @ b) * scale_a * scale_b (+ bias) computed in float32 with ATen ops on whatever device the inputs
// are on. The CPU backend, the CUDA backend on GPUs without an sm_90a kernel for the case, and every backend's
// empty M, N or K (answered without a GEMM).
at::Tensor scaled_mm_reference(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                               const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                               const ScaledMmProblem& problem);

at::Tensor scaled_mm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                         const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                         std::optional<at::ScalarType> out_dtype, bool use_fast_accum);

}  // namespace fp8ext
