// The CUDA backends of fp8ext::scaled_grouped_mm and scaled_grouped_mm_masked: validation, device guard and
// stream, the grouped kernel for the call and its launch (sm90/grouped/grouped_gemm.cuh). Nothing here reads offs
// or masked_m: the kernel's prologue turns them into each group's problem on the device, so a call never waits for
// the GPU and can be captured in a CUDA graph. Their values are the caller's to get right here (offs non-decreasing,
// within a's rows or K_total, multiples of 16 along K; counts within [0, M]); values outside that range are
// clamped, so no memory outside the tensors is touched. Also registers _grouped_kernel_names (the grouped kernels of
// this build) and _scaled_grouped_mm_with_kernel (a call on a named kernel, masked where masked_m is given: the
// grouped suite times each kernel with it, to fit the choice below).
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

#include "ops/cuda_device.h"
#include "ops/grouped_mm.h"
#include "ops/sm90_launch.h"
#include "ops/testing_hooks.h"
#include "ops/torch_calls.h"
#include "sm90/grouped/grouped_params.h"

#include "sm90/grouped/grouped_dispatch.inc"  // kSwapMaxRowsPerGroup_*, kSplitMaxGroupRows_*, kNarrowMax*

namespace fp8ext {
namespace {

namespace st = torch::stable;

sm90::GroupedForm to_form(GroupedLayout l) {
  switch (l) {
    case GroupedLayout::k2d3d: return sm90::GroupedForm::k2d3d;
    case GroupedLayout::k3d3d: return sm90::GroupedForm::k3d3d;
    default: return sm90::GroupedForm::k2d2d;
  }
}

// The least K for the split-K kernel. Its slices cost a fixed time more than the 128 x 128 tile: the reduce, the
// fp32 tiles' epilogue and a kernel more, about 16 blocks of 128 K on the tuning set's OLMoE 2048 x 2048 experts
// (128 rows in one group on an H100: 8 slices in 10 us plus a 3.3 us reduce, the 128 x 128 tile in 11.6 us;
// bench/tuning/h100-2026-12-07-grouped-splitk-profile-17226a1.json). Halving the blocks saves that from 32 blocks on.
constexpr int64_t kSplitKMinDepth = 32 * 128;

// The grouped decode kernels (sm90/grouped/grouped_gemv.cu) take a 2d x 3d call of at most kGemvMaxRows rows in
// all (MoE decode of one token at top-8): its few groups with rows each read their weight once, and the other
// experts cost nothing. On the tuning models' decode rows they ran 1.165x the swapped tile's speed (0.96-1.51x). At
// most 8 rows, every group fits one tile of 8 tokens. A group of 9 to 32 rows is a decode call of that many rows,
// where scaled_mm's swapped tiles beat the decode kernel (docs/design.md, Decode), and such a group is what a
// skewed routing makes: Mixtral-8x22B's 32 rows in one group of 6144 x 16384 ran 2x slower than on the swapped tile.
// A call whose every group may hold rows (a masked call, a 3d x 3d one) of at most kGemvMaxRows rows per group (a
// masked call's expected_m) runs them too: on the tuning models' masked rows they ran 1.044x (fast), 1.031x (precise)
// and 1.073x (block-wise) the swapped tile's speed, 0.97-1.32x (records: docs/decisions.md).
constexpr int64_t kGemvMaxRows = 8;

// A split kernel's group limit (grouped_dispatch.inc), for the call's family: a group of more rows that also holds
// more than half of the call's rows runs on the large tile.
int64_t split_rows(const GroupedMmProblem& p, bool use_fast_accum) {
  return p.blockwise ? kSplitMaxGroupRows_blockwise
                     : use_fast_accum ? kSplitMaxGroupRows_rowwise_fast : kSplitMaxGroupRows_rowwise_precise;
}

// The kernel for a call, from what the host knows: a 2d x 3d call of at most kGemvMaxRows rows on the grouped decode
// kernel, and a masked or 3d x 3d call of at most that many rows per group; groups that average at most a fitted
// number of rows (MoE decode: a few tokens per expert; a masked call's expected_m, else its M) on swapped tiles 32
// tokens wide, where a group's tokens fill the MMA's narrow N side; larger groups on the 128 x 128 cooperative tile,
// or with fast accumulation above a fitted mean (kNarrowMaxRowsPerGroup) on the 128 x 256 one. A 2d x 3d call of few
// rows per group but more rows in all than split_rows() may still hold a large group (routing skewed to one
// expert), which the swapped tile runs at a fraction of the large tile's speed: it gets the family's split kernel,
// which sends each group to one of the two tiles on the device (grouped_gemm.cuh, grouped_prologue). The limits,
// per family, come from tools/fit_grouped_dispatch.py (grouped_dispatch.inc). Where even all rows in one group would
// fill at most half the SMs with 128 x 128 tiles (row-wise), such a group leaves the GPU half idle on the large tile:
// with K of at least kSplitKMinDepth, the split-K kernel runs it in K slices instead (sm90/grouped/grouped_split.cuh).
// Block-wise scales are promoted and scaled once per K group whatever use_fast_accum says, as in scaled_mm.
const sm90::GroupedKernelEntry& grouped_kernel(const GroupedMmProblem& p, bool use_fast_accum,
                                               std::optional<int64_t> expected_m, int sm_count) {
  const double rows_per_group = p.layout == GroupedLayout::k2d3d
                                    ? static_cast<double>(p.M) / static_cast<double>(p.groups)
                                    : static_cast<double>(p.masked ? expected_m.value_or(p.M) : p.M);
  const double limit = p.blockwise        ? kSwapMaxRowsPerGroup_blockwise
                       : use_fast_accum   ? kSwapMaxRowsPerGroup_rowwise_fast
                                          : kSwapMaxRowsPerGroup_rowwise_precise;
  const bool gemv = (p.layout == GroupedLayout::k2d3d && p.M <= kGemvMaxRows) ||
                    (p.layout == GroupedLayout::k3d3d && rows_per_group <= kGemvMaxRows);
  const bool few = rows_per_group <= limit;
  const bool split = few && p.layout == GroupedLayout::k2d3d && p.M > split_rows(p, use_fast_accum);
  const bool splitk = split && !p.blockwise && p.K >= kSplitKMinDepth &&
                      2 * ((p.M + 127) / 128) * ((p.N + 127) / 128) <= sm_count;
  const bool wide = !few && !p.blockwise && use_fast_accum && rows_per_group > kNarrowMaxRowsPerGroup_rowwise_fast;
  const char* accum = use_fast_accum ? "fast" : "precise";
  const std::string name =
      gemv     ? (p.blockwise ? std::string("grp_bw_gemv_tc_m32_r16_s2_bf16")
                              : str("grp_gemv_tc_m32_r16_s2_", accum, "_bf16"))
      : splitk ? str("grp_splitk_", accum, "_bf16")
      : split  ? (p.blockwise ? std::string("grp_bw_split_bf16") : str("grp_split_", accum, "_bf16"))
      : p.blockwise ? str(few ? "grp_bw_swap_coop_128x32x128_c1x1" : "grp_bw_coop_128x128x128_c1x1", "_bf16")
      : wide        ? std::string("grp_coop_128x256x128_c1x1_fast_bf16")
                    : str(few ? "grp_swap_pp_128x32x128_c1x1_" : "grp_coop_128x128x128_c1x1_", accum, "_bf16");
  const sm90::GroupedKernelEntry* kernel = sm90::GroupedRegistry::find(name);
  FP8EXT_CHECK(kernel != nullptr, "fp8ext.scaled_grouped_mm: this build has no grouped kernel '", name,
               "' (built with FP8EXT_KERNELS naming a subset)");
  return *kernel;
}

// The leading dimension of a's rows or b's columns; any value where there is a single one.
int64_t leading(const Tensor& t, int64_t dim, int64_t fallback) { return t.size(dim) <= 1 ? fallback : t.stride(dim); }

sm90::GroupedParams grouped_params(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                                   const std::optional<Tensor>& offs, const std::optional<Tensor>& bias,
                                   const GroupedMmProblem& problem, const Tensor& out, int sm_count,
                                   cudaStream_t stream) {
  sm90::GroupedParams p;
  p.form = to_form(problem.layout);
  p.groups = problem.groups;
  p.M = problem.M;
  p.N = problem.N;
  p.K = problem.K;
  p.a = a.const_data_ptr();
  p.lda = leading(a, a.dim() - 2, problem.K);
  p.a_group_stride = a.dim() == 3 ? a.stride(0) : 0;
  p.b = b.const_data_ptr();
  p.ldb = leading(b, b.dim() - 1, problem.K);
  p.b_group_stride = b.dim() == 3 ? b.stride(0) : 0;
  p.offs = offs.has_value() ? static_cast<const int32_t*>(offs->const_data_ptr()) : nullptr;
  p.out = out.data_ptr();
  p.scale_a = static_cast<const float*>(scale_a.const_data_ptr());
  p.scale_b = static_cast<const float*>(scale_b.const_data_ptr());
  // Scale strides (grouped_params.h); a size-1 dimension's stride is never used.
  if (problem.blockwise) {  // scale_a [T, Q] or [G, M, Q]; scale_b [G, Q, H]
    const int64_t d = scale_a.dim();
    p.scale_a_group_stride = d == 3 ? scale_a.stride(0) : 0;
    p.sa_stride_m = scale_a.stride(d - 2);
    p.sa_stride_q = scale_a.stride(d - 1);
    p.scale_b_group_stride = scale_b.stride(0);
    p.sb_stride_q = scale_b.stride(1);
    p.sb_stride_n = scale_b.stride(2);
  } else if (problem.layout == GroupedLayout::k2d2d) {  // [G * M] and [G * N], contiguous
    p.scale_a_group_stride = problem.M;
    p.scale_b_group_stride = problem.N;
  } else {  // [T] or [G, M], and [G, N], contiguous in the last dimension
    p.scale_a_group_stride = scale_a.dim() == 2 ? scale_a.stride(0) : 0;
    p.scale_b_group_stride = scale_b.stride(0);
  }
  p.bias = bias.has_value() ? bias->const_data_ptr() : nullptr;
  p.device_id = a.get_device_index();
  p.sm_count = sm_count;
  p.stream = stream;
  return p;
}

// Whether block-wise scales `s` hold each row's K groups side by side (dimension `q`) and the rows one after
// another (dimension `rows`), the one layout the grouped blockwise kernels read (run_grouped).
bool rows_of_k_groups(const Tensor& s, int64_t rows, int64_t q) {
  return (s.size(q) <= 1 || s.stride(q) == 1) && (s.size(rows) <= 1 || s.stride(rows) == s.size(q));
}

// The named kernel, which must take the call's scales (block-wise kernels are named grp_bw_...).
const sm90::GroupedKernelEntry& named_kernel(const GroupedMmProblem& p, const std::string& name) {
  const sm90::GroupedKernelEntry* kernel = sm90::GroupedRegistry::find(name);
  FP8EXT_CHECK(kernel != nullptr, "fp8ext._scaled_grouped_mm_with_kernel: no grouped kernel '", name,
               "' in this build");
  FP8EXT_CHECK(kernel->traits.out == sm90::OutType::kBF16, "fp8ext._scaled_grouped_mm_with_kernel: kernel '", name,
               "' writes a split-K call's float32 partial sums; it is a part of grp_splitk_*, not a kernel of its own");
  FP8EXT_CHECK((name.rfind("grp_bw_", 0) == 0) == p.blockwise, "fp8ext._scaled_grouped_mm_with_kernel: kernel '", name,
               "' takes ", p.blockwise ? "row-wise" : "block-wise", " scales, the call has ",
               p.blockwise ? "block-wise" : "row-wise", " ones");
  return *kernel;
}

// Both ops' CUDA path: the checked call, its output, the kernel (`kernel_name`'s, else the choice above) and the
// launch. `masked_m`: a masked call's counts.
Tensor run_grouped(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                   const std::optional<Tensor>& offs, const std::optional<Tensor>& masked_m,
                   const std::optional<Tensor>& bias, std::optional<ScalarType> out_dtype, bool use_fast_accum,
                   std::optional<int64_t> expected_m, const std::string& kernel_name = "") {
  const GroupedMmProblem problem =
      check_scaled_grouped_mm_args(a, b, scale_a, scale_b, offs, bias, out_dtype, masked_m, expected_m);
  const char* op = problem.masked ? "fp8ext.scaled_grouped_mm_masked" : "fp8ext.scaled_grouped_mm";
  const int device = a.get_device_index();
  const st::accelerator::DeviceGuard guard(device);
  const cudaDeviceProp& props = device_properties(device);
  FP8EXT_CHECK(routing_cc(props) == 90, op, ": its CUDA kernels need compute capability 9.0 (sm_90a); this GPU (",
               props.name, ") has another");
  FP8EXT_CHECK(problem.out_dtype == ScalarType::BFloat16, op, ": out_dtype: the CUDA kernels write torch.bfloat16 in "
               "this version, got ", dtype_name(problem.out_dtype), " (the CPU backend computes every output type)");
  Tensor out = new_grouped_output(a, problem);
  if (problem.M == 0 || problem.N == 0) return out;
  const sm90::GroupedKernelEntry& kernel =
      kernel_name.empty() ? grouped_kernel(problem, use_fast_accum, expected_m, props.multiProcessorCount)
                          : named_kernel(problem, kernel_name);
  const cudaStream_t stream = current_cuda_stream(device);
  // CUTLASS's grouped blockwise mainloop does not read the scale layouts it is given: it rebuilds each group's from
  // the group's extents, K groups side by side and one row (scale_a: per token; scale_b: per 128 weight columns)
  // after another. Block-wise scales in any other layout (torch's scale_a, strides (1, T), which quantize_blockwise
  // returns; a slice of a wider tensor) are copied into that one here, once per call.
  const bool blockwise = problem.blockwise;
  const int64_t d = scale_a.dim();
  const Tensor sa = blockwise && !rows_of_k_groups(scale_a, d - 2, d - 1) ? st::contiguous(scale_a) : scale_a;
  const Tensor sb = blockwise && !rows_of_k_groups(scale_b, 2, 1)
                        ? st::transpose(st::contiguous(st::transpose(scale_b, 1, 2)), 1, 2)
                        : scale_b;
  sm90::GroupedParams p =
      grouped_params(a, b, sa, sb, offs, bias, problem, out, props.multiProcessorCount, stream);
  p.counts = masked_m.has_value() ? static_cast<const int32_t*>(masked_m->const_data_ptr()) : nullptr;
  p.split_rows = split_rows(problem, use_fast_accum);  // read by split kernels only
  const sm90::LaunchResult r = launch(kernel, p, a);  // the tables and CUTLASS's workspace from the caching allocator
  FP8EXT_CHECK(r.ok, op, ": CUTLASS kernel '", kernel.name, "' failed at ", r.stage, ": ", r.detail,
               " (G=", problem.groups, ", M=", problem.M, ", N=", problem.N, ", K=", problem.K, ")");
  return out;
}

Tensor scaled_grouped_mm_cuda(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, std::optional<Tensor> offs,
                              std::optional<Tensor> bias, std::optional<ScalarType> out_dtype, bool use_fast_accum) {
  return run_grouped(a, b, scale_a, scale_b, offs, std::nullopt, bias, out_dtype, use_fast_accum, std::nullopt);
}

Tensor scaled_grouped_mm_masked_cuda(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor masked_m,
                                     std::optional<Tensor> bias, std::optional<ScalarType> out_dtype,
                                     bool use_fast_accum, std::optional<int64_t> expected_m) {
  return run_grouped(a, b, scale_a, scale_b, std::nullopt, masked_m, bias, out_dtype, use_fast_accum, expected_m);
}

Tensor scaled_grouped_mm_with_kernel(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, std::optional<Tensor> offs,
                                     std::optional<Tensor> bias, std::optional<ScalarType> out_dtype,
                                     bool use_fast_accum, std::string kernel, std::optional<Tensor> masked_m) {
  return run_grouped(a, b, scale_a, scale_b, offs, masked_m, bias, out_dtype, use_fast_accum, std::nullopt, kernel);
}

// The kernels a call can name: the bf16 ones (the float32 partial kernels are parts of the split-K kernels).
std::vector<std::string> grouped_kernel_names() {
  std::vector<std::string> names;
  for (const auto& k : sm90::GroupedRegistry::all()) {
    if (k.traits.out == sm90::OutType::kBF16) names.emplace_back(k.name);
  }
  return names;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) {
  m.impl("scaled_grouped_mm", TORCH_BOX(&scaled_grouped_mm_cuda));
  m.impl("scaled_grouped_mm_masked", TORCH_BOX(&scaled_grouped_mm_masked_cuda));
  m.impl("_scaled_grouped_mm_with_kernel", TORCH_BOX(&scaled_grouped_mm_with_kernel));
}

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CompositeExplicitAutograd, m) {
  m.impl("_grouped_kernel_names", TORCH_BOX(&grouped_kernel_names));
}

}  // namespace fp8ext
