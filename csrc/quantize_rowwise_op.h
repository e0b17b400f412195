// Declarations shared by the libtorch-facing files of fp8ext::quantize_rowwise: its one validation, its
// outputs' allocation, and its CPU backend (quantize_rowwise_op.cpp). The CUDA backend registers itself in
// quantize_rowwise_cuda.cpp; the schema is in bindings.cpp, the fake implementation in python/fp8ext/quantize.py.
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "op_errors.h"
#include "quantize_rowwise.h"

namespace fp8ext {

// Checks x's metadata, the FP8 dtype and scale_ub, and throws (op_errors.h) naming the argument, what is accepted
// and what was given; returns the kernel's parameters without the pointers. Reads metadata only, so that the
// fake implementation raises the same messages.
QuantizeRowwiseParams check_quantize_rowwise(IntSpan sizes, IntSpan strides, ScalarType x_dtype,
                                             std::optional<ScalarType> dtype, std::optional<double> scale_ub);

// One call, validated, with its two outputs allocated (and nothing else): q (x's shape, FP8, contiguous) and
// scale (x.shape[:-1] + (1,), float32), and the parameters pointing at x, q and scale. A CUDA caller sets its
// device guard first, so that the outputs land on x's device.
struct QuantizeRowwiseCall {
  QuantizeRowwiseParams params;
  at::Tensor q, scale;
};
QuantizeRowwiseCall prepare_quantize_rowwise(const at::Tensor& x, std::optional<at::ScalarType> dtype,
                                             std::optional<double> scale_ub);

std::tuple<at::Tensor, at::Tensor> quantize_rowwise_cpu(const at::Tensor& x, std::optional<at::ScalarType> dtype,
                                                        std::optional<double> scale_ub);

}  // namespace fp8ext
