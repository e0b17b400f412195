// The kernel parameters of sm90_launch.h.
#include "ops/sm90_launch.h"

namespace fp8ext {
namespace {

sm90::InType to_in_type(ScalarType t) {
  return t == ScalarType::Float8_e5m2 ? sm90::InType::kE5M2 : sm90::InType::kE4M3;
}

// What both kernel families' parameters hold alike (gemm_params.h, blockwise_gemm.h): the problem, the
// operands, the output (`out`, the contiguous [M, N] result, already allocated), the bias and where to run.
template <class Params>
Params common_params(Operand a, Operand b, const void* bias, void* out, const ScaledMmProblem& problem, int device,
                     int sm_count, cudaStream_t stream) {
  Params p;
  p.M = problem.M;
  p.N = problem.N;
  p.K = problem.K;
  p.a = a.data;
  p.lda = problem.M == 1 ? problem.K : a.ld;  // a size-1 dimension's stride is never used
  p.b = b.data;
  p.ldb = b.ld;
  p.out = out;
  p.ldo = problem.N;
  p.bias = bias;
  p.device_id = device;
  p.sm_count = sm_count;
  p.stream = stream;
  return p;
}

template <class Params>
Params common_params(const Tensor& a, const Tensor& b, const std::optional<Tensor>& bias,
                     const ScaledMmProblem& problem, const Tensor& out, int sm_count, cudaStream_t stream) {
  return common_params<Params>({a.data_ptr(), a.stride(0)}, {b.data_ptr(), b.stride(1)},
                               bias.has_value() ? bias->data_ptr() : nullptr, out.data_ptr(), problem,
                               a.get_device_index(), sm_count, stream);
}

}  // namespace

sm90::OutType to_out_type(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16: return sm90::OutType::kBF16;
    case ScalarType::Half: return sm90::OutType::kFP16;
    default: return sm90::OutType::kFP32;  // validation admits only these three
  }
}

sm90::ProblemKey problem_key(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, bool use_fast_accum,
                             ScalarType a_dtype, ScalarType b_dtype) {
  return {M,
          N,
          K,
          to_out_type(out_dtype),
          use_fast_accum ? sm90::Accum::kFast : sm90::Accum::kPrecise,
          to_in_type(a_dtype),
          to_in_type(b_dtype)};
}

sm90::GemmParams gemm_params(Operand a, Operand b, const float* scale_a, const float* scale_b, bool a_is_e5m2,
                             const void* bias, void* out, const ScaledMmProblem& problem, int device, int sm_count,
                             cudaStream_t stream) {
  auto p = common_params<sm90::GemmParams>(a, b, bias, out, problem, device, sm_count, stream);
  p.a_is_e5m2 = a_is_e5m2;
  p.scale_a = scale_a;
  p.scale_a_per_row = problem.scale_a_per_row;
  p.scale_b = scale_b;
  p.scale_b_per_col = problem.scale_b_per_col;
  return p;
}

// The same from scaled_mm's tensors.
sm90::GemmParams gemm_params(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                             const std::optional<Tensor>& bias, const ScaledMmProblem& problem, const Tensor& out,
                             int sm_count, cudaStream_t stream) {
  return gemm_params({a.data_ptr(), a.stride(0)}, {b.data_ptr(), b.stride(1)},
                     static_cast<const float*>(scale_a.data_ptr()), static_cast<const float*>(scale_b.data_ptr()),
                     a.scalar_type() == ScalarType::Float8_e5m2, bias.has_value() ? bias->data_ptr() : nullptr,
                     out.data_ptr(), problem, a.get_device_index(), sm_count, stream);
}

sm90::BlockwiseParams blockwise_params(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                                       const std::optional<Tensor>& bias, const ScaledMmProblem& problem,
                                       const Tensor& out, int sm_count, cudaStream_t stream) {
  auto p = common_params<sm90::BlockwiseParams>(a, b, bias, problem, out, sm_count, stream);
  // Validation admits any strides; scale_a may be (M, 1) (one K group), whose column stride is never used.
  p.scale_a = static_cast<const float*>(scale_a.data_ptr());
  p.sa_stride_m = scale_a.stride(0);
  p.sa_stride_g = scale_a.stride(1);
  p.scale_b = static_cast<const float*>(scale_b.data_ptr());
  p.sb_stride_g = scale_b.stride(0);
  p.sb_stride_n = scale_b.stride(1);
  return p;
}

}  // namespace fp8ext
