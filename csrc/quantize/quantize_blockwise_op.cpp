// fp8ext::quantize_blockwise: validation (every message starts with "fp8ext.quantize_blockwise: <argument>: "),
// the outputs' allocation, and the CPU backend, which computes the formula of quantize_blockwise.h with the same
// float32 helpers as the CUDA kernel, group by group, so that the two agree bit for bit. On PyTorch's stable ABI
// (torch/csrc/stable, torch/headeronly).
#include <climits>
#include <cmath>
#include <tuple>
#include <type_traits>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Float8_e4m3fn.h>
#include <torch/headeronly/util/Float8_e5m2.h>
#include <torch/headeronly/util/Half.h>

#include "quantize/quantize_blockwise_op.h"
#include "quantize/quantize_rowwise_op.h"

namespace fp8ext {
namespace {

#define FP8EXT_CHECK_QUANT(cond, arg, ...) FP8EXT_CHECK(cond, "fp8ext.quantize_blockwise: ", arg, ": ", __VA_ARGS__)

template <typename In, typename Out>
void quantize_groups_cpu(const QuantizeBlockwiseParams& p) {
  const float fp8_max = std::is_same_v<Out, torch::headeronly::Float8_e4m3fn> ? kE4M3Max : kE5M2Max;
  const int64_t groups_per_row = (p.K + kQuantizeGroup - 1) / kQuantizeGroup;
  const In* x = static_cast<const In*>(p.x);
  Out* q = static_cast<Out*>(p.q);
  torch::stable::parallel_for(0, p.M, 1, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      for (int64_t g = 0; g < groups_per_row; ++g) {
        const int64_t k0 = g * kQuantizeGroup, k1 = std::min(p.K, k0 + kQuantizeGroup);
        const In* row = x + m * p.row_stride;
        float amax = 0.0f;
        for (int64_t k = k0; k < k1; ++k) amax = abs_max_nan(amax, static_cast<float>(row[k]));
        amax = rowwise_amax(amax, 0.0f);
        p.scale[g * p.M + m] = amax / fp8_max;
        const float inv = fp8_max / amax;
        // torch's float -> FP8 conversions round to nearest even, as the kernel's cvt.rn does.
        for (int64_t k = k0; k < k1; ++k) {
          q[m * p.K + k] = Out(rowwise_scaled(static_cast<float>(row[k]), inv, fp8_max));
        }
      }
    }
  });
}

template <typename Out>
void quantize_cpu_typed(const QuantizeBlockwiseParams& p) {
  switch (p.src) {
    case QuantSrc::kBF16: return quantize_groups_cpu<torch::headeronly::BFloat16, Out>(p);
    case QuantSrc::kFP16: return quantize_groups_cpu<torch::headeronly::Half, Out>(p);
    case QuantSrc::kFP32: return quantize_groups_cpu<float, Out>(p);
  }
}

std::tuple<Tensor, Tensor> quantize_blockwise_cpu(Tensor x, std::optional<ScalarType> dtype) {
  QuantizeBlockwiseCall c = prepare_quantize_blockwise(x, dtype);
  if (c.params.dst == QuantDst::kE4M3) {
    quantize_cpu_typed<torch::headeronly::Float8_e4m3fn>(c.params);
  } else {
    quantize_cpu_typed<torch::headeronly::Float8_e5m2>(c.params);
  }
  return {std::move(*c.q), torch::stable::transpose(*c.scale_gm, 0, 1)};
}

}  // namespace

QuantizeBlockwiseParams check_quantize_blockwise(IntSpan sizes, IntSpan strides, ScalarType x_dtype,
                                                 std::optional<ScalarType> dtype) {
  const auto [src, dst] = check_quantize_dtypes(x_dtype, dtype, "fp8ext.quantize_blockwise");
  FP8EXT_CHECK_QUANT(sizes.size() == 2, "x", "expected a 2-D [M, K] tensor, got a ", sizes.size(),
                     "-D tensor of shape ", shape_str(sizes));
  QuantizeBlockwiseParams p;
  p.M = sizes[0];
  p.K = sizes[1];
  FP8EXT_CHECK_QUANT(p.K > 0 && p.K % 16 == 0, "x", "K = ", p.K,
                     " (the last dimension) must be a positive multiple of 16 (x is ", shape_str(sizes), ")");
  FP8EXT_CHECK_QUANT(p.M == 0 || strides[1] == 1, "x",
                     "the last dimension must be contiguous (stride 1), got strides ", shape_str(strides),
                     "; pass x.contiguous()");
  const int64_t groups = (p.K + kQuantizeGroup - 1) / kQuantizeGroup;
  FP8EXT_CHECK_QUANT(p.M <= INT_MAX / groups, "x", "at most ", INT_MAX, " groups of 128 (M * ceil(K / 128)), got ",
                     shape_str(sizes));
  p.row_stride = p.M > 1 ? strides[0] : 0;  // a single row's stride is never used
  p.src = src;
  p.dst = dst;
  return p;
}

QuantizeBlockwiseCall prepare_quantize_blockwise(const Tensor& x, std::optional<ScalarType> dtype) {
  QuantizeBlockwiseCall c{check_quantize_blockwise(x.sizes(), x.strides(), x.scalar_type(), dtype), {}, {}};
  const int64_t groups = (c.params.K + kQuantizeGroup - 1) / kQuantizeGroup;
  const ScalarType q_dtype = c.params.dst == QuantDst::kE5M2 ? ScalarType::Float8_e5m2 : ScalarType::Float8_e4m3fn;
  c.q = torch::stable::new_empty(x, x.sizes(), q_dtype);
  const std::vector<int64_t> scale_shape{groups, c.params.M};
  c.scale_gm = torch::stable::new_empty(x, scale_shape, ScalarType::Float);
  c.params.x = x.const_data_ptr();
  c.params.q = c.q->mutable_data_ptr();
  c.params.scale = static_cast<float*>(c.scale_gm->mutable_data_ptr());
  return c;
}

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CPU, m) { m.impl("quantize_blockwise", TORCH_BOX(&quantize_blockwise_cpu)); }

#undef FP8EXT_CHECK_QUANT

}  // namespace fp8ext
