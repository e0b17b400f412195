// fp8ext::linear_rowwise: validation, the two-op composition, and the CPU backend (which is that composition).
// linear_rowwise_op.h has the op's definition; the CUDA backend is linear_rowwise_cuda.cpp.
#include <array>
#include <string>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "linear_rowwise_op.h"
#include "quantize_rowwise_op.h"
#include "scaled_mm.h"
#include "torch_calls.h"

namespace fp8ext {
namespace {

namespace st = torch::stable;

#define FP8EXT_CHECK_LINEAR(cond, arg, ...) FP8EXT_CHECK(cond, "fp8ext.linear_rowwise: ", arg, ": ", __VA_ARGS__)

// Runs a check of another op, re-labelling its messages as this op's: "fp8ext.<op>: <rest>" becomes
// "fp8ext.linear_rowwise: <rest>" followed by `context`.
template <class Check>
auto relabelled(const char* op, const std::string& context, Check&& check) {
  try {
    return check();
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    const std::string prefix = std::string("fp8ext.") + op + ": ";
    if (what.rfind(prefix, 0) == 0) what = "fp8ext.linear_rowwise: " + what.substr(prefix.size());
    throw std::runtime_error(what + context);
  }
}

}  // namespace

LinearRowwiseProblem check_linear_rowwise(const TensorMeta& x, const TensorMeta& weight, const TensorMeta& weight_scale,
                                          const std::optional<TensorMeta>& bias) {
  LinearRowwiseProblem p;
  p.x = relabelled("quantize_rowwise", "", [&] {
    return check_quantize_rowwise(x.sizes(), x.strides(), x.scalar_type(), std::nullopt, std::nullopt);
  });
  const int64_t K = p.x.K;
  FP8EXT_CHECK_LINEAR(weight.dim() == 2, "weight", "expected a 2-D [N, K] tensor (out_features x in_features), got ",
                      "shape ", shape_str(weight.sizes()));
  FP8EXT_CHECK_LINEAR(weight.scalar_type() == ScalarType::Float8_e4m3fn, "weight",
                      "expected dtype torch.float8_e4m3fn, got ", dtype_name(weight.scalar_type()));
  FP8EXT_CHECK_LINEAR(weight.size(1) == K, "weight", "expected [N, ", K, "] (K = the last dimension of x, ",
                      shape_str(x.sizes()), "), got ", shape_str(weight.sizes()));
  const int64_t N = weight.size(0);
  FP8EXT_CHECK_LINEAR(weight.device() == x.device(), "weight", "expected it on x's device ", device_str(x.device()),
                      ", got ", device_str(weight.device()));
  FP8EXT_CHECK_LINEAR(weight_scale.scalar_type() == ScalarType::Float && weight_scale.dim() == 1 &&
                          weight_scale.size(0) == N,
                      "weight_scale", "expected a float32 [", N, "] tensor (one scale per row of weight), got ",
                      dtype_name(weight_scale.scalar_type()), " of shape ", shape_str(weight_scale.sizes()));
  FP8EXT_CHECK_LINEAR(weight_scale.device() == x.device(), "weight_scale", "expected it on x's device ",
                      device_str(x.device()), ", got ", device_str(weight_scale.device()));
  if (bias.has_value()) {
    FP8EXT_CHECK_LINEAR(bias->dim() == 1 && bias->size(0) == N && bias->scalar_type() == x.scalar_type(), "bias",
                        "expected a [", N, "] tensor of x's dtype ", dtype_name(x.scalar_type()), ", got ",
                        dtype_name(bias->scalar_type()), " of shape ", shape_str(bias->sizes()));
    FP8EXT_CHECK_LINEAR(bias->device() == x.device(), "bias", "expected it on x's device ", device_str(x.device()),
                        ", got ", device_str(bias->device()));
  }
  // The GEMM as scaled_mm validates it: a = the quantized x ([M, K] e4m3, contiguous, fresh), b = weight.t().
  const int64_t M = p.x.rows;
  const std::array<int64_t, 2> a_sizes{M, K}, a_strides{K, 1}, sa_sizes{M, 1}, sa_strides{1, 1};
  const std::array<int64_t, 2> b_sizes{K, N}, b_strides{weight.stride(1), weight.stride(0)};
  const TensorMeta a{IntSpan(a_sizes), IntSpan(a_strides), ScalarType::Float8_e4m3fn, x.device(), 0, 0};
  const TensorMeta scale_a{IntSpan(sa_sizes), IntSpan(sa_strides), ScalarType::Float, x.device(), 0, 0};
  const TensorMeta b{IntSpan(b_sizes), IntSpan(b_strides), weight.scalar_type(), weight.device(), weight.offset,
                     weight.address};
  p.gemm = relabelled("scaled_mm", " (linear_rowwise runs scaled_mm with b = weight.t(), scale_b = weight_scale)",
                      [&] { return check_scaled_mm_meta(a, b, scale_a, weight_scale, bias, x.scalar_type()); });
  return p;
}

Tensor linear_rowwise_two_ops(const Tensor& x, const Tensor& weight, const Tensor& weight_scale,
                              const std::optional<Tensor>& bias, bool use_fast_accum) {
  const int64_t K = weight.size(1), N = weight.size(0);
  std::array<StableIValue, 3> quantize{st::detail::from(x), st::detail::from(std::optional<ScalarType>()),
                                       st::detail::from(std::optional<double>())};
  call_aten("fp8ext::quantize_rowwise", "", quantize);
  const Tensor q = st::detail::to<Tensor>(quantize[0]);
  const Tensor scale = st::detail::to<Tensor>(quantize[1]);
  const int64_t M = q.numel() / K;
  std::array<StableIValue, 7> gemm{st::detail::from(st::reshape(q, {M, K})),
                                   st::detail::from(st::transpose(weight, 0, 1)),
                                   st::detail::from(st::reshape(scale, {M, 1})),
                                   st::detail::from(weight_scale),
                                   st::detail::from(bias),
                                   st::detail::from(std::optional<ScalarType>(x.scalar_type())),
                                   st::detail::from(use_fast_accum)};
  call_aten("fp8ext::scaled_mm", "", gemm);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = N;
  return st::reshape(st::detail::to<Tensor>(gemm[0]), out_shape);
}

namespace {

Tensor linear_rowwise_cpu(Tensor x, Tensor weight, Tensor weight_scale, std::optional<Tensor> bias,
                          bool use_fast_accum) {
  const std::optional<TensorMeta> bias_meta =
      bias.has_value() ? std::optional<TensorMeta>(tensor_meta(*bias)) : std::nullopt;
  check_linear_rowwise(tensor_meta(x), tensor_meta(weight), tensor_meta(weight_scale), bias_meta);
  return linear_rowwise_two_ops(x, weight, weight_scale, bias, use_fast_accum);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CPU, m) { m.impl("linear_rowwise", TORCH_BOX(&linear_rowwise_cpu)); }

#undef FP8EXT_CHECK_LINEAR

}  // namespace fp8ext
