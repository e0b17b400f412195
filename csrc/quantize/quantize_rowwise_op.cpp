// fp8ext::quantize_rowwise: validation (every message starts with "fp8ext.quantize_rowwise: <argument>: "),
// the outputs' allocation, and the CPU backend, which computes the formula of quantize_rowwise.h with the same
// float32 helpers as the CUDA kernel, row by row, so that the two agree bit for bit. On PyTorch's stable ABI
// (torch/csrc/stable, torch/headeronly).
#include <cmath>
#include <vector>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Float8_e4m3fn.h>
#include <torch/headeronly/util/Float8_e5m2.h>
#include <torch/headeronly/util/Half.h>

#include "quantize/quantize_rowwise_op.h"

namespace fp8ext {
namespace {

#define FP8EXT_CHECK_QUANT(cond, arg, ...) FP8EXT_CHECK(cond, op, ": ", arg, ": ", __VA_ARGS__)

template <typename In, typename Out>
void quantize_rows_cpu(const QuantizeRowwiseParams& p) {
  const float fp8_max = std::is_same_v<Out, torch::headeronly::Float8_e4m3fn> ? kE4M3Max : kE5M2Max;
  const In* x = static_cast<const In*>(p.x);
  Out* q = static_cast<Out*>(p.q);
  // Rows are independent; a grain of a few rows keeps small calls on one thread.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(p.K, 1));
  torch::stable::parallel_for(0, p.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const In* row = x + (r / p.inner_rows) * p.outer_stride + (r % p.inner_rows) * p.inner_stride;
      float amax = 0.0f;
      for (int64_t k = 0; k < p.K; ++k) amax = abs_max_nan(amax, static_cast<float>(row[k]));
      amax = rowwise_amax(amax, p.scale_ub);
      p.scale[r] = amax / fp8_max;
      const float inv = fp8_max / amax;
      Out* out = q + r * p.K;
      // torch's float -> FP8 conversions round to nearest even, as the kernel's cvt.rn does.
      for (int64_t k = 0; k < p.K; ++k) out[k] = Out(rowwise_scaled(static_cast<float>(row[k]), inv, fp8_max));
    }
  });
}

template <typename Out>
void quantize_cpu_typed(const QuantizeRowwiseParams& p) {
  switch (p.src) {
    case QuantSrc::kBF16: return quantize_rows_cpu<torch::headeronly::BFloat16, Out>(p);
    case QuantSrc::kFP16: return quantize_rows_cpu<torch::headeronly::Half, Out>(p);
    case QuantSrc::kFP32: return quantize_rows_cpu<float, Out>(p);
  }
}

}  // namespace

std::pair<QuantSrc, QuantDst> check_quantize_dtypes(ScalarType x_dtype, std::optional<ScalarType> dtype,
                                                   const char* op) {
  const ScalarType out_dtype = dtype.value_or(ScalarType::Float8_e4m3fn);
  FP8EXT_CHECK_QUANT(out_dtype == ScalarType::Float8_e4m3fn || out_dtype == ScalarType::Float8_e5m2, "dtype",
                     "expected torch.float8_e4m3fn or torch.float8_e5m2, got ", dtype_name(out_dtype));
  FP8EXT_CHECK_QUANT(x_dtype == ScalarType::BFloat16 || x_dtype == ScalarType::Half || x_dtype == ScalarType::Float,
                     "x",
                     "expected dtype torch.bfloat16, torch.float16 or torch.float32, got ", dtype_name(x_dtype));
  const QuantSrc src = x_dtype == ScalarType::BFloat16 ? QuantSrc::kBF16
                       : x_dtype == ScalarType::Half   ? QuantSrc::kFP16
                                                       : QuantSrc::kFP32;
  return {src, out_dtype == ScalarType::Float8_e5m2 ? QuantDst::kE5M2 : QuantDst::kE4M3};
}

QuantizeRowwiseParams check_quantize_rowwise(IntSpan sizes, IntSpan strides, ScalarType x_dtype,
                                             std::optional<ScalarType> dtype, std::optional<double> scale_ub,
                                             const char* op) {
  const auto [src, dst] = check_quantize_dtypes(x_dtype, dtype, op);
  const int64_t dim = static_cast<int64_t>(sizes.size());
  FP8EXT_CHECK_QUANT(dim == 2 || dim == 3, "x", "expected a 2-D [M, K] or 3-D [B, S, K] tensor, got a ", dim,
                     "-D tensor of shape ", shape_str(sizes), "; reshape it to 2-D first");
  QuantizeRowwiseParams p;
  p.K = sizes[dim - 1];
  FP8EXT_CHECK_QUANT(p.K > 0 && p.K % 16 == 0, "x", "K = ", p.K,
                     " (the last dimension) must be a positive multiple of 16 (x is ", shape_str(sizes), ")");
  p.rows = dim == 2 ? sizes[0] : sizes[0] * sizes[1];
  FP8EXT_CHECK_QUANT(p.rows == 0 || strides[dim - 1] == 1, "x",
                     "the last dimension must be contiguous (stride 1), got strides ", shape_str(strides),
                     "; pass x.contiguous()");
  if (scale_ub.has_value()) {
    const float ub = static_cast<float>(*scale_ub);
    FP8EXT_CHECK_QUANT(std::isfinite(ub) && ub > 0.0f, "scale_ub",
                       "expected a finite number > 0 (in float32), or None, got ", *scale_ub);
    p.scale_ub = ub;
  }
  p.src = src;
  p.dst = dst;
  // A size-1 dimension's stride is never used: zero it, so that it cannot spoil the kernel's alignment test.
  const auto used = [&](int64_t i) { return sizes[i] == 1 ? int64_t{0} : strides[i]; };
  p.inner_rows = std::max<int64_t>(sizes[dim - 2], 1);
  p.inner_stride = used(dim - 2);
  p.outer_stride = dim == 3 ? used(0) : 0;
  return p;
}

QuantizeRowwiseParams check_silu_mul_quantize(IntSpan sizes, IntSpan strides, ScalarType x_dtype) {
  const char* op = "fp8ext.silu_mul_quantize_rowwise";
  const auto [src, dst] = check_quantize_dtypes(x_dtype, std::nullopt, op);
  const int64_t dim = static_cast<int64_t>(sizes.size());
  FP8EXT_CHECK_QUANT(dim == 2, "x", "expected a 2-D [M, 2I] tensor (the gate half, then the up half), got a ", dim,
                     "-D tensor of shape ", shape_str(sizes));
  FP8EXT_CHECK_QUANT(sizes[1] > 0 && sizes[1] % 32 == 0, "x", "its last dimension 2I = ", sizes[1],
                     " must be a positive multiple of 32 (I a multiple of 16; x is ", shape_str(sizes), ")");
  FP8EXT_CHECK_QUANT(sizes[0] == 0 || strides[1] == 1, "x",
                     "the last dimension must be contiguous (stride 1), got strides ", shape_str(strides),
                     "; pass x.contiguous()");
  QuantizeRowwiseParams p;
  p.src = src;
  p.dst = dst;
  p.gated = true;
  p.rows = sizes[0];
  p.K = sizes[1] / 2;
  p.inner_rows = std::max<int64_t>(sizes[0], 1);
  p.inner_stride = sizes[0] == 1 ? 0 : strides[0];  // unused for one row: zeroed for the alignment test
  return p;
}

QuantizeRowwiseCall prepare_silu_mul_quantize(const Tensor& x) {
  QuantizeRowwiseCall c{check_silu_mul_quantize(x.sizes(), x.strides(), x.scalar_type()), {}, {}};
  const std::vector<int64_t> q_shape{c.params.rows, c.params.K}, scale_shape{c.params.rows, 1};
  c.q = torch::stable::new_empty(x, q_shape, ScalarType::Float8_e4m3fn);
  c.scale = torch::stable::new_empty(x, scale_shape, ScalarType::Float);
  c.params.x = x.const_data_ptr();
  c.params.q = c.q->mutable_data_ptr();
  c.params.scale = static_cast<float*>(c.scale->mutable_data_ptr());
  return c;
}

QuantizeRowwiseCall prepare_quantize_rowwise(const Tensor& x, std::optional<ScalarType> dtype,
                                             std::optional<double> scale_ub) {
  return allocate_quantize_rowwise(x, check_quantize_rowwise(x.sizes(), x.strides(), x.scalar_type(), dtype,
                                                             scale_ub));
}

QuantizeRowwiseCall allocate_quantize_rowwise(const Tensor& x, const QuantizeRowwiseParams& params) {
  QuantizeRowwiseCall c{params, {}, {}};
  std::vector<int64_t> scale_shape(x.sizes().begin(), x.sizes().end());
  scale_shape.back() = 1;
  const ScalarType q_dtype = params.dst == QuantDst::kE5M2 ? ScalarType::Float8_e5m2 : ScalarType::Float8_e4m3fn;
  c.q = torch::stable::new_empty(x, x.sizes(), q_dtype);
  c.scale = torch::stable::new_empty(x, scale_shape, ScalarType::Float);
  c.params.x = x.const_data_ptr();
  c.params.q = c.q->mutable_data_ptr();
  c.params.scale = static_cast<float*>(c.scale->mutable_data_ptr());
  return c;
}

std::tuple<Tensor, Tensor> quantize_rowwise_cpu(Tensor x, std::optional<ScalarType> dtype,
                                                std::optional<double> scale_ub) {
  QuantizeRowwiseCall c = prepare_quantize_rowwise(x, dtype, scale_ub);
  if (c.params.dst == QuantDst::kE4M3) {
    quantize_cpu_typed<torch::headeronly::Float8_e4m3fn>(c.params);
  } else {
    quantize_cpu_typed<torch::headeronly::Float8_e5m2>(c.params);
  }
  return {std::move(*c.q), std::move(*c.scale)};
}

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CPU, m) { m.impl("quantize_rowwise", TORCH_BOX(&quantize_rowwise_cpu)); }

#undef FP8EXT_CHECK_QUANT

}  // namespace fp8ext
