// Validation of fp8ext::scaled_grouped_mm's arguments (the contract: grouped_checks.h). Every message starts with
// "fp8ext.scaled_grouped_mm: <argument>: " and says what was expected and what was given; docs/errors.md lists
// them and tests/test_grouped_cpu.py checks each.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops/grouped_checks.h"

namespace fp8ext {

namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();  // CUTLASS problem sizes are int

// The op whose call is being checked, for the messages: scaled_grouped_mm or scaled_grouped_mm_masked (set for the
// duration of one check by OpName; per thread, as checks run on the calling thread).
thread_local const char* t_op = "fp8ext.scaled_grouped_mm";
struct OpName {
  const char* saved;
  explicit OpName(const char* op) : saved(t_op) { t_op = op; }
  ~OpName() { t_op = saved; }
};
constexpr const char* kMaskedOp = "fp8ext.scaled_grouped_mm_masked";

#define FP8EXT_CHECK_ARG(cond, arg, ...) FP8EXT_CHECK(cond, t_op, ": ", arg, ": ", __VA_ARGS__)

const char* layout_name(GroupedLayout l) {
  switch (l) {
    case GroupedLayout::k2d3d: return "2d x 3d";
    case GroupedLayout::k3d3d: return "3d x 3d";
    default: return "2d x 2d";
  }
}

void check_same_device(const TensorMeta& t, const char* arg, const TensorMeta& a) {
  check_on_device_of(t_op, t, arg, a, "a");
}

// TMA reads a and b in 16-byte units: the base address, the leading dimension and (3-D) the group stride must be
// multiples of 16 bytes, which for fp8 is 16 elements.
void check_alignment(const TensorMeta& t, const char* arg, int64_t ld) {
  FP8EXT_CHECK_ARG(ld % 16 == 0, arg, "the leading dimension (", ld,
                   " elements) must be a multiple of 16 elements (16 bytes) for TMA; pad the buffer it views");
  if (t.dim() == 3 && t.size(0) > 1) {
    FP8EXT_CHECK_ARG(t.stride(0) % 16 == 0, arg, "the stride between groups (", t.stride(0),
                     " elements) must be a multiple of 16 elements (16 bytes) for TMA");
  }
  check_address_aligned(t_op, t, arg);
}

// a: row-major in its last two dimensions; b: column-major (w.transpose(-2, -1) of row-major weights).
void check_operand_layout(const TensorMeta& t, const char* arg, bool row_major, int64_t K) {
  if (t.numel() == 0) return;  // strides of an empty tensor carry no meaning
  const int64_t last = t.dim() - 1;
  const int64_t rows = t.size(last - 1), cols = t.size(last);
  if (row_major) {
    FP8EXT_CHECK_ARG(t.stride(last) == 1 && (rows == 1 || t.stride(last - 1) >= cols), arg,
                     "expected row-major in the last two dimensions (stride(-1) == 1, stride(-2) >= K), got shape ",
                     shape_str(t.sizes()), " with strides ", shape_str(t.strides()), "; pass a.contiguous()");
    check_alignment(t, arg, rows == 1 ? cols : t.stride(last - 1));
  } else {
    FP8EXT_CHECK_ARG(t.stride(last - 1) == 1 && t.stride(last) >= K, arg,
                     "expected column-major in the last two dimensions, i.e. w.transpose(-2, -1) of row-major "
                     "weights w (stride(-2) == 1, stride(-1) >= K), got shape ",
                     shape_str(t.sizes()), " with strides ", shape_str(t.strides()));
    check_alignment(t, arg, t.stride(last));
  }
}

bool same_shape(const TensorMeta& t, const std::vector<int64_t>& want) {
  if (t.dim() != static_cast<int64_t>(want.size())) return false;
  size_t i = 0;
  for (const int64_t w : want) {
    if (t.size(i++) != w) return false;
  }
  return true;
}

// Where scale_a is the row-wise shape with a trailing 1 (as quantize_rowwise returns it), how to pass it; else "".
// Called only to word a failed check.
const char* trailing_one_hint(const TensorMeta& scale_a, std::vector<int64_t> row_shape) {
  row_shape.push_back(1);
  return same_shape(scale_a, row_shape)
             ? "; for a row-wise scale with a trailing 1 (as quantize_rowwise returns it), pass scale_a.squeeze(-1)"
             : "";
}

std::string shape_of(const std::vector<int64_t>& want) {
  return shape_str(IntSpan(want));
}

struct ScaleForm {
  std::vector<int64_t> shape;
  const char* name;  // the shape in symbols, "[G, N]"
};

// A scale of the form chosen: its device, dtype, shape and, row-wise, a contiguous last dimension (row-wise scales
// are read as vectors). `why` says where the form came from, for scale_b's message.
void check_scale(const TensorMeta& s, const char* arg, ScaleForm form, const GroupedMmProblem& p, const TensorMeta& a,
                 const char* why) {
  check_same_device(s, arg, a);
  FP8EXT_CHECK_ARG(s.scalar_type() == ScalarType::Float, arg, "expected dtype torch.float32, got ",
                   dtype_name(s.scalar_type()));
  FP8EXT_CHECK_ARG(same_shape(s, form.shape), arg, "expected shape ", form.name, " = ", shape_of(form.shape), " (",
                   p.blockwise ? "block-wise" : "row-wise", ", layout ", layout_name(p.layout), why, "), got ",
                   shape_str(s.sizes()));
  if (!p.blockwise && s.numel() > 1) {
    FP8EXT_CHECK_ARG(s.stride(s.dim() - 1) == 1, arg, "row-wise scales must be contiguous in their last dimension, "
                     "got strides ", shape_str(s.strides()), "; pass .contiguous()");
  }
}

}  // namespace

GroupedMmProblem check_scaled_grouped_mm_meta(const TensorMeta& a, const TensorMeta& b, const TensorMeta& scale_a,
                                              const TensorMeta& scale_b, const std::optional<TensorMeta>& offs,
                                              const std::optional<TensorMeta>& bias,
                                              std::optional<ScalarType> out_dtype,
                                              const std::optional<TensorMeta>& masked_m,
                                              std::optional<int64_t> expected_m) {
  const OpName name(masked_m.has_value() ? kMaskedOp : "fp8ext.scaled_grouped_mm");
  GroupedMmProblem p;
  p.out_dtype = out_dtype.value_or(ScalarType::BFloat16);
  const ScalarType out = p.out_dtype;
  FP8EXT_CHECK_ARG(out == ScalarType::BFloat16 || out == ScalarType::Half || out == ScalarType::Float, "out_dtype",
                   "expected torch.bfloat16, torch.float16 or torch.float32, got ", dtype_name(out));
  FP8EXT_CHECK_ARG(a.scalar_type() == ScalarType::Float8_e4m3fn, "a", "expected dtype torch.float8_e4m3fn, got ",
                   dtype_name(a.scalar_type()));
  FP8EXT_CHECK_ARG(b.scalar_type() == ScalarType::Float8_e4m3fn, "b", "expected dtype torch.float8_e4m3fn, got ",
                   dtype_name(b.scalar_type()));
  check_same_device(b, "b", a);
  FP8EXT_CHECK_ARG(!masked_m.has_value() || (a.dim() == 3 && b.dim() == 3), "a, b", "expected a 3-D a [G, M_max, K] "
                   "and a 3-D b [G, K, N], got a of shape ", shape_str(a.sizes()), " and b of shape ",
                   shape_str(b.sizes()));

  if (a.dim() == 2 && b.dim() == 3) {
    p.layout = GroupedLayout::k2d3d;
  } else if (a.dim() == 3 && b.dim() == 3) {
    p.layout = GroupedLayout::k3d3d;
  } else if (a.dim() == 2 && b.dim() == 2) {
    p.layout = GroupedLayout::k2d2d;
  } else {
    fail("fp8ext.scaled_grouped_mm: a, b: expected a 2-D a with a 3-D b (offs along M), a 3-D a with a 3-D b, or a "
         "2-D a with a 2-D b (offs along K), got a of shape ", shape_str(a.sizes()), " and b of shape ",
         shape_str(b.sizes()));
  }
  const int64_t last_a = a.dim() - 1;
  p.K = a.size(last_a);
  p.M = a.size(last_a - 1);
  p.N = b.size(b.dim() - 1);
  FP8EXT_CHECK_ARG(b.size(b.dim() - 2) == p.K, "b", "expected ", b.dim() == 3 ? "[G, K, N]" : "[K, N]", " with K = ",
                   p.K, " (a is ", shape_str(a.sizes()), "), got ", shape_str(b.sizes()));
  if (p.layout == GroupedLayout::k3d3d) {
    FP8EXT_CHECK_ARG(a.size(0) == b.size(0), "a, b", "expected the same number of groups, got a of shape ",
                     shape_str(a.sizes()), " and b of shape ", shape_str(b.sizes()));
    FP8EXT_CHECK_ARG(!offs.has_value(), "offs", "expected None with a 3-D a and a 3-D b (every group has a's M = ",
                     p.M, " rows), got a tensor");
    p.groups = a.size(0);
  } else {
    FP8EXT_CHECK_ARG(offs.has_value(), "offs", "expected the groups' int32 end offsets along ",
                     p.layout == GroupedLayout::k2d3d ? "a's rows" : "K", " for a ", layout_name(p.layout),
                     " call, got None");
    const TensorMeta& o = *offs;
    check_same_device(o, "offs", a);
    FP8EXT_CHECK_ARG(o.scalar_type() == ScalarType::Int, "offs", "expected dtype torch.int32, got ",
                     dtype_name(o.scalar_type()));
    FP8EXT_CHECK_ARG(o.dim() == 1 && (o.size(0) <= 1 || o.stride(0) == 1), "offs",
                     "expected a contiguous 1-D tensor of G end offsets, got shape ", shape_str(o.sizes()),
                     " with strides ", shape_str(o.strides()));
    p.groups = o.size(0);
    if (p.layout == GroupedLayout::k2d3d) {
      FP8EXT_CHECK_ARG(b.size(0) == p.groups, "offs", "expected G = ", b.size(0), " offsets (b is ",
                       shape_str(b.sizes()), "), got ", p.groups);
    }
  }
  FP8EXT_CHECK_ARG(p.groups >= 1 && p.groups <= kMaxGroups, p.layout == GroupedLayout::k3d3d ? "a" : "offs",
                   "expected 1 to ", kMaxGroups, " groups, got ", p.groups);
  FP8EXT_CHECK_ARG(p.K % 16 == 0, "a", "K = ", p.K, " must be a multiple of 16 (a is ", shape_str(a.sizes()), ")");
  FP8EXT_CHECK_ARG(p.N % 16 == 0, "b", "N = ", p.N, " must be a multiple of 16 (b is ", shape_str(b.sizes()), ")");
  FP8EXT_CHECK_ARG(p.M <= kMaxDim && p.K <= kMaxDim, "a", "a's sizes ", shape_str(a.sizes()),
                   " are larger than the supported 2^31 - 1");
  FP8EXT_CHECK_ARG(p.N <= kMaxDim, "b", "N = ", p.N, " is larger than the supported 2^31 - 1");
  check_operand_layout(a, "a", /*row_major=*/true, p.K);
  check_operand_layout(b, "b", /*row_major=*/false, p.K);

  // The form is scale_a's: [T], [G, M] or [G * M] row-wise; [T, ceil(K / 128)] or [G, M, ceil(K / 128)]
  // block-wise. The two never have the same shape (block-wise has one more dimension than row-wise).
  const int64_t G = p.groups, M = p.M, N = p.N, K = p.K;
  const int64_t gk = (K + kBlockK - 1) / kBlockK, hn = (N + kBlockN - 1) / kBlockN;
  const ScaleForm row_a = p.layout == GroupedLayout::k2d3d   ? ScaleForm{{M}, "[T]"}
                          : p.layout == GroupedLayout::k3d3d ? ScaleForm{{G, M}, "[G, M]"}
                                                             : ScaleForm{{G * M}, "[G * M]"};
  const ScaleForm block_a = p.layout == GroupedLayout::k2d3d ? ScaleForm{{M, gk}, "[T, ceil(K / 128)]"}
                                                             : ScaleForm{{G, M, gk}, "[G, M, ceil(K / 128)]"};
  const bool takes_block = p.layout != GroupedLayout::k2d2d;
  // quantize_rowwise returns a [T, 1] scale, which with K <= 128 is also the block-wise shape: beside a row-wise
  // scale_b, say which of the two to change rather than take the call as block-wise and blame scale_b.
  FP8EXT_CHECK_ARG(!(takes_block && gk == 1 && same_shape(scale_a, block_a.shape) && same_shape(scale_b, {G, N})),
                   "scale_a", "got ", shape_str(scale_a.sizes()), ", the block-wise shape ", block_a.name,
                   ", beside a row-wise scale_b ", shape_str(scale_b.sizes()), ": for row-wise scales pass "
                   "scale_a.squeeze(-1) (", row_a.name, " = ", shape_of(row_a.shape), "); for block-wise ones, scale_b "
                   "[G, ceil(K / 128), ceil(N / 128)] = ", shape_of({G, gk, hn}));
  p.blockwise = takes_block && same_shape(scale_a, block_a.shape);
  FP8EXT_CHECK_ARG(p.blockwise || same_shape(scale_a, row_a.shape), "scale_a", "expected shape ", row_a.name, " = ",
                   shape_of(row_a.shape),
                   takes_block ? str(" (row-wise) or ", block_a.name, " = ", shape_of(block_a.shape),
                                     " (block-wise) for layout ", layout_name(p.layout))
                               : std::string(" (row-wise; block-wise scales take the 2d x 3d and 3d x 3d layouts only, "
                                             "as a 2d x 2d call's K slices need not fall on 128-element blocks)"),
                   ", got ", shape_str(scale_a.sizes()),
                   trailing_one_hint(scale_a, row_a.shape));
  check_scale(scale_a, "scale_a", p.blockwise ? block_a : row_a, p, a, "");
  const char* why = ", as scale_a's shape says";
  if (p.blockwise) {
    check_scale(scale_b, "scale_b", {{G, gk, hn}, "[G, ceil(K / 128), ceil(N / 128)]"}, p, a, why);
    // A square grid (K = N) would pass the shape check untransposed and scale each block by its mirror's scale.
    FP8EXT_CHECK_ARG(gk == 1 || hn == 1 || scale_b.stride(1) == 1, "scale_b",
                     "block-wise 128 x 128 scales are taken as s.transpose(-2, -1) of the weights' [G, ceil(N / 128), "
                     "ceil(K / 128)] = [", G, ", ", hn, ", ", gk, "] scales s (stride(-2) == 1), got strides ",
                     shape_str(scale_b.strides()), "; pass scale_b=s.transpose(-2, -1)");
  } else if (p.layout == GroupedLayout::k2d2d) {
    check_scale(scale_b, "scale_b", {{G * N}, "[G * N]"}, p, a, why);
  } else {
    check_scale(scale_b, "scale_b", {{G, N}, "[G, N]"}, p, a, why);
  }

  if (masked_m.has_value()) {
    const TensorMeta& c = *masked_m;
    check_same_device(c, "masked_m", a);
    FP8EXT_CHECK_ARG(c.scalar_type() == ScalarType::Int, "masked_m", "expected dtype torch.int32, got ",
                     dtype_name(c.scalar_type()));
    FP8EXT_CHECK_ARG(c.dim() == 1 && c.size(0) == G && (G == 1 || c.stride(0) == 1), "masked_m",
                     "expected a contiguous 1-D tensor of G = ", G, " row counts, got shape ", shape_str(c.sizes()),
                     " with strides ", shape_str(c.strides()));
    p.masked = true;
    // A hint for the choice of kernel, not a count: out of range it would pick a kernel for rows no group can hold.
    FP8EXT_CHECK_ARG(!expected_m.has_value() || (*expected_m >= 0 && *expected_m <= p.M), "expected_m",
                     "expected a hint of rows per group within [0, M_max = ", p.M, "], got ", expected_m.value_or(0));
  }

  if (bias.has_value()) {
    const TensorMeta& t = *bias;
    check_same_device(t, "bias", a);
    FP8EXT_CHECK_ARG(same_shape(t, {G, N}), "bias", "expected one bias per group, shape [G, N] = ",
                     shape_of({G, N}), ", got ", shape_str(t.sizes()));
    FP8EXT_CHECK_ARG(t.scalar_type() == out, "bias", "expected dtype ", dtype_name(out), " (the out_dtype), got ",
                     dtype_name(t.scalar_type()), "; pass bias.to(", dtype_name(out), ")");
    FP8EXT_CHECK_ARG(t.rows_contiguous(), "bias",
                     "expected a contiguous tensor, got strides ", shape_str(t.strides()));
    if (t.numel() > 0) check_address_aligned(t_op, t, "bias");
  }
  return p;
}

void check_grouped_offsets(const int32_t* offs, const GroupedMmProblem& p) {
  const bool along_k = p.layout == GroupedLayout::k2d2d;
  const int64_t extent = along_k ? p.K : p.M;
  const char* what = along_k ? "K_total" : "a's rows T";
  int64_t previous = 0;
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t end = offs[g];
    FP8EXT_CHECK_ARG(end >= previous && end <= extent, "offs",
                     "expected non-decreasing end offsets within [0, ", what, " = ", extent, "], got offs[", g,
                     "] = ", end, (g > 0 ? str(" after offs[", g - 1, "] = ", previous) : std::string()));
    FP8EXT_CHECK_ARG(!along_k || end % 16 == 0, "offs", "offsets along K must be multiples of 16 (TMA reads each "
                     "group's K slice in 16-byte units), got offs[", g, "] = ", end);
    previous = end;
  }
}

void check_masked_counts(const int32_t* masked_m, const GroupedMmProblem& p) {
  const OpName name(kMaskedOp);
  for (int64_t g = 0; g < p.groups; ++g) {
    FP8EXT_CHECK_ARG(masked_m[g] >= 0 && masked_m[g] <= p.M, "masked_m", "expected row counts within [0, M = ", p.M,
                     "], got masked_m[", g, "] = ", masked_m[g]);
  }
}

#undef FP8EXT_CHECK_ARG

}  // namespace fp8ext
