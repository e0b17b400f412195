// scaled_mm's validation on real tensors (PyTorch's stable ABI), for its backends: the checks themselves are in
// scaled_mm_checks.h, on metadata alone. The CPU backend is the reference path (reference/scaled_mm_cpu.cpp), the
// CUDA backend the routing in scaled_mm_cuda.cpp.
#pragma once

#include <cstdint>
#include <optional>

#include <torch/csrc/stable/tensor.h>

#include "ops/required_tensor.h"
#include "ops/scaled_mm_checks.h"

namespace fp8ext {

using Tensor = torch::stable::Tensor;

// A real tensor's metadata for the checks (scaled_mm_checks.h). const_data_ptr: reading the address must not
// materialise a copy-on-write tensor.
inline TensorMeta tensor_meta(const Tensor& t) {
  return {t.sizes(),
          t.strides(),
          t.scalar_type(),
          {t.device().type(), t.device().index()},
          t.storage_offset(),
          reinterpret_cast<std::uintptr_t>(t.const_data_ptr())};
}

// check_scaled_mm_meta on the call's tensors.
inline ScaledMmProblem check_scaled_mm_args(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                                            const Tensor& scale_b, const std::optional<Tensor>& bias,
                                            std::optional<ScalarType> out_dtype) {
  constexpr const char* op = "fp8ext.scaled_mm";
  const std::optional<TensorMeta> bias_meta =
      bias.has_value() ? std::optional<TensorMeta>(tensor_meta(*bias)) : std::nullopt;
  return check_scaled_mm_meta(tensor_meta(required(a, op, "a")), tensor_meta(required(b, op, "b")),
                              tensor_meta(required(scale_a, op, "scale_a")),
                              tensor_meta(required(scale_b, op, "scale_b")), bias_meta, out_dtype);
}

}  // namespace fp8ext
