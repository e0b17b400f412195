// Declarations shared by the torch-facing files of fp8ext::quantize_blockwise (PyTorch's stable ABI): its one
// validation and its outputs' allocation (quantize_blockwise_op.cpp, with the CPU backend). The CUDA backend
// registers itself in quantize_blockwise_cuda.cpp; the schema is in ops/schemas.cpp, the fake implementation and the
// public entry (fp8ext.quantize_blockwise, which also quantizes 128 x 128 weight blocks) in python/fp8ext/quantize.py.
#pragma once

#include <cstdint>
#include <optional>

#include <torch/csrc/stable/tensor.h>

#include "ops/op_errors.h"
#include "quantize/quantize_blockwise.h"

namespace fp8ext {

// Checks x's metadata and the FP8 dtype, and throws (op_errors.h) naming the argument, what is accepted and what
// was given; returns the kernel's parameters without the pointers. Reads metadata only, so that the fake
// implementation raises the same messages.
QuantizeBlockwiseParams check_quantize_blockwise(IntSpan sizes, IntSpan strides, ScalarType x_dtype,
                                                 std::optional<ScalarType> dtype);

using Tensor = torch::stable::Tensor;

// One call, validated, with its two outputs allocated (and nothing else): q ([M, K], FP8, contiguous) and the
// scales' [G, M] float32 buffer, and the parameters pointing at x, q and that buffer. The op returns the buffer
// transposed, (M, G) with strides (1, M). The tensors are optional only because torch::stable::Tensor has no empty
// state; both are set. A CUDA caller sets its device guard first, so that the outputs land on x's device.
struct __attribute__((visibility("hidden"))) QuantizeBlockwiseCall {
  QuantizeBlockwiseParams params;
  std::optional<Tensor> q, scale_gm;
};
QuantizeBlockwiseCall prepare_quantize_blockwise(const Tensor& x, std::optional<ScalarType> dtype);

}  // namespace fp8ext
