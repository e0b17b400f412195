// The CUDA backends of fp8ext::quantize_rowwise and fp8ext::silu_mul_quantize_rowwise (PyTorch's stable ABI): validation, device guard, the two outputs
// and the current stream; the kernel itself (quantize_rowwise.cu) is plain CUDA behind launch_quantize_rowwise.
#include <string>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

#include "quantize/quantize_rowwise_op.h"
#include "ops/torch_calls.h"

namespace fp8ext {
namespace {

std::tuple<Tensor, Tensor> quantize_rowwise_cuda(Tensor x, std::optional<ScalarType> dtype,
                                                 std::optional<double> scale_ub) {
  const int32_t device = x.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  QuantizeRowwiseCall c = prepare_quantize_rowwise(x, dtype, scale_ub);
  const cudaError_t err = launch_quantize_rowwise(c.params, current_cuda_stream(device));
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.quantize_rowwise: CUDA error: ", cudaGetErrorString(err));
  return {std::move(*c.q), std::move(*c.scale)};
}

std::tuple<Tensor, Tensor> silu_mul_quantize_rowwise_cuda(Tensor x) {
  const int32_t device = x.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  QuantizeRowwiseCall c = prepare_silu_mul_quantize(x);
  const cudaError_t err = launch_quantize_rowwise(c.params, current_cuda_stream(device));
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.silu_mul_quantize_rowwise: CUDA error: ", cudaGetErrorString(err));
  return {std::move(*c.q), std::move(*c.scale)};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) {
  m.impl("quantize_rowwise", TORCH_BOX(&quantize_rowwise_cuda));
  m.impl("silu_mul_quantize_rowwise", TORCH_BOX(&silu_mul_quantize_rowwise_cuda));
}

}  // namespace fp8ext
