// The CUDA backend of fp8ext::linear_rowwise (linear_rowwise_op.h has the op): validation, device guard, and the
// route
//
//   decode sizes (below), sm_90a       -> one kernel: the activation quantize fused into the tensor-core GEMV
//                                         (sm90/decode_linear.cu), bit for bit the two ops' result with that GEMV
//   everything else                    -> quantize_rowwise, then scaled_mm (linear_rowwise_two_ops), which
//                                         dispatch as they always do
//
// The fused kernel runs when all of these hold: compute capability 9.0 (as scaled_mm routes it); x bfloat16 with
// 1 <= M <= kFusionMaxM rows, each starting 16-byte aligned at one row stride, that fit in the kernel's shared
// memory (sm90/decode_linear.h: M * (K + 16) <= 96 KiB); weight rows 16-byte aligned;
// weight_scale and bias contiguous;
// use_fast_accum (the tensor-core GEMV sums as the fast CUTLASS kernels do); no kernel forced by name other than
// gemv_tc_m32_r16_s4 / _s8 (which then picks the fused twin: tests compare the two); and fusion not turned off
// with FP8EXT_LINEAR_FUSION=0 in the environment (read once; for measuring the two routes against each other).
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "linear_rowwise_op.h"
#include "scaled_mm.h"
#include "sm90/blockwise_dispatch.h"
#include "sm90/cost_model.h"
#include "sm90/decode_linear.h"
#include "sm90/dispatch.h"
#include "sm90/kernel_registry.h"
#include "torch_calls.h"

namespace fp8ext {
namespace {

namespace st = torch::stable;

// The most rows the fused kernel takes here. Past it, each block's two reads of the bf16 rows (for their amax,
// then for the GEMV) cost more than the launch they save (docs/model_path.md, Measured).
constexpr int64_t kFusionMaxM = 16;

bool fusion_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FP8EXT_LINEAR_FUSION");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The scaled_mm kernels whose sums the fused kernel reproduces, by K slices.
constexpr std::string_view kTwinS4 = "gemv_tc_m32_r16_s4_fast_bf16";
constexpr std::string_view kTwinS8 = "gemv_tc_m32_r16_s8_fast_bf16";

// The K slices of the fused kernel for this call: those of the forced twin, else of the twin that the cost model
// (sm90/cost_model.h, fitted for scaled_mm's dispatch) predicts faster; 0 where the fused kernel does not run.
int fused_slices(int64_t M, int64_t N, int64_t K, int sm_count) {
  if (const sm90::KernelChoice forced = sm90::forced_kernel()) {
    const std::string_view name = forced.kernel->name;
    return name == kTwinS4 ? 4 : (name == kTwinS8 ? 8 : 0);
  }
  if (sm90::forced_blockwise_kernel() != nullptr) return 0;  // scaled_mm then says why it cannot run
  static const sm90::KernelEntry* const s4 = sm90::find_kernel(kTwinS4);
  static const sm90::KernelEntry* const s8 = sm90::find_kernel(kTwinS8);
  if (s4 == nullptr || s8 == nullptr) return 0;  // a build without them (FP8EXT_KERNELS)
  const sm90::CostProblem problem{M, N, K, 2, sm_count};
  return sm90::estimate(*s8, problem).us < sm90::estimate(*s4, problem).us ? 8 : 4;
}

// x's row stride in elements when every row start is 16-byte aligned at one stride, else -1.
int64_t aligned_row_stride(const Tensor& x, const QuantizeRowwiseParams& q) {
  if (reinterpret_cast<std::uintptr_t>(x.const_data_ptr()) % 16 != 0) return -1;
  if (q.rows == 1) return q.K;  // the stride of a single row is never used
  int64_t ld = -1;
  if (q.outer_stride == 0) {
    ld = q.inner_stride;
  } else if (q.inner_rows == 1) {
    ld = q.outer_stride;
  } else if (q.outer_stride == q.inner_rows * q.inner_stride) {
    ld = q.inner_stride;
  }
  return ld > 0 && ld % 8 == 0 ? ld : -1;
}

Tensor linear_rowwise_cuda(Tensor x, Tensor weight, Tensor weight_scale, std::optional<Tensor> bias,
                           bool use_fast_accum) {
  const std::optional<TensorMeta> bias_meta =
      bias.has_value() ? std::optional<TensorMeta>(tensor_meta(*bias)) : std::nullopt;
  const LinearRowwiseProblem problem =
      check_linear_rowwise(tensor_meta(x), tensor_meta(weight), tensor_meta(weight_scale), bias_meta);
  const int device = x.get_device_index();
  const st::accelerator::DeviceGuard guard(device);

  const int64_t M = problem.x.rows, N = problem.gemm.N, K = problem.gemm.K;
  const bool candidate = fusion_enabled() && use_fast_accum && x.scalar_type() == ScalarType::BFloat16 &&
                         M <= kFusionMaxM && sm90::decode_linear_fits(M, K) && N > 0 && problem.gemm.scale_b_per_col &&
                         reinterpret_cast<std::uintptr_t>(weight.const_data_ptr()) % 16 == 0 &&
                         weight.stride(0) % 16 == 0 && weight_scale.stride(0) == 1 &&
                         (!bias.has_value() || bias->stride(0) == 1);
  const int64_t ldx = candidate ? aligned_row_stride(x, problem.x) : -1;
  const int sm_count = ldx > 0 ? sm90_sm_count(device) : 0;
  const int slices = sm_count > 0 ? fused_slices(M, N, K, sm_count) : 0;
  if (slices == 0) return linear_rowwise_two_ops(x, weight, weight_scale, bias, use_fast_accum);

  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = N;
  Tensor out = st::new_empty(x, out_shape, ScalarType::BFloat16);
  sm90::DecodeLinearParams p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.x = x.const_data_ptr();
  p.ldx = ldx;
  p.b = weight.const_data_ptr();
  p.ldb = weight.stride(0);
  p.scale_b = static_cast<const float*>(weight_scale.const_data_ptr());
  p.bias = bias.has_value() ? bias->const_data_ptr() : nullptr;
  p.out = out.mutable_data_ptr();
  p.ldo = N;
  p.sm_count = sm_count;
  p.stream = current_cuda_stream(device);
  const cudaError_t err = sm90::launch_decode_linear(p, slices);
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.linear_rowwise: CUDA error: ", cudaGetErrorString(err));
  return out;
}

// The scaled_mm kernel whose fused twin a call of M rows runs on sm_count SMs ("" where the two ops run), for
// tests and scripts: the route above without the checks of dtypes and alignment.
std::string linear_rowwise_twin(int64_t M, int64_t N, int64_t K, int64_t sm_count) {
  if (!fusion_enabled() || M > kFusionMaxM || !sm90::decode_linear_fits(M, K)) return "";
  const int slices = fused_slices(M, N, K, static_cast<int>(sm_count));
  return std::string(slices == 4 ? kTwinS4 : (slices == 8 ? kTwinS8 : ""));
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) { m.impl("linear_rowwise", TORCH_BOX(&linear_rowwise_cuda)); }

STABLE_TORCH_LIBRARY_FRAGMENT(fp8ext, m) { m.def("_linear_rowwise_twin(int M, int N, int K, int sm_count) -> str"); }

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CompositeExplicitAutograd, m) {
  m.impl("_linear_rowwise_twin", TORCH_BOX(&linear_rowwise_twin));
}

}  // namespace fp8ext
