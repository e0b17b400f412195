// The CUDA backend of fp8ext::scaled_mm: validation, device guard and stream, and the routing
//
//   M, N or K == 0              -> the empty / zero (+bias) result, no GEMM launched
//   both scales tensor-wise     -> torch._scaled_mm (cuBLASLt); a shape it declines falls through to the rows below
//   compute capability 9.0      -> a CUTLASS sm_90a kernel of the family (csrc/sm90), chosen by dispatch.cpp
//   otherwise                   -> the float32 reference path on the GPU (correct, not fast)
//
// This file and bindings.cpp are the only ones that use libtorch; csrc/sm90 is plain CUDA/CUTLASS.
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "scaled_mm.h"
#include "sm90/dispatch.h"
#include "sm90/gemm_params.h"
#include "sm90/kernel_registry.h"

namespace fp8ext {
namespace {

sm90::OutType to_out_type(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return sm90::OutType::kBF16;
    case at::kHalf: return sm90::OutType::kFP16;
    default: return sm90::OutType::kFP32;  // validation admits only these three
  }
}

at::Tensor tensorwise_via_torch(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                                const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                                const ScaledMmProblem& problem, bool use_fast_accum) {
  // cuBLASLt takes no bias with fp32 output (torch rejects it); add it afterwards in that one case.
  const bool bias_after = bias.has_value() && problem.out_dtype == at::kFloat;
  at::Tensor out = at::_scaled_mm(a, b, scale_a.reshape({}), scale_b.reshape({}), bias_after ? std::nullopt : bias,
                                  std::nullopt, problem.out_dtype, use_fast_accum);
  if (bias_after) out.add_(*bias);
  return out;
}

sm90::InType to_in_type(at::ScalarType t) {
  return t == at::kFloat8_e5m2 ? sm90::InType::kE5M2 : sm90::InType::kE4M3;
}

sm90::ProblemKey problem_key(int64_t M, int64_t N, int64_t K, at::ScalarType out_dtype, bool use_fast_accum,
                             at::ScalarType a_dtype, at::ScalarType b_dtype) {
  return {M,
          N,
          K,
          to_out_type(out_dtype),
          use_fast_accum ? sm90::Accum::kFast : sm90::Accum::kPrecise,
          to_in_type(a_dtype),
          to_in_type(b_dtype)};
}

// Forced kernel if one is set (it must compute this key), else the heuristic's choice; nullptr if none built.
const sm90::KernelEntry* choose_kernel(const sm90::ProblemKey& key, int sm_count) {
  if (const sm90::KernelEntry* forced = sm90::forced_kernel()) {
    TORCH_CHECK(sm90::kernel_matches(*forced, key), "fp8ext.scaled_mm: the forced kernel '", forced->name,
                "' does not compute this call (", sm90::describe(key),
                "); clear it with fp8ext.force_kernel(None) or force a matching one");
    return forced;
  }
  return sm90::heuristic_kernel(key, sm_count);
}

at::Tensor run_sm90(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                    const std::optional<at::Tensor>& bias, const ScaledMmProblem& problem,
                    const sm90::KernelEntry& kernel, int sm_count) {
  at::Tensor out = at::empty({problem.M, problem.N}, a.options().dtype(problem.out_dtype));
  sm90::GemmParams p;
  p.M = problem.M;
  p.N = problem.N;
  p.K = problem.K;
  p.a = a.data_ptr();
  p.lda = problem.M == 1 ? problem.K : a.stride(0);  // a size-1 dimension's stride is never used
  p.a_is_e5m2 = a.scalar_type() == at::kFloat8_e5m2;
  p.b = b.data_ptr();
  p.ldb = b.stride(1);
  p.out = out.data_ptr();
  p.ldo = problem.N;
  p.scale_a = scale_a.data_ptr<float>();
  p.scale_a_per_row = problem.scale_a_per_row;
  p.scale_b = scale_b.data_ptr<float>();
  p.scale_b_per_col = problem.scale_b_per_col;
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.device_id = a.get_device();
  p.sm_count = sm_count;
  p.stream = at::cuda::getCurrentCUDAStream(a.get_device()).stream();

  // Only the stream-K kernels need a workspace; it comes from the caching allocator, never cudaMalloc.
  at::Tensor workspace;
  p.workspace_bytes = kernel.workspace_size(p);
  if (p.workspace_bytes > 0) {
    workspace = at::empty({static_cast<int64_t>(p.workspace_bytes)}, a.options().dtype(at::kByte));
    p.workspace = workspace.data_ptr();
  }
  const sm90::LaunchResult r = kernel.launch(p);
  TORCH_CHECK(r.ok, "fp8ext.scaled_mm: CUTLASS kernel '", kernel.name, "' failed at ", r.stage, ": ", r.detail,
              " (M=", problem.M, ", N=", problem.N, ", K=", problem.K, ", lda=", p.lda, ", ldb=", p.ldb, ")");
  return out;
}

at::Tensor scaled_mm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                          const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                          std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
  const ScaledMmProblem problem = check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype);
  const c10::cuda::CUDAGuard guard(a.device());

  // Empty M, N or K: the reference path returns the empty / zero (+bias) result without a GEMM.
  if (problem.M == 0 || problem.N == 0 || problem.K == 0) {
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
  }

  const cudaDeviceProp* props = at::cuda::getDeviceProperties(a.get_device());
  const int cc = props->major * 10 + props->minor;
  if (problem.tensorwise() && cc >= 89) {
    try {
      return tensorwise_via_torch(a, b, scale_a, scale_b, bias, problem, use_fast_accum);
    } catch (const c10::Error& e) {
      // cuBLASLt declines some shapes that the contract admits (seen on the H200: M = 1, K = 16 gave
      // CUBLAS_STATUS_NOT_SUPPORTED). fp8ext's own kernels take tensor-wise scales too; use them (or the
      // reference path) rather than fail a valid call.
      const std::string what = e.what_without_backtrace();
      TORCH_WARN_ONCE("fp8ext.scaled_mm: torch._scaled_mm declined a tensor-wise call (",
                      what.substr(0, what.find('\n')), "); computing it with fp8ext's own kernels instead");
    }
  }
  if (cc != 90) return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);

  const sm90::ProblemKey key = problem_key(problem.M, problem.N, problem.K, problem.out_dtype, use_fast_accum,
                                           a.scalar_type(), b.scalar_type());
  const sm90::KernelEntry* kernel = choose_kernel(key, props->multiProcessorCount);
  if (kernel == nullptr) {
    TORCH_WARN_ONCE("fp8ext.scaled_mm: this build has no sm_90a kernel for ", sm90::describe(key),
                    "; using the float32 reference path (correct, much slower)");
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
  }
  return run_sm90(a, b, scale_a, scale_b, bias, problem, *kernel, props->multiProcessorCount);
}

// ---- Introspection and control, used by python/fp8ext (kernel_names, force_kernel, selected_kernel). ----

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const auto& k : sm90::all_kernels()) names.emplace_back(k.name);
  return names;
}

void force_kernel(const std::string& name) {
  if (name.empty()) {
    sm90::set_forced_kernel(nullptr);
    return;
  }
  const sm90::KernelEntry* k = sm90::find_kernel(name);
  TORCH_CHECK(k != nullptr, "fp8ext.force_kernel: no kernel named '", name,
              "' in this build; fp8ext.kernel_names() lists them");
  sm90::set_forced_kernel(k);
}

std::string selected_kernel(int64_t M, int64_t N, int64_t K, at::ScalarType out_dtype, bool use_fast_accum,
                            at::ScalarType a_dtype) {
  const sm90::ProblemKey key = problem_key(M, N, K, out_dtype, use_fast_accum, a_dtype, at::kFloat8_e4m3fn);
  const int sm_count = at::cuda::is_available() ? at::cuda::getCurrentDeviceProperties()->multiProcessorCount : 132;
  const sm90::KernelEntry* k = choose_kernel(key, sm_count);
  return k == nullptr ? std::string() : std::string(k->name);
}

}  // namespace

TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) { m.impl("scaled_mm", &scaled_mm_cuda); }

TORCH_LIBRARY_FRAGMENT(fp8ext, m) {
  m.def("_kernel_names() -> str[]", &kernel_names);
  m.def("_force_kernel(str name) -> ()", &force_kernel);
  m.def(
      "_selected_kernel(int M, int N, int K, ScalarType out_dtype, bool use_fast_accum, "
      "ScalarType a_dtype) -> str",
      &selected_kernel);
}

}  // namespace fp8ext
