// The CUDA backend of fp8ext::linear (linear_op.h): quantize_rowwise, then scaled_mm's row-wise GEMM, in one call.
//
// On an sm_90 GPU, when the selection is a kernel of this build (the case of every layer of a converted model
// unless torch's backstop, autotuning or a kernel missing from the build takes it): the GEMM is launched here
// straight from the quantize's outputs, with the choice run_sm90 (scaled_mm_cuda.cpp) would make for the same
// problem, so the result is the two ops' bit for bit. Every other case runs scaled_mm itself on views of those
// outputs.
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "ops/cuda_device.h"
#include "ops/linear_op.h"
#include "ops/scaled_mm_cuda.h"
#include "ops/sm90_launch.h"
#include "ops/testing_hooks.h"
#include "ops/torch_backstop.h"
#include "ops/torch_calls.h"
#include "quantize/quantize_rowwise_op.h"
#include "ops/required_tensor.h"

namespace fp8ext {
namespace {

namespace st = torch::stable;

Tensor linear_cuda(Tensor x, Tensor weight, Tensor weight_scale, std::optional<Tensor> bias, bool use_fast_accum) {
  const std::optional<TensorMeta> bias_meta =
      bias.has_value() ? std::optional<TensorMeta>(tensor_meta(*bias)) : std::nullopt;
  constexpr const char* op = "fp8ext.linear";
  const LinearProblem lp =
      check_linear_meta(tensor_meta(required(x, op, "x")), tensor_meta(required(weight, op, "weight")),
                        tensor_meta(required(weight_scale, op, "weight_scale")), bias_meta);
  const ScaledMmProblem& problem = lp.mm;
  const int device = x.get_device_index();
  const st::accelerator::DeviceGuard guard(device);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = problem.N;
  if (problem.M == 0) return st::new_empty(x, out_shape, problem.out_dtype);

  QuantizeRowwiseCall q = allocate_quantize_rowwise(x, lp.quant);  // x was checked with the rest, above
  const cudaStream_t stream = current_cuda_stream(device);
  const cudaError_t err = launch_quantize_rowwise(q.params, stream);
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.linear: CUDA error: ", cudaGetErrorString(err));

  const cudaDeviceProp& props = device_properties(device);
  if (routing_cc(props) == 90) {
    const sm90::ProblemKey key = problem_key(problem.M, problem.N, problem.K, problem.out_dtype, use_fast_accum,
                                             ScalarType::Float8_e4m3fn, ScalarType::Float8_e4m3fn);
    // a is q viewed [M, K] (contiguous: lda = K), b the weight; both e4m3. The activation's scales are the
    // quantize's fresh output (aligned); the weight's may be a view.
    const bool torch_ok = torch_can_run(problem, ScalarType::Float8_e4m3fn, ScalarType::Float8_e4m3fn,
                                        /*lda=*/problem.K, bias.has_value(), aligned16(weight_scale));
    std::string untuned_bucket;
    const sm90::Selection s = chosen_kernel(key, props, stream_is_capturing(stream), torch_ok, &untuned_bucket);
    if (s.choice && !s.torch_rowwise && untuned_bucket.empty()) {
      Tensor out = st::new_empty(x, out_shape, problem.out_dtype);
      // a = q ([M, K], contiguous, e4m3), b = weight.t() (its columns are the weight's rows).
      auto p = gemm_params({q.params.q, problem.K}, {weight.data_ptr(), weight.stride(0)}, q.params.scale,
                           static_cast<const float*>(weight_scale.data_ptr()), /*a_is_e5m2=*/false,
                           bias.has_value() ? bias->data_ptr() : nullptr, out.data_ptr(), problem, device,
                           props.multiProcessorCount, stream);
      p.sched = s.choice.sched;
      const sm90::LaunchResult r = launch(*s.choice.kernel, p, x);
      FP8EXT_CHECK(r.ok, "fp8ext.linear: CUTLASS kernel '", sm90::choice_name(s.choice), "' failed at ", r.stage,
                   ": ", r.detail, " (M=", problem.M, ", N=", problem.N, ", K=", problem.K, ")");
      return out;
    }
  }
  const Tensor a = st::view(*q.q, {problem.M, problem.K});
  const Tensor scale_a = st::view(*q.scale, {problem.M, 1});
  // (1, N): the shape torch._scaled_mm takes, so that the backstop passes it on as it is.
  const Tensor scale_b = st::view(weight_scale, {1, problem.N});
  const Tensor out = scaled_mm_cuda(a, st::transpose(weight, 0, 1), scale_a, scale_b, bias, problem.out_dtype,
                                    use_fast_accum);
  return x.dim() == 2 ? out : st::view(out, out_shape);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) { m.impl("linear", TORCH_BOX(&linear_cuda)); }

}  // namespace fp8ext
