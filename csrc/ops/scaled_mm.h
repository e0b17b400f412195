// Declarations shared by scaled_mm's torch-facing files (PyTorch's stable ABI): the op's validation on real tensors
// (the checks themselves are in scaled_mm_checks.h) and the float32 reference path, whose file also registers the
// CPU backend; the CUDA backend registers itself in scaled_mm_cuda.cpp.
#pragma once

#include <cstdint>
#include <optional>

#include <torch/csrc/stable/tensor.h>

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
  const std::optional<TensorMeta> bias_meta =
      bias.has_value() ? std::optional<TensorMeta>(tensor_meta(*bias)) : std::nullopt;
  return check_scaled_mm_meta(tensor_meta(a), tensor_meta(b), tensor_meta(scale_a), tensor_meta(scale_b), bias_meta,
                              out_dtype);
}

// out = (a @ b) * scale_a * scale_b (+ bias) computed in float32 with aten ops on whatever device the inputs
// are on. The CPU backend, the CUDA backend on GPUs without an sm_90a kernel for the case, and every backend's
// empty M, N or K (answered without a GEMM). It works on tiles of rows of a and columns of b whose float32
// temporaries (a's rows, b's columns, the tile's result and its scale product) take at most kReferenceChunkBytes
// together, plus at most a quarter of that for fp8 copies of padded views, as long as K <= 8M (beyond, one row
// and one column at a time: 8 bytes per K); only the output is full size.
constexpr int64_t kReferenceChunkBytes = int64_t{64} << 20;
Tensor scaled_mm_reference(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                           const std::optional<Tensor>& bias, const ScaledMmProblem& problem);

}  // namespace fp8ext
