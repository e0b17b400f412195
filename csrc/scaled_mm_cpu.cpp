// The float32 reference path: the CPU backend, and the fallback of the CUDA backend where no sm_90a kernel
// applies. Written with ATen ops only, so it runs on any device the inputs are on.
#include <ATen/ATen.h>

#include "scaled_mm.h"

namespace fp8ext {
namespace {

// K == 0 is a sum over nothing: zeros, plus bias when given.
at::Tensor scaled_mm_empty_k(const at::Tensor& a, const std::optional<at::Tensor>& bias,
                             const ScaledMmProblem& problem) {
  auto out = at::empty({problem.M, problem.N}, a.options().dtype(problem.out_dtype));
  if (bias.has_value()) {
    out.copy_(bias->unsqueeze(0).expand({problem.M, problem.N}));
  } else {
    out.zero_();
  }
  return out;
}

}  // namespace

at::Tensor scaled_mm_reference(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                               const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                               const ScaledMmProblem& problem) {
  if (problem.M == 0 || problem.N == 0) {
    return at::empty({problem.M, problem.N}, a.options().dtype(problem.out_dtype));
  }
  if (problem.K == 0) return scaled_mm_empty_k(a, bias, problem);
  // fp8 -> fp32 is exact, so the only rounding before the output cast is the fp32 accumulation. Operands are
  // made contiguous first: a padded or transposed fp8 view is legal input, and the plain conversion and
  // matmul paths are the ones every backend has.
  at::Tensor acc = at::mm(a.contiguous().to(at::kFloat), b.t().contiguous().to(at::kFloat).t());
  // (M, 1) * (1, N) broadcasting; a tensor-wise scale is viewed as a 0-d tensor.
  const at::Tensor sa = problem.scale_a_per_row ? scale_a.reshape({problem.M, 1}) : scale_a.reshape({});
  const at::Tensor sb = problem.scale_b_per_col ? scale_b.reshape({1, problem.N}) : scale_b.reshape({});
  // The scales are multiplied first, as the sm90 epilogue does: no intermediate overflow unless the scale
  // product itself overflows.
  acc.mul_(sa * sb);
  if (bias.has_value()) acc.add_(bias->to(at::kFloat));
  return acc.to(problem.out_dtype);
}

at::Tensor scaled_mm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                         const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                         std::optional<at::ScalarType> out_dtype, bool /*use_fast_accum: fp32 either way*/) {
  const ScaledMmProblem problem = check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype);
  return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
}

}  // namespace fp8ext
