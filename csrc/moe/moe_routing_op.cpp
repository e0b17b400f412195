// The validation of fp8ext::moe_dispatch and fp8ext::moe_combine on metadata alone, for their CUDA backends
// (moe_routing_cuda.cpp) and, through the _check_moe_*_meta ops (ops/meta_checks.cpp), their fake and CPU
// implementations (python/fp8ext/moe_routing.py). In every build. The maths is at the top of moe_routing.h.
#include <cstdint>
#include <vector>

#include "moe/moe_routing_op.h"
#include "ops/grouped_checks.h"
#include "quantize/quantize_rowwise_op.h"

namespace fp8ext {

#define FP8EXT_CHECK_ARG(cond, arg, ...) FP8EXT_CHECK(cond, op, ": ", arg, ": ", __VA_ARGS__)

namespace {

// A [T, k] table (top_k_index, pos, weights): 2-D, contiguous, with `tokens` rows and `k` columns (any where < 0).
void check_slot_table(const char* op, const TensorMeta& t, const char* arg, int64_t tokens, int64_t k) {
  FP8EXT_CHECK_ARG(t.dim() == 2, arg, "expected a 2-D [T, k] tensor, got a ", t.dim(), "-D tensor of shape ",
                   shape_str(t.sizes()));
  FP8EXT_CHECK_ARG((tokens < 0 || t.size(0) == tokens) && (k < 0 || t.size(1) == k), arg, "expected shape [T, k] = [",
                   tokens < 0 ? t.size(0) : tokens, ", ", k < 0 ? t.size(1) : k, "], got ", shape_str(t.sizes()));
  FP8EXT_CHECK_ARG(t.rows_contiguous(), arg, "expected a contiguous tensor, got strides ", shape_str(t.strides()),
                   "; pass .contiguous()");
}

}  // namespace

MoeDispatchProblem check_moe_dispatch(const TensorMeta& x, const TensorMeta& top_k_index, int64_t num_experts) {
  constexpr const char* op = "fp8ext.moe_dispatch";
  FP8EXT_CHECK_ARG(x.dim() == 2, "x", "expected a 2-D [T, H] tensor, got a ", x.dim(),
                   "-D tensor of shape ", shape_str(x.sizes()));
  // The quantize's own check would name this size K; here it is the hidden size.
  FP8EXT_CHECK_ARG(x.size(1) > 0 && x.size(1) % 16 == 0, "x", "H = ", x.size(1),
                   " (the hidden size, the last dimension) must be a positive multiple of 16 (x is ",
                   shape_str(x.sizes()), ")");
  MoeDispatchProblem p;
  p.quantize = check_quantize_rowwise(x.sizes(), x.strides(), x.scalar_type(), std::nullopt,
                                      std::nullopt, op);
  p.tokens = x.size(0);
  p.H = x.size(1);
  FP8EXT_CHECK_ARG(top_k_index.scalar_type() == ScalarType::Long || top_k_index.scalar_type() == ScalarType::Int,
                   "top_k_index", "expected dtype torch.int64 or torch.int32, got ",
                   dtype_name(top_k_index.scalar_type()));
  check_slot_table(op, top_k_index, "top_k_index", p.tokens, -1);
  check_on_device_of(op, top_k_index, "top_k_index", x, "x");
  p.k = top_k_index.size(1);
  FP8EXT_CHECK_ARG(p.k >= 1, "top_k_index", "expected at least one expert a token (k >= 1), got shape ",
                   shape_str(top_k_index.sizes()));
  FP8EXT_CHECK_ARG(p.tokens * p.k <= kMoeRouteMaxSlots, "top_k_index", "T * k = ", p.tokens * p.k,
                   " routed slots; at most ", kMoeRouteMaxSlots,
                   " (decode sizes: one CTA routes them); route larger batches with torch.sort");
  FP8EXT_CHECK_ARG(num_experts >= 1 && num_experts <= kMaxGroups, "num_experts", "expected 1 to ", kMaxGroups,
                   " experts (scaled_grouped_mm's groups), got ", num_experts);
  p.num_experts = num_experts;
  return p;
}

MoeCombineParams check_moe_combine(const TensorMeta& o, const TensorMeta& pos, const TensorMeta& weights) {
  constexpr const char* op = "fp8ext.moe_combine";
  const ScalarType dtype = o.scalar_type();
  FP8EXT_CHECK_ARG(dtype == ScalarType::BFloat16 || dtype == ScalarType::Half || dtype == ScalarType::Float, "o",
                   "expected dtype torch.bfloat16, torch.float16 or torch.float32, got ", dtype_name(dtype));
  FP8EXT_CHECK_ARG(o.dim() == 2, "o", "expected a 2-D [rows, H] tensor, got a ", o.dim(), "-D tensor of shape ",
                   shape_str(o.sizes()));
  FP8EXT_CHECK_ARG(o.size(1) > 0 && o.size(1) % 16 == 0, "o", "H = ", o.size(1),
                   " (the last dimension) must be a positive multiple of 16 (o is ", shape_str(o.sizes()), ")");
  FP8EXT_CHECK_ARG(o.rows_contiguous(), "o",
                   "expected a contiguous tensor, got strides ", shape_str(o.strides()), "; pass o.contiguous()");
  check_address_aligned(op, o, "o");
  FP8EXT_CHECK_ARG(pos.scalar_type() == ScalarType::Int, "pos", "expected dtype torch.int32, got ",
                   dtype_name(pos.scalar_type()));
  check_slot_table(op, pos, "pos", -1, -1);
  check_on_device_of(op, pos, "pos", o, "o");
  FP8EXT_CHECK_ARG(weights.scalar_type() == dtype, "weights", "expected dtype ", dtype_name(dtype),
                   " (o's), got ", dtype_name(weights.scalar_type()), "; pass weights.to(o.dtype)");
  check_slot_table(op, weights, "weights", pos.size(0), pos.size(1));
  check_on_device_of(op, weights, "weights", o, "o");
  FP8EXT_CHECK_ARG(pos.size(1) >= 1, "pos", "expected at least one slot a token (k >= 1), got shape ",
                   shape_str(pos.sizes()));
  MoeCombineParams p;
  p.dtype = dtype == ScalarType::BFloat16 ? QuantSrc::kBF16 : dtype == ScalarType::Half ? QuantSrc::kFP16
                                                                                         : QuantSrc::kFP32;
  p.rows = o.size(0);
  p.H = o.size(1);
  p.tokens = pos.size(0);
  p.k = static_cast<int>(pos.size(1));
  return p;
}

#undef FP8EXT_CHECK_ARG

}  // namespace fp8ext
