// Declarations shared by the torch-facing files of fp8ext::quantize_rowwise (PyTorch's stable ABI): its one
// validation and its outputs' allocation (quantize_rowwise_op.cpp, with the CPU backend). The CUDA backend
// registers itself in quantize_rowwise_cuda.cpp; the schema is in ops/schemas.cpp, the fake implementation in
// python/fp8ext/quantize.py.
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include <torch/csrc/stable/tensor.h>

#include "ops/op_errors.h"
#include "quantize/quantize_rowwise.h"

namespace fp8ext {

// The dtype checks of both quantize ops (this and quantize_blockwise_op.cpp): the FP8 dtype (default e4m3fn) and
// x's (bf16, fp16 or fp32); throws naming `op` and the argument, else returns the kernel's input and output types.
std::pair<QuantSrc, QuantDst> check_quantize_dtypes(ScalarType x_dtype, std::optional<ScalarType> dtype,
                                                   const char* op);

// Checks x's metadata, the FP8 dtype and scale_ub, and throws (op_errors.h) naming the argument, what is accepted
// and what was given; returns the kernel's parameters without the pointers. Reads metadata only, so that the
// fake implementation raises the same messages. `op` starts each message (fp8ext.linear checks its x here too).
QuantizeRowwiseParams check_quantize_rowwise(IntSpan sizes, IntSpan strides, ScalarType x_dtype,
                                             std::optional<ScalarType> dtype, std::optional<double> scale_ub,
                                             const char* op = "fp8ext.quantize_rowwise");

// One call, validated, with its two outputs allocated (and nothing else): q (x's shape, FP8, contiguous) and
// scale (x.shape[:-1] + (1,), float32), and the parameters pointing at x, q and scale. A CUDA caller sets its
// device guard first, so that the outputs land on x's device.
using Tensor = torch::stable::Tensor;

// The tensors are optional only because torch::stable::Tensor has no empty state; both are set. Hidden, as
// torch::stable::Tensor is: the type never leaves this library.
struct __attribute__((visibility("hidden"))) QuantizeRowwiseCall {
  QuantizeRowwiseParams params;
  std::optional<Tensor> q, scale;
};
QuantizeRowwiseCall prepare_quantize_rowwise(const Tensor& x, std::optional<ScalarType> dtype,
                                             std::optional<double> scale_ub);

// The allocation half of prepare_quantize_rowwise, for a caller that has already run check_quantize_rowwise on
// x (fp8ext.linear, within check_linear_meta): `params` is what that returned, and q's dtype is its dst.
QuantizeRowwiseCall allocate_quantize_rowwise(const Tensor& x, const QuantizeRowwiseParams& params);

// fp8ext::silu_mul_quantize_rowwise: x [M, 2I] (the gate half, then the up half) quantized as y = silu(gate) * up
// (QuantizeRowwiseParams::gated), e4m3 only. Its checks (metadata only, for the fake implementation too), and one
// call validated with its outputs allocated: q [M, I] float8_e4m3fn, scale [M, 1] float32. Its CPU backend is
// torch's silu and mul, then quantize_rowwise (python/fp8ext/quantize.py), the same bits as the kernel's.
QuantizeRowwiseParams check_silu_mul_quantize(IntSpan sizes, IntSpan strides, ScalarType x_dtype);
QuantizeRowwiseCall prepare_silu_mul_quantize(const Tensor& x);

}  // namespace fp8ext
