// scaled_grouped_mm's validation on real tensors and its output, for its backends: the checks themselves are in
// grouped_checks.h, on metadata alone.
#pragma once

#include <optional>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "ops/grouped_checks.h"
#include "ops/scaled_mm.h"

namespace fp8ext {

inline GroupedMmProblem check_scaled_grouped_mm_args(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                                                     const Tensor& scale_b, const std::optional<Tensor>& offs,
                                                     const std::optional<Tensor>& bias,
                                                     std::optional<ScalarType> out_dtype,
                                                     const std::optional<Tensor>& masked_m = std::nullopt,
                                                     std::optional<int64_t> expected_m = std::nullopt) {
  const char* op = masked_m.has_value() ? "fp8ext.scaled_grouped_mm_masked" : "fp8ext.scaled_grouped_mm";
  const auto meta_of = [](const std::optional<Tensor>& t) {
    return t.has_value() ? std::optional<TensorMeta>(tensor_meta(*t)) : std::nullopt;
  };
  // masked_m is the masked op's required tensor, passed here as an optional (the other op has none).
  if (masked_m.has_value()) required(*masked_m, op, "masked_m");
  return check_scaled_grouped_mm_meta(tensor_meta(required(a, op, "a")), tensor_meta(required(b, op, "b")),
                                      tensor_meta(required(scale_a, op, "scale_a")),
                                      tensor_meta(required(scale_b, op, "scale_b")), meta_of(offs), meta_of(bias),
                                      out_dtype, meta_of(masked_m), expected_m);
}

// The output, contiguous: [T, N] for 2d x 3d, [G, M, N] otherwise (N is a multiple of 16, so every row starts
// 16-byte aligned).
inline Tensor new_grouped_output(const Tensor& a, const GroupedMmProblem& p) {
  if (p.layout == GroupedLayout::k2d3d) return torch::stable::new_empty(a, {p.M, p.N}, p.out_dtype);
  return torch::stable::new_empty(a, {p.groups, p.M, p.N}, p.out_dtype);
}

}  // namespace fp8ext
