// The validation of fp8ext::linear (linear_op.h), in header-only torch types: the CUDA backend and the fake
// implementation (the _check_linear_meta op) run this same code.
#include "ops/linear_op.h"

#include "quantize/quantize_rowwise_op.h"

namespace fp8ext {
namespace {

#define FP8EXT_CHECK_LINEAR(cond, arg, ...) FP8EXT_CHECK(cond, "fp8ext.linear: ", arg, ": ", __VA_ARGS__)

void check_device(const TensorMeta& t, const char* arg, const TensorMeta& x) {
  check_on_device_of("fp8ext.linear", t, arg, x, "x");
}

}  // namespace

LinearProblem check_linear_meta(const TensorMeta& x, const TensorMeta& weight, const TensorMeta& weight_scale,
                                const std::optional<TensorMeta>& bias) {
  LinearProblem lp;
  lp.quant = check_quantize_rowwise(x.sizes(), x.strides(), x.scalar_type(), ScalarType::Float8_e4m3fn, std::nullopt,
                                    "fp8ext.linear");
  const int64_t M = lp.quant.rows, K = lp.quant.K;

  check_device(weight, "weight", x);
  FP8EXT_CHECK_LINEAR(weight.dim() == 2, "weight", "expected a 2-D tensor [N, K] (the weight as stored, not "
                      "transposed), got a ", weight.dim(), "-D tensor of shape ", shape_str(weight.sizes()));
  FP8EXT_CHECK_LINEAR(weight.scalar_type() == ScalarType::Float8_e4m3fn, "weight",
                      "expected dtype torch.float8_e4m3fn, got ", dtype_name(weight.scalar_type()));
  FP8EXT_CHECK_LINEAR(weight.size(1) == K, "weight", "expected shape [N, K] with K = ", K,
                      " (the last dimension of x), got ", shape_str(weight.sizes()));
  const int64_t N = weight.size(0);
  FP8EXT_CHECK_LINEAR(N > 0 && N % 16 == 0, "weight", "N = ", N, " (its rows) must be a positive multiple of 16");
  // The kernels read the weight as scaled_mm's b = weight.t(): K contiguous, its rows 16-byte aligned (TMA).
  FP8EXT_CHECK_LINEAR(weight.stride(1) == 1 && weight.stride(0) >= K && weight.stride(0) % 16 == 0, "weight",
                      "expected rows of K contiguous elements that start at multiples of 16 elements, got strides ",
                      shape_str(weight.strides()), "; pass weight.contiguous()");
  check_address_aligned("fp8ext.linear", weight, "weight");

  check_device(weight_scale, "weight_scale", x);
  FP8EXT_CHECK_LINEAR(weight_scale.scalar_type() == ScalarType::Float, "weight_scale",
                      "expected dtype torch.float32, got ", dtype_name(weight_scale.scalar_type()));
  const bool column = weight_scale.dim() == 2 && weight_scale.size(1) == 1;
  FP8EXT_CHECK_LINEAR((weight_scale.dim() == 1 || column) && weight_scale.size(0) == N, "weight_scale",
                      "expected one scale per row of the weight, shape (", N, ",) or (", N, ", 1), got ",
                      shape_str(weight_scale.sizes()));
  FP8EXT_CHECK_LINEAR(weight_scale.stride(0) == 1, "weight_scale", "expected a contiguous tensor, got strides ",
                      shape_str(weight_scale.strides()), "; pass weight_scale.contiguous()");

  if (bias.has_value()) {
    check_device(*bias, "bias", x);
    FP8EXT_CHECK_LINEAR(bias->dim() == 1 && bias->size(0) == N, "bias", "expected a 1-D tensor of N = ", N,
                        " elements, got shape ", shape_str(bias->sizes()));
    FP8EXT_CHECK_LINEAR(bias->scalar_type() == x.scalar_type(), "bias", "expected dtype ",
                        dtype_name(x.scalar_type()), " (the dtype of x and of the output), got ",
                        dtype_name(bias->scalar_type()), "; pass bias.to(x.dtype)");
    check_bias_layout(*bias, "fp8ext.linear");
  }

  // The GEMM as scaled_mm sees it: a = q viewed [M, K] (new, contiguous), b = weight.t(), scale_a = s viewed
  // [M, 1], scale_b = weight_scale as (N,).
  const int64_t a_sizes[] = {M, K}, a_strides[] = {K, 1};
  const int64_t b_sizes[] = {K, N}, b_strides[] = {1, weight.stride(0)};
  const int64_t sa_sizes[] = {M, 1}, sa_strides[] = {1, 1};
  const int64_t sb_sizes[] = {N}, sb_strides[] = {1};
  const TensorMeta a{IntSpan(a_sizes), IntSpan(a_strides), ScalarType::Float8_e4m3fn, x.device(), 0, 0};
  const TensorMeta b{IntSpan(b_sizes), IntSpan(b_strides), weight.scalar_type(), weight.device(),
                     weight.storage_offset(), weight.address};
  const TensorMeta sa{IntSpan(sa_sizes), IntSpan(sa_strides), ScalarType::Float, x.device(), 0, 0};
  const TensorMeta sb{IntSpan(sb_sizes), IntSpan(sb_strides), ScalarType::Float, weight_scale.device(),
                      weight_scale.storage_offset(), weight_scale.address};
  lp.mm = check_scaled_mm_meta(a, b, sa, sb, bias, x.scalar_type());
  return lp;
}

#undef FP8EXT_CHECK_LINEAR

}  // namespace fp8ext
