// Validation of fp8ext::scaled_mm's arguments: the single place where the contract is enforced.
//
// Every message starts with "fp8ext.scaled_mm: <argument>: " and says what was expected and what was given.
// docs/errors.md lists them all; tests/test_validation.py checks each one. The checks read only metadata
// (TensorMeta), so that the fake implementation (python/fp8ext/ops.py, through the _check_scaled_mm_meta op)
// raises the same messages from this same code when torch.compile or torch.export trace a call.
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "ops/scaled_mm_checks.h"

namespace fp8ext {

namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();  // CUTLASS problem sizes are int

bool is_fp8(ScalarType t) { return t == ScalarType::Float8_e4m3fn || t == ScalarType::Float8_e5m2; }

#define FP8EXT_CHECK_ARG(cond, arg, ...) FP8EXT_CHECK(cond, "fp8ext.scaled_mm: ", arg, ": ", __VA_ARGS__)

void check_same_device(const TensorMeta& t, const char* arg, const TensorMeta& a) {
  check_on_device_of("fp8ext.scaled_mm", t, arg, a, "a");
}

void check_operand(const TensorMeta& t, const char* arg, const char* dims) {
  FP8EXT_CHECK_ARG(t.dim() == 2, arg, "expected a 2-D tensor ", dims, ", got a ", t.dim(),
                   "-D tensor of shape ", shape_str(t.sizes()));
  FP8EXT_CHECK_ARG(is_fp8(t.scalar_type()), arg, "expected dtype torch.float8_e4m3fn or torch.float8_e5m2, got ",
                   dtype_name(t.scalar_type()));
}

// TMA reads operands in 16-byte units: the base address and the leading dimension must both be multiples of 16
// bytes (fp8: 16 elements).
void check_alignment(const TensorMeta& t, const char* arg, int64_t ld) {
  FP8EXT_CHECK_ARG(ld % 16 == 0, arg, "the leading dimension (", ld,
                   " elements) must be a multiple of 16 elements (16 bytes) for TMA; pad the buffer it views");
  check_address_aligned("fp8ext.scaled_mm", t, arg);
}

enum class ScaleKind { kTensor, kVector, kBlock };

// scale_a: one value (tensor-wise), (M, 1) or (M,) (row-wise), or (M, G) with G = ceil(K / 128) >= 2 (block-wise
// 1 x 128). scale_b: one value, (1, N) or (N,), or (G, H) with H = ceil(N / 128) (block-wise 128 x 128). The shapes
// never coincide where they would mean different things: with a single K group (K <= 128) the block scales factor
// out of the sum, and (M, 1) row-wise and (M, 1) block-wise are the same product (see check_scaled_mm_meta).
ScaleKind check_scale(const TensorMeta& s, const char* arg, const ScaledMmProblem& p, bool is_a, const TensorMeta& a) {
  check_same_device(s, arg, a);
  FP8EXT_CHECK_ARG(s.scalar_type() == ScalarType::Float, arg, "expected dtype torch.float32, got ",
                   dtype_name(s.scalar_type()));
  if (s.numel() == 1) return ScaleKind::kTensor;
  const int64_t len = is_a ? p.M : p.N;
  const char* len_name = is_a ? "M" : "N";
  const int64_t groups = p.groups_k();
  const int64_t blocks_n = p.blocks_n();
  // Row-wise: (len, 1) or (len,) for scale_a; (1, len) or (len,) for scale_b.
  const bool vector_1d = s.dim() == 1 && s.size(0) == len;
  const bool vector_2d = s.dim() == 2 && (is_a ? (s.size(0) == len && s.size(1) == 1)
                                               : (s.size(0) == 1 && s.size(1) == len));
  const bool block = s.dim() == 2 && (is_a ? (s.size(0) == p.M && s.size(1) == groups && groups >= 2)
                                           : (s.size(0) == groups && s.size(1) == blocks_n));
  if (block && !vector_2d) {
    // The kernels read block scales through their strides, so any layout would compute; but scale_b's grid can be
    // square (K = N), and a weight's [ceil(N / 128), ceil(K / 128)] scales passed untransposed would then pass the
    // shape check and scale every block by its transposed neighbour's scale. So scale_b takes the layout torch's
    // block-wise _scaled_mm takes, a weight's scales s transposed (s.t(): strides (1, >= G)), as b is w.t(); scale_a
    // any strides (its (M, G) grid is not the transpose of anything a caller holds).
    FP8EXT_CHECK_ARG(is_a || groups == 1 || blocks_n == 1 || s.stride(0) == 1, arg,
                     "block-wise 128 x 128 scales are taken as s.t() of the weight's "
                     "[ceil(N / 128), ceil(K / 128)] = [",
                     blocks_n, ", ", groups, "] scales s (strides (1, >= ", groups,
                     "), as torch._scaled_mm takes them), got strides ", shape_str(s.strides()),
                     "; pass scale_b=s.t() for the weight's scales s (a contiguous (", groups, ", ", blocks_n,
                     ") tensor reads as s.t() only by accident when the grid is square)");
    return ScaleKind::kBlock;
  }
  FP8EXT_CHECK_ARG(vector_1d || vector_2d, arg, "expected one value (tensor-wise), shape ",
                   is_a ? "(M, 1) or (M,)" : "(1, N) or (N,)", " with ", len_name, " = ", len, " (row-wise), or ",
                   is_a ? str("(M, ceil(K / 128)) = (", p.M, ", ", groups, ") (block-wise, 1 x 128 groups)")
                        : str("(ceil(K / 128), ceil(N / 128)) = (", groups, ", ", blocks_n,
                              ") (block-wise, 128 x 128 blocks)"),
                   ", got shape ", shape_str(s.sizes()));
  const int64_t stride = vector_1d ? s.stride(0) : s.stride(is_a ? 0 : 1);
  FP8EXT_CHECK_ARG(stride == 1, arg, "row-wise scales must be contiguous (stride 1 along ", len_name,
                   "), got strides ", shape_str(s.strides()),
                   "; expanded or strided views are not accepted, pass .contiguous()");
  return ScaleKind::kVector;
}

}  // namespace

ScaledMmProblem check_scaled_mm_meta(const TensorMeta& a, const TensorMeta& b, const TensorMeta& scale_a,
                                     const TensorMeta& scale_b, const std::optional<TensorMeta>& bias,
                                     std::optional<ScalarType> out_dtype) {
  ScaledMmProblem p;
  p.out_dtype = out_dtype.value_or(ScalarType::BFloat16);
  const ScalarType out = p.out_dtype;
  FP8EXT_CHECK_ARG(out == ScalarType::BFloat16 || out == ScalarType::Half || out == ScalarType::Float,
                   "out_dtype", "expected torch.bfloat16, torch.float16 or torch.float32, got ",
                   dtype_name(p.out_dtype));

  check_operand(a, "a", "[M, K]");
  check_operand(b, "b", "[K, N]");
  FP8EXT_CHECK_ARG(!(a.scalar_type() == ScalarType::Float8_e5m2 && b.scalar_type() == ScalarType::Float8_e5m2), "a, b",
                   "both are torch.float8_e5m2; at least one must be torch.float8_e4m3fn "
                   "(there is no e5m2 x e5m2 FP8 matrix multiply)");
  check_same_device(b, "b", a);

  p.M = a.size(0);
  p.K = a.size(1);
  p.N = b.size(1);
  FP8EXT_CHECK_ARG(b.size(0) == p.K, "b", "expected shape [K, N] with K = ", p.K, " (a is ",
                   shape_str(a.sizes()), "), got ", shape_str(b.sizes()));
  FP8EXT_CHECK_ARG(p.K % 16 == 0, "a", "K = ", p.K, " must be a multiple of 16 (a is ", shape_str(a.sizes()), ")");
  FP8EXT_CHECK_ARG(p.N % 16 == 0, "b", "N = ", p.N, " must be a multiple of 16 (b is ", shape_str(b.sizes()), ")");
  FP8EXT_CHECK_ARG(p.M <= kMaxDim, "a", "M = ", p.M, " is larger than the supported 2^31 - 1");
  FP8EXT_CHECK_ARG(p.N <= kMaxDim, "b", "N = ", p.N, " is larger than the supported 2^31 - 1");
  FP8EXT_CHECK_ARG(p.K <= kMaxDim, "a", "K = ", p.K, " is larger than the supported 2^31 - 1");

  // Layout. Strides of empty tensors carry no meaning, and the stride of a size-1 dimension is never used.
  if (a.numel() > 0) {
    FP8EXT_CHECK_ARG(a.stride(1) == 1 && (p.M == 1 || a.stride(0) >= p.K), "a",
                     "expected row-major [M, K] (stride(1) == 1, stride(0) >= K), got shape ",
                     shape_str(a.sizes()), " with strides ", shape_str(a.strides()), "; pass a.contiguous()");
    check_alignment(a, "a", p.M == 1 ? p.K : a.stride(0));
  }
  if (b.numel() > 0) {
    FP8EXT_CHECK_ARG(b.stride(0) == 1 && b.stride(1) >= p.K, "b",
                     "expected column-major [K, N], i.e. w.t() of a row-major weight w [N, K] "
                     "(stride(0) == 1, stride(1) >= K), got shape ",
                     shape_str(b.sizes()), " with strides ", shape_str(b.strides()));
    check_alignment(b, "b", b.stride(1));
  }

  const ScaleKind kind_a = check_scale(scale_a, "scale_a", p, /*is_a=*/true, a);
  const ScaleKind kind_b = check_scale(scale_b, "scale_b", p, /*is_a=*/false, a);
  // Block-wise takes both scales block-wise; with one K group (K <= 128), scale_a's (M, 1) is its block form.
  const int64_t groups = p.groups_k();
  const bool a_block_form = kind_a == ScaleKind::kBlock || (groups == 1 && scale_a.dim() == 2 &&
                                                            scale_a.size(0) == p.M && scale_a.size(1) == 1);
  p.blockwise = kind_a == ScaleKind::kBlock || kind_b == ScaleKind::kBlock;
  if (p.blockwise) {
    FP8EXT_CHECK_ARG(a_block_form && kind_b == ScaleKind::kBlock, "scale_a, scale_b",
                     "block-wise scaling needs both scales block-wise: scale_a of shape (M, ceil(K / 128)) = (", p.M,
                     ", ", groups, ") and scale_b of shape (ceil(K / 128), ceil(N / 128)) = (", groups, ", ",
                     p.blocks_n(), "), got ", shape_str(scale_a.sizes()), " and ",
                     shape_str(scale_b.sizes()));
    FP8EXT_CHECK_ARG(a.scalar_type() == ScalarType::Float8_e4m3fn && b.scalar_type() == ScalarType::Float8_e4m3fn,
                     "a, b", "block-wise scaling takes torch.float8_e4m3fn operands only, got a ",
                     dtype_name(a.scalar_type()), " and b ", dtype_name(b.scalar_type()));
  } else {
    p.scale_a_per_row = kind_a == ScaleKind::kVector;
    p.scale_b_per_col = kind_b == ScaleKind::kVector;
  }

  if (bias.has_value()) {
    const TensorMeta& t = *bias;
    check_same_device(t, "bias", a);
    FP8EXT_CHECK_ARG(t.dim() == 1 && t.size(0) == p.N, "bias", "expected a 1-D tensor of N = ", p.N,
                     " values, got shape ", shape_str(t.sizes()));
    FP8EXT_CHECK_ARG(t.scalar_type() == p.out_dtype, "bias", "expected dtype ", dtype_name(p.out_dtype),
                     " (the out_dtype), got ", dtype_name(t.scalar_type()), "; pass bias.to(",
                     dtype_name(p.out_dtype), ")");
    check_bias_layout(t, "fp8ext.scaled_mm");
  }
  return p;
}

void check_bias_layout(const TensorMeta& bias, const char* op) {
  FP8EXT_CHECK(bias.numel() <= 1 || bias.stride(0) == 1, op, ": bias: expected a contiguous tensor, got stride ",
               bias.stride(0));
  if (bias.numel() > 0) check_address_aligned(op, bias, "bias");
}

void check_on_device_of(const char* op, const TensorMeta& t, const char* arg, const TensorMeta& first,
                        const char* first_name) {
  FP8EXT_CHECK(t.device() == first.device(), op, ": ", arg, ": expected a tensor on ", device_str(first.device()),
               " (the device of ", first_name, "), got one on ", device_str(t.device()));
}

void check_address_aligned(const char* op, const TensorMeta& t, const char* arg) {
  FP8EXT_CHECK(t.address % 16 == 0, op, ": ", arg, ": the data pointer must be 16-byte aligned, got an address ",
               t.address % 16, " bytes past a 16-byte boundary (storage_offset ", t.storage_offset(), ")");
}

#undef FP8EXT_CHECK_ARG

}  // namespace fp8ext
