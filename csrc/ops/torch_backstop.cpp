// torch._scaled_mm's routes and backstops (torch_backstop.h).
#include "ops/torch_backstop.h"

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include <torch/csrc/stable/ops.h>

#include "ops/testing_hooks.h"

namespace fp8ext {
namespace {

namespace st = torch::stable;

// torch._scaled_mm(a, b, scale_a, scale_b, bias, scale_result=None, out_dtype, use_fast_accum).
Tensor torch_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                       const std::optional<Tensor>& bias, ScalarType out_dtype, bool use_fast_accum) {
  std::array<StableIValue, 8> stack{st::detail::from(a),
                                    st::detail::from(b),
                                    st::detail::from(scale_a),
                                    st::detail::from(scale_b),
                                    st::detail::from(bias),
                                    st::detail::from(std::nullopt),
                                    st::detail::from(std::optional<ScalarType>(out_dtype)),
                                    st::detail::from(use_fast_accum)};
  call_aten("aten::_scaled_mm", "", stack);
  return st::detail::to<Tensor>(stack[0]);
}

// Set once torch._scaled_mm has refused a block-wise call that torch_can_run_blockwise admitted (a torch whose
// checks differ from 2.11's, where the backstop was measured): the backstop is then off for block-wise calls.
std::atomic<bool> g_torch_blockwise_refused{false};

// Whether the running torch is 2.11, the release whose block-wise path was measured (which shapes it computes
// right: sm90::torch_blockwise_computes). Another release may get other shapes wrong, without an error, so the
// block-wise backstop stays off there until measured. Set with the software key at import.
std::atomic<bool> g_torch_blockwise_measured{false};

}  // namespace

Tensor tensorwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                            const std::optional<Tensor>& bias, const ScaledMmProblem& problem, bool use_fast_accum) {
  // cuBLASLt takes no bias with fp32 output (torch rejects it); add it afterwards in that one case
  // (out - (-1) * bias: the stable ops' subtract takes a double alpha, and -1 * bias is exact).
  const bool bias_after = bias.has_value() && problem.out_dtype == ScalarType::Float;
  Tensor out = torch_scaled_mm(a, b, st::reshape(scale_a, {}), st::reshape(scale_b, {}),
                               bias_after ? std::nullopt : bias, problem.out_dtype, use_fast_accum);
  if (bias_after) out = st::subtract(out, *bias, -1.0);
  return out;
}

bool torch_can_run(const ScaledMmProblem& problem, ScalarType a_dtype, ScalarType b_dtype, int64_t lda,
                   bool has_bias, bool scales_aligned) {
  return problem.out_dtype == ScalarType::BFloat16 && a_dtype == ScalarType::Float8_e4m3fn &&
         b_dtype == ScalarType::Float8_e4m3fn && problem.scale_a_per_row && problem.scale_b_per_col && !has_bias &&
         (problem.M == 1 || lda == problem.K) && scales_aligned;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

Tensor rowwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                         const ScaledMmProblem& problem, bool use_fast_accum) {
  // torch takes row-wise scales as (M, 1) and (1, N); 2-D scales already are (the checks admit no other 2-D
  // row-wise shape), and a reshape is a dispatcher call that an eager caller waits for.
  return torch_scaled_mm(a, b, scale_a.dim() == 2 ? scale_a : st::reshape(scale_a, {problem.M, 1}),
                         scale_b.dim() == 2 ? scale_b : st::reshape(scale_b, {1, problem.N}), std::nullopt,
                         problem.out_dtype, use_fast_accum);
}

// Both flags above: torch 2.11 and no refusal yet.
bool torch_blockwise_backstop_usable() {
  return g_torch_blockwise_measured.load(std::memory_order_relaxed) &&
         !g_torch_blockwise_refused.load(std::memory_order_relaxed);
}

void set_torch_blockwise_measured(bool measured) { g_torch_blockwise_measured.store(measured); }

void clear_torch_blockwise_refusal() { g_torch_blockwise_refused.store(false); }

bool torch_can_run_blockwise(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                             const std::optional<Tensor>& bias, const ScaledMmProblem& problem) {
  const int64_t M = problem.M, K = problem.K, G = problem.groups_k(), H = problem.blocks_n();
  auto stride_is = [](const Tensor& t, int dim, int64_t want) { return t.size(dim) == 1 || t.stride(dim) == want; };
  return torch_blockwise_backstop_usable() && problem.out_dtype == ScalarType::BFloat16 &&
         !bias.has_value() && a.scalar_type() == ScalarType::Float8_e4m3fn &&
         b.scalar_type() == ScalarType::Float8_e4m3fn && stride_is(a, 0, K) && stride_is(a, 1, 1) &&
         stride_is(b, 0, 1) && stride_is(b, 1, K) &&
         scale_a.size(0) == M && scale_a.size(1) == G && stride_is(scale_a, 0, 1) && stride_is(scale_a, 1, M) &&
         scale_b.size(0) == G && scale_b.size(1) == H && stride_is(scale_b, 0, 1) && stride_is(scale_b, 1, G);
}

std::optional<Tensor> blockwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                                          const Tensor& scale_b, const ScaledMmProblem& problem) {
  try {
    throw_planted_blockwise_fault();
    return torch_scaled_mm(a, b, scale_a, scale_b, std::nullopt, problem.out_dtype, /*use_fast_accum=*/false);
  } catch (const AtenError& e) {
    if (e.message_known && out_of_memory(e)) throw;
    g_torch_blockwise_refused.store(true);
    const std::string what = e.what();
    static std::once_flag once;
    warn_once(once, str("fp8ext.scaled_mm: torch._scaled_mm refused a block-wise call (",
                        what.substr(0, what.find('\n')),
                        "); block-wise calls run on fp8ext's own kernels from now on"));
    return std::nullopt;
  }
}

bool cublaslt_declined(const AtenError& e) {
  return std::string(e.what()).find("CUBLAS_STATUS_NOT_SUPPORTED") != std::string::npos;
}

bool out_of_memory(const AtenError& e) {
  return std::string(e.what()).find("out of memory") != std::string::npos;
}

}  // namespace fp8ext
