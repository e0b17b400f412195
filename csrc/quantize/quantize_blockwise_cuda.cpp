// The CUDA backend of fp8ext::quantize_blockwise (PyTorch's stable ABI): validation, device guard, the two outputs
// and the current stream; the kernel itself (quantize_blockwise.cu) is plain CUDA behind launch_quantize_blockwise.
#include <tuple>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "quantize/quantize_blockwise_op.h"
#include "ops/torch_calls.h"

namespace fp8ext {
namespace {

std::tuple<Tensor, Tensor> quantize_blockwise_cuda(Tensor x, std::optional<ScalarType> dtype) {
  const int32_t device = x.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  QuantizeBlockwiseCall c = prepare_quantize_blockwise(x, dtype);
  const cudaError_t err = launch_quantize_blockwise(c.params, current_cuda_stream(device));
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.quantize_blockwise: CUDA error: ", cudaGetErrorString(err));
  return {std::move(*c.q), torch::stable::transpose(*c.scale_gm, 0, 1)};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) { m.impl("quantize_blockwise", TORCH_BOX(&quantize_blockwise_cuda)); }

}  // namespace fp8ext
