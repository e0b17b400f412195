// The CUDA backend of fp8ext::quantize_rowwise (PyTorch's stable ABI): validation, device guard, the two outputs
// and the current stream; the kernel itself (quantize_rowwise.cu) is plain CUDA behind launch_quantize_rowwise.
#include <string>

#ifndef USE_CUDA
#define USE_CUDA  // shim.h declares its CUDA stream accessors only under it
#endif
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

#include "quantize_rowwise_op.h"
#include "torch_calls.h"

namespace fp8ext {
namespace {

std::tuple<Tensor, Tensor> quantize_rowwise_cuda(Tensor x, std::optional<ScalarType> dtype,
                                                 std::optional<double> scale_ub) {
  const int32_t device = x.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  QuantizeRowwiseCall c = prepare_quantize_rowwise(x, dtype, scale_ub);
  void* stream = nullptr;
  FP8EXT_SHIM_CHECK(aoti_torch_get_current_cuda_stream(device, &stream));
  const cudaError_t err = launch_quantize_rowwise(c.params, static_cast<cudaStream_t>(stream));
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.quantize_rowwise: CUDA error: ", cudaGetErrorString(err));
  return {std::move(*c.q), std::move(*c.scale)};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) { m.impl("quantize_rowwise", TORCH_BOX(&quantize_rowwise_cuda)); }

}  // namespace fp8ext
