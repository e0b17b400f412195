// The validation of scaled_mm, scaled_grouped_mm, linear, the quantize and the MoE routing ops on metadata alone (the _check_*_meta ops,
// PyTorch's stable ABI), for their fake implementations (python/fp8ext/ops.py, quantize.py): the same checks and
// messages as the eager backends, for traced calls. In every build. The schemas are in schemas.cpp.
#include <cstdint>
#include <optional>
#include <vector>

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/library.h>

#include "moe/moe_routing_op.h"
#include "ops/grouped_checks.h"
#include "ops/linear_op.h"
#include "ops/scaled_mm_checks.h"
#include "quantize/quantize_blockwise_op.h"
#include "quantize/quantize_rowwise_op.h"

namespace fp8ext {
namespace {

using Device = torch::stable::Device;

int64_t element_size(ScalarType t) {
  switch (t) {
    case ScalarType::Float8_e4m3fn: case ScalarType::Float8_e5m2: case ScalarType::Byte: case ScalarType::Char:
    case ScalarType::Bool: return 1;
    case ScalarType::BFloat16: case ScalarType::Half: case ScalarType::Short: return 2;
    case ScalarType::Float: case ScalarType::Int: return 4;
    default: return 8;  // double, int64, complex64; only the alignment of a refused dtype would differ
  }
}

// Each operand comes as [dim, sizes..., strides..., storage_offset], its dtype and its device. The address of a
// traced tensor is unknown; the caching allocators hand out storages aligned to far more than 16 bytes, so its
// alignment is that of its storage offset. The returned views point into v.
TensorMeta operand_meta(const std::vector<int64_t>& v, ScalarType dtype, Device device) {
  FP8EXT_CHECK(!v.empty() && v[0] >= 0 && v.size() == static_cast<size_t>(2 * v[0] + 2),
               "fp8ext: malformed operand metadata for a _check_*_meta op ", shape_str(v));
  const auto dim = static_cast<size_t>(v[0]);
  const int64_t offset = v[2 * dim + 1];
  const IntSpan all(v);
  return {all.slice(1, dim), all.slice(1 + dim, dim), dtype, {device.type(), device.index()}, offset,
          static_cast<std::uintptr_t>(offset) * static_cast<std::uintptr_t>(element_size(dtype))};
}

void check_scaled_mm_meta_op(std::vector<int64_t> a, ScalarType a_dtype, Device a_device, std::vector<int64_t> b,
                             ScalarType b_dtype, Device b_device, std::vector<int64_t> scale_a,
                             ScalarType scale_a_dtype, Device scale_a_device, std::vector<int64_t> scale_b,
                             ScalarType scale_b_dtype, Device scale_b_device, std::optional<std::vector<int64_t>> bias,
                             std::optional<ScalarType> bias_dtype, std::optional<Device> bias_device,
                             std::optional<ScalarType> out_dtype) {
  std::optional<TensorMeta> bias_meta;
  if (bias.has_value()) bias_meta = operand_meta(*bias, bias_dtype.value(), bias_device.value());
  check_scaled_mm_meta(operand_meta(a, a_dtype, a_device), operand_meta(b, b_dtype, b_device),
                       operand_meta(scale_a, scale_a_dtype, scale_a_device),
                       operand_meta(scale_b, scale_b_dtype, scale_b_device), bias_meta, out_dtype);
}

std::optional<TensorMeta> optional_meta(const std::optional<std::vector<int64_t>>& v, std::optional<ScalarType> dtype,
                                       std::optional<Device> device) {
  if (!v.has_value()) return std::nullopt;
  return operand_meta(*v, dtype.value(), device.value());
}

void check_scaled_grouped_mm_meta_op(std::vector<int64_t> a, ScalarType a_dtype, Device a_device,
                                     std::vector<int64_t> b, ScalarType b_dtype, Device b_device,
                                     std::vector<int64_t> scale_a, ScalarType scale_a_dtype, Device scale_a_device,
                                     std::vector<int64_t> scale_b, ScalarType scale_b_dtype, Device scale_b_device,
                                     std::optional<std::vector<int64_t>> offs, std::optional<ScalarType> offs_dtype,
                                     std::optional<Device> offs_device, std::optional<std::vector<int64_t>> bias,
                                     std::optional<ScalarType> bias_dtype, std::optional<Device> bias_device,
                                     std::optional<ScalarType> out_dtype,
                                     std::optional<std::vector<int64_t>> masked_m,
                                     std::optional<ScalarType> masked_m_dtype,
                                     std::optional<Device> masked_m_device,
                                     std::optional<int64_t> expected_m) {
  check_scaled_grouped_mm_meta(operand_meta(a, a_dtype, a_device), operand_meta(b, b_dtype, b_device),
                               operand_meta(scale_a, scale_a_dtype, scale_a_device),
                               operand_meta(scale_b, scale_b_dtype, scale_b_device),
                               optional_meta(offs, offs_dtype, offs_device),
                               optional_meta(bias, bias_dtype, bias_device), out_dtype,
                               optional_meta(masked_m, masked_m_dtype, masked_m_device), expected_m);
}

void check_linear_meta_op(std::vector<int64_t> x, ScalarType x_dtype, Device x_device, std::vector<int64_t> weight,
                          ScalarType weight_dtype, Device weight_device, std::vector<int64_t> weight_scale,
                          ScalarType weight_scale_dtype, Device weight_scale_device,
                          std::optional<std::vector<int64_t>> bias, std::optional<ScalarType> bias_dtype,
                          std::optional<Device> bias_device) {
  std::optional<TensorMeta> bias_meta;
  if (bias.has_value()) bias_meta = operand_meta(*bias, bias_dtype.value(), bias_device.value());
  check_linear_meta(operand_meta(x, x_dtype, x_device), operand_meta(weight, weight_dtype, weight_device),
                    operand_meta(weight_scale, weight_scale_dtype, weight_scale_device), bias_meta);
}

void check_quantize_rowwise_meta_op(std::vector<int64_t> sizes, std::vector<int64_t> strides, ScalarType x_dtype,
                                    std::optional<ScalarType> dtype, std::optional<double> scale_ub) {
  check_quantize_rowwise(sizes, strides, x_dtype, dtype, scale_ub);
}

void check_silu_mul_quantize_meta_op(std::vector<int64_t> sizes, std::vector<int64_t> strides, ScalarType x_dtype) {
  check_silu_mul_quantize(sizes, strides, x_dtype);
}

void check_quantize_blockwise_meta_op(std::vector<int64_t> sizes, std::vector<int64_t> strides, ScalarType x_dtype,
                                      std::optional<ScalarType> dtype) {
  check_quantize_blockwise(sizes, strides, x_dtype, dtype);
}

void check_moe_dispatch_meta_op(std::vector<int64_t> x, ScalarType x_dtype, Device x_device,
                                std::vector<int64_t> top_k_index, ScalarType top_k_index_dtype,
                                Device top_k_index_device, int64_t num_experts) {
  check_moe_dispatch(operand_meta(x, x_dtype, x_device),
                     operand_meta(top_k_index, top_k_index_dtype, top_k_index_device), num_experts);
}

void check_moe_combine_meta_op(std::vector<int64_t> o, ScalarType o_dtype, Device o_device, std::vector<int64_t> pos,
                               ScalarType pos_dtype, Device pos_device, std::vector<int64_t> weights,
                               ScalarType weights_dtype, Device weights_device) {
  check_moe_combine(operand_meta(o, o_dtype, o_device), operand_meta(pos, pos_dtype, pos_device),
                    operand_meta(weights, weights_dtype, weights_device));
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CompositeExplicitAutograd, m) {
  m.impl("_check_scaled_mm_meta", TORCH_BOX(&check_scaled_mm_meta_op));
  m.impl("_check_quantize_rowwise_meta", TORCH_BOX(&check_quantize_rowwise_meta_op));
  m.impl("_check_quantize_blockwise_meta", TORCH_BOX(&check_quantize_blockwise_meta_op));
  m.impl("_check_silu_mul_quantize_meta", TORCH_BOX(&check_silu_mul_quantize_meta_op));
  m.impl("_check_linear_meta", TORCH_BOX(&check_linear_meta_op));
  m.impl("_check_scaled_grouped_mm_meta", TORCH_BOX(&check_scaled_grouped_mm_meta_op));
  m.impl("_check_moe_dispatch_meta", TORCH_BOX(&check_moe_dispatch_meta_op));
  m.impl("_check_moe_combine_meta", TORCH_BOX(&check_moe_combine_meta_op));
}

}  // namespace fp8ext
