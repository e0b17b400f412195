// The float32 reference path: the CPU backend, and the fallback of the CUDA backend where no sm_90a kernel
// applies. Written with ATen ops only, so it runs on any device the inputs are on.
#include <algorithm>

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
  const int64_t M = problem.M, N = problem.N, K = problem.K;
  // Tile sizes: columns of b first (their fp32 copy is shared by all of a's rows), half the budget at most, then
  // as many rows as the rest holds: rows * K + K * cols + 2 * rows * cols floats (a's rows, b's columns, the
  // tile's result and its scale product) <= the budget.
  constexpr int64_t kBudget = kReferenceChunkBytes / static_cast<int64_t>(sizeof(float));
  const int64_t cols = std::clamp<int64_t>(kBudget / 2 / K, 1, N);
  const int64_t rows = std::clamp<int64_t>((kBudget - K * cols) / (K + 2 * cols), 1, M);
  // (M, 1) * (1, N) broadcasting; a tensor-wise scale is viewed as a 0-d tensor.
  const at::Tensor sa_all = problem.scale_a_per_row ? scale_a.reshape({M, 1}) : scale_a.reshape({});
  const at::Tensor sb_all = problem.scale_b_per_col ? scale_b.reshape({1, N}) : scale_b.reshape({});
  at::Tensor out = at::empty({M, N}, a.options().dtype(problem.out_dtype));
  for (int64_t c0 = 0; c0 < N; c0 += cols) {
    const int64_t nc = std::min(cols, N - c0);
    // fp8 -> fp32 is exact, so the only rounding before the output cast is the fp32 accumulation. Operands are
    // made contiguous first: a padded or transposed fp8 view is legal input, and the plain conversion and
    // matmul paths are the ones every backend has.
    const at::Tensor b_cols = b.narrow(1, c0, nc).t().contiguous().to(at::kFloat).t();
    const at::Tensor sb = problem.scale_b_per_col ? sb_all.narrow(1, c0, nc) : sb_all;
    const std::optional<at::Tensor> bias_cols =
        bias.has_value() ? std::optional<at::Tensor>(bias->narrow(0, c0, nc).to(at::kFloat)) : std::nullopt;
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
      const int64_t nr = std::min(rows, M - r0);
      at::Tensor acc = at::mm(a.narrow(0, r0, nr).contiguous().to(at::kFloat), b_cols);
      const at::Tensor sa = problem.scale_a_per_row ? sa_all.narrow(0, r0, nr) : sa_all;
      // The scales are multiplied first, as the sm90 epilogue does: no intermediate overflow unless the scale
      // product itself overflows.
      acc.mul_(sa * sb);
      if (bias_cols.has_value()) acc.add_(*bias_cols);
      out.narrow(0, r0, nr).narrow(1, c0, nc).copy_(acc);  // the one rounding to out_dtype, as .to() does
    }
  }
  return out;
}

at::Tensor scaled_mm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                         const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                         std::optional<at::ScalarType> out_dtype, bool /*use_fast_accum: fp32 either way*/) {
  const ScaledMmProblem problem = check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype);
  return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
}

}  // namespace fp8ext
