// The CUDA backend of fp8ext::quantize_rowwise: validation, device guard, the two outputs and the current
// stream; the kernel itself (quantize_rowwise.cu) is plain CUDA behind launch_quantize_rowwise.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "quantize_rowwise_op.h"

namespace fp8ext {
namespace {

std::tuple<at::Tensor, at::Tensor> quantize_rowwise_cuda(const at::Tensor& x, std::optional<at::ScalarType> dtype,
                                                         std::optional<double> scale_ub) {
  const c10::cuda::CUDAGuard guard(x.device());
  const QuantizeRowwiseCall c = prepare_quantize_rowwise(x, dtype, scale_ub);
  C10_CUDA_CHECK(launch_quantize_rowwise(c.params, at::cuda::getCurrentCUDAStream(x.get_device()).stream()));
  return {c.q, c.scale};
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) { m.impl("quantize_rowwise", &quantize_rowwise_cuda); }

}  // namespace fp8ext
