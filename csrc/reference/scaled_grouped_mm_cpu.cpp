// The CPU backends of scaled_grouped_mm and scaled_grouped_mm_masked: each group is the scaled_mm reference
// (scaled_mm_reference.h) on views of the group's rows, depth and scales, written into its part of the output. Rows
// of a 2d x 3d output past the last offset belong to no group and are zero, as are the groups of a 2d x 2d call
// whose K slice is empty (plus their bias); a masked group's rows past its count are not written. The offsets and
// counts are read on the host here, so this backend also checks their values.
#include <optional>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "ops/grouped_checks.h"
#include "ops/grouped_mm.h"
#include "reference/scaled_mm_reference.h"

namespace fp8ext {
namespace {

namespace st = torch::stable;

Tensor part(Tensor t, int64_t dim, int64_t start, int64_t length) { return st::narrow(t, dim, start, length); }

// Group g of a tensor whose first dimension indexes groups, without that dimension.
Tensor group_of(const Tensor& t, int64_t g) {
  Tensor one = part(t, 0, g, 1);
  const auto sizes = t.sizes();
  return st::reshape(one, std::vector<int64_t>(sizes.begin() + 1, sizes.end()));
}

// out_view = the scaled_mm reference of one group (rows x N, depth K_g); nothing to do for an empty group of rows.
void run_group(Tensor out_view, const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
               const std::optional<Tensor>& bias, const ScaledMmProblem& problem) {
  if (problem.M == 0) return;
  st::copy_(out_view, scaled_mm_reference(a, b, scale_a, scale_b, bias, problem));
}

Tensor scaled_grouped_mm_cpu(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, std::optional<Tensor> offs,
                             std::optional<Tensor> bias, std::optional<ScalarType> out_dtype,
                             bool /*use_fast_accum: fp32 either way*/) {
  const GroupedMmProblem p = check_scaled_grouped_mm_args(a, b, scale_a, scale_b, offs, bias, out_dtype);
  const int32_t* ends = offs.has_value() ? static_cast<const int32_t*>(offs->const_data_ptr()) : nullptr;
  if (ends != nullptr) check_grouped_offsets(ends, p);
  Tensor out = new_grouped_output(a, p);
  if (p.layout != GroupedLayout::k3d3d) st::zero_(out);  // rows past the last offset; empty K slices
  const int64_t N = p.N;
  int64_t start = 0;
  for (int64_t g = 0; g < p.groups; ++g) {
    const std::optional<Tensor> bias_g = bias.has_value() ? std::optional<Tensor>(group_of(*bias, g)) : std::nullopt;
    switch (p.layout) {
      case GroupedLayout::k2d3d: {
        const int64_t rows = ends[g] - start;
        const Tensor sa = part(scale_a, 0, start, rows);
        run_group(part(out, 0, start, rows), part(a, 0, start, rows), group_of(b, g), sa, group_of(scale_b, g),
                  bias_g, p.group(rows, p.K));
        start = ends[g];
        break;
      }
      case GroupedLayout::k3d3d:
        run_group(group_of(out, g), group_of(a, g), group_of(b, g), group_of(scale_a, g), group_of(scale_b, g),
                  bias_g, p.group(p.M, p.K));
        break;
      case GroupedLayout::k2d2d: {
        const int64_t depth = ends[g] - start;
        run_group(group_of(out, g), part(a, 1, start, depth), part(b, 0, start, depth),
                  part(scale_a, 0, g * p.M, p.M), part(scale_b, 0, g * N, N), bias_g, p.group(p.M, depth));
        start = ends[g];
        break;
      }
    }
  }
  return out;
}

Tensor scaled_grouped_mm_masked_cpu(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor masked_m,
                                    std::optional<Tensor> bias, std::optional<ScalarType> out_dtype,
                                    bool /*use_fast_accum*/, std::optional<int64_t> expected_m) {
  const GroupedMmProblem p =
      check_scaled_grouped_mm_args(a, b, scale_a, scale_b, std::nullopt, bias, out_dtype, masked_m, expected_m);
  const auto* counts = static_cast<const int32_t*>(masked_m.const_data_ptr());
  check_masked_counts(counts, p);
  Tensor out = new_grouped_output(a, p);
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t rows = counts[g];
    const std::optional<Tensor> bias_g = bias.has_value() ? std::optional<Tensor>(group_of(*bias, g)) : std::nullopt;
    run_group(part(group_of(out, g), 0, 0, rows), part(group_of(a, g), 0, 0, rows), group_of(b, g),
              part(group_of(scale_a, g), 0, 0, rows), group_of(scale_b, g), bias_g, p.group(rows, p.K));
  }
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CPU, m) {
  m.impl("scaled_grouped_mm", TORCH_BOX(&scaled_grouped_mm_cpu));
  m.impl("scaled_grouped_mm_masked", TORCH_BOX(&scaled_grouped_mm_masked_cpu));
}

}  // namespace fp8ext
