// The CUDA backends of fp8ext::moe_dispatch and fp8ext::moe_combine (PyTorch's stable ABI): validation, device
// guard, the outputs and the current stream. The kernels (moe_routing.cu, and the row-wise quantize reading rows
// through an index) are plain CUDA.
#include <tuple>
#include <vector>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "moe/moe_routing_op.h"
#include "ops/scaled_mm.h"
#include "ops/torch_calls.h"

namespace fp8ext {
namespace {

// Two launches: the route (one CTA) and the quantize of row r from x's row tokens[r] (tokens is scratch).
std::tuple<Tensor, Tensor, Tensor, Tensor> moe_dispatch_cuda(Tensor x, Tensor top_k_index, int64_t num_experts) {
  const MoeDispatchProblem p = check_moe_dispatch(tensor_meta(x), tensor_meta(top_k_index), num_experts);
  const int32_t device = x.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  const int64_t slots = p.tokens * p.k;
  Tensor q = torch::stable::new_empty(x, std::vector<int64_t>{slots, p.H}, ScalarType::Float8_e4m3fn);
  Tensor scale = torch::stable::new_empty(x, std::vector<int64_t>{slots}, ScalarType::Float);
  Tensor offs = torch::stable::new_empty(x, std::vector<int64_t>{num_experts}, ScalarType::Int);
  Tensor pos = torch::stable::new_empty(x, std::vector<int64_t>{p.tokens, p.k}, ScalarType::Int);
  Tensor tokens = torch::stable::new_empty(x, std::vector<int64_t>{slots}, ScalarType::Int);
  const cudaStream_t stream = current_cuda_stream(device);

  MoeRouteParams route;
  route.ids = top_k_index.const_data_ptr();
  route.ids_int64 = top_k_index.scalar_type() == ScalarType::Long;
  route.slots = slots;
  route.k = static_cast<int>(p.k);
  route.num_experts = static_cast<int>(num_experts);
  route.offs = static_cast<int32_t*>(offs.mutable_data_ptr());
  route.tokens = static_cast<int32_t*>(tokens.mutable_data_ptr());
  route.pos = static_cast<int32_t*>(pos.mutable_data_ptr());
  cudaError_t err = launch_moe_route(route, stream);
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.moe_dispatch: CUDA error: ", cudaGetErrorString(err));

  QuantizeRowwiseParams quantize = p.quantize;
  quantize.rows = slots;
  quantize.x = x.const_data_ptr();
  quantize.q = q.mutable_data_ptr();
  quantize.scale = static_cast<float*>(scale.mutable_data_ptr());
  quantize.row_index = route.tokens;
  err = launch_quantize_rowwise(quantize, stream);
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.moe_dispatch: CUDA error: ", cudaGetErrorString(err));
  return {std::move(q), std::move(scale), std::move(offs), std::move(pos)};
}

Tensor moe_combine_cuda(Tensor o, Tensor pos, Tensor weights) {
  MoeCombineParams p = check_moe_combine(tensor_meta(o), tensor_meta(pos), tensor_meta(weights));
  const int32_t device = o.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  Tensor out = torch::stable::new_empty(o, std::vector<int64_t>{p.tokens, p.H}, o.scalar_type());
  p.o = o.const_data_ptr();
  p.w = weights.const_data_ptr();
  p.pos = static_cast<const int32_t*>(pos.const_data_ptr());
  p.out = out.mutable_data_ptr();
  const cudaError_t err = launch_moe_combine(p, current_cuda_stream(device));
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.moe_combine: CUDA error: ", cudaGetErrorString(err));
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) {
  m.impl("moe_dispatch", TORCH_BOX(&moe_dispatch_cuda));
  m.impl("moe_combine", TORCH_BOX(&moe_combine_cuda));
}

}  // namespace fp8ext
