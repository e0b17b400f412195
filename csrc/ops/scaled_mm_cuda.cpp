// The CUDA backend of fp8ext::scaled_mm: validation, device guard and stream, and the routing
//
//   M, N or K == 0              -> the empty / zero (+bias) result, no GEMM launched
//   block-wise scales, cc 9.0   -> a block-scaled kernel: forced by name, else the dispatch's pick
//                                  (sm90/dispatch/blockwise_dispatch.h), or torch._scaled_mm block-wise where it
//                                  is predicted faster
//   both scales tensor-wise     -> torch._scaled_mm (cuBLASLt); a shape it declines falls through to the rows below
//   compute capability 9.0      -> a kernel of the family (csrc/sm90): forced by name, else the autotuner's
//                                  choice (opt-in, sm90/autotune/autotune.h), else the cost model's pick
//                                  (dispatch.h), or torch._scaled_mm row-wise where the model predicts torch faster
//   otherwise                   -> the float32 reference path on the GPU (correct, not fast)
//
// fp8ext::_scaled_mm_with_kernel takes the same arguments plus a kernel's name and runs that kernel alone, as a
// forced one (no autotuner, no backstop): the choices that fp8ext.compile hands Inductor's autotuner. An empty
// name is scaled_mm's own routing. It has no Python autograd guard, so that a compiled graph's call costs the host
// no Python.
//
// fp8ext::linear's CUDA backend (linear_cuda.cpp) quantizes and then takes the same route. The calls into
// torch._scaled_mm are in torch_backstop.cpp, the autotuner's timing in autotune_timing.cpp, the kernels'
// parameters in sm90_launch.cpp, and the faults that tests plant in place of torch's errors in testing_hooks.cpp.
//
// The torch side is PyTorch's stable ABI (torch/csrc/stable, torch/headeronly and the C shim), as in every
// torch-facing file; csrc/sm90 is plain CUDA/CUTLASS.
#include <optional>
#include <string>

#include <cuda_runtime.h>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "ops/scaled_mm_cuda.h"

#include "ops/autotune_timing.h"
#include "ops/cuda_device.h"
#include "ops/sm90_launch.h"
#include "ops/testing_hooks.h"
#include "ops/torch_backstop.h"
#include "ops/torch_calls.h"
#include "reference/scaled_mm_reference.h"
#include "sm90/autotune/autotune.h"
#include "sm90/dispatch/blockwise_dispatch.h"

namespace fp8ext {

namespace st = torch::stable;

sm90::Selection chosen_kernel(const sm90::ProblemKey& key, const cudaDeviceProp& props, bool capturing, bool torch_ok,
                              std::string* untuned_bucket) {
  if (const sm90::BlockwiseKernelEntry* forced = sm90::forced_blockwise_kernel()) {
    fail("fp8ext.scaled_mm: the forced kernel '", forced->name, "' takes block-wise scales and does not compute "
         "this call (", sm90::describe(key), "); force a row-wise kernel, or make this call outside the "
         "`with fp8ext.force_kernel(...):` block");
  }
  if (const sm90::KernelChoice forced = sm90::forced_kernel()) {
    FP8EXT_CHECK(sm90::kernel_matches(*forced.kernel, key), "fp8ext.scaled_mm: the forced kernel '",
                forced.kernel->name, "' does not compute this call (", sm90::describe(key),
                "); make this call after the `with fp8ext.force_kernel(...):` block that forced it has ended "
                "(force_kernel is a context manager: calling it outside a `with` does nothing), "
                "or force a kernel that computes it");
    return {forced};
  }
  if (sm90::autotune_enabled()) {
    std::string bucket = sm90::autotune_bucket(key, device_key(props));
    const sm90::KernelChoice tuned = sm90::autotune_lookup(bucket, key);
    if (!tuned) {
      if (untuned_bucket != nullptr && !capturing) *untuned_bucket = std::move(bucket);
    } else if (!(capturing && sm90::needs_workspace(*tuned.kernel))) {
      return {tuned};
    }
  }
  return sm90::select_kernel(key, props.multiProcessorCount, /*allow_workspace=*/!capturing, torch_ok);
}

namespace {

Tensor run_sm90(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                const std::optional<Tensor>& bias, const ScaledMmProblem& problem, const sm90::ProblemKey& key,
                const cudaDeviceProp& props, bool use_fast_accum, const sm90::KernelChoice& named = {}) {
  const cudaStream_t stream = current_cuda_stream(a.get_device_index());
  const bool capturing = stream_is_capturing(stream);
  std::string untuned_bucket;
  const sm90::Selection selection =
      named ? sm90::Selection{named}
            : chosen_kernel(key, props, capturing,
                            torch_can_run(problem, a.scalar_type(), b.scalar_type(), a.stride(0), bias.has_value(),
                                          aligned16(scale_a) && aligned16(scale_b)),
                            &untuned_bucket);
  sm90::KernelChoice choice = selection.choice;
  if (selection.torch_rowwise && untuned_bucket.empty()) {
    return rowwise_via_torch(a, b, scale_a, scale_b, problem, use_fast_accum);
  }
  if (!choice && !selection.torch_rowwise) {
    static std::once_flag once;
    warn_once(once, str("fp8ext.scaled_mm: this build has no sm_90a kernel for ", sm90::describe(key),
                        "; using the float32 reference path (correct, much slower)"));
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
  }

  Tensor out = st::new_empty(a, {problem.M, problem.N}, problem.out_dtype);
  sm90::GemmParams p = gemm_params(a, b, scale_a, scale_b, bias, problem, out, props.multiProcessorCount, stream);

  // Autotuning: the first call of a bucket not yet tuned times the cost model's top candidates.
  if (!untuned_bucket.empty()) {
    const sm90::KernelChoice tuned = tune_bucket(untuned_bucket, key, props, p, a);
    if (tuned) choice = tuned;
    if (!choice) return rowwise_via_torch(a, b, scale_a, scale_b, problem, use_fast_accum);
  }

  p.sched = choice.sched;
  const sm90::LaunchResult r = launch(*choice.kernel, p, a);
  FP8EXT_CHECK(r.ok, "fp8ext.scaled_mm: CUTLASS kernel '", sm90::choice_name(choice), "' failed at ", r.stage, ": ",
              r.detail,
              " (M=", problem.M, ", N=", problem.N, ", K=", problem.K, ", lda=", p.lda, ", ldb=", p.ldb, ")");
  return out;
}

// A named kernel (_scaled_mm_with_kernel), else a forced block-scaled kernel (a forced row-wise kernel cannot
// compute the call), else the dispatch's pick, without the stream-K kernels inside CUDA-graph capture, which may be
// torch._scaled_mm's block-wise path (the backstop). The float32 reference path where no kernel was built.
Tensor run_blockwise(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                     const std::optional<Tensor>& bias, const ScaledMmProblem& problem, const cudaDeviceProp& props,
                     const sm90::BlockwiseKernelEntry* named = nullptr) {
  const sm90::OutType out_type = to_out_type(problem.out_dtype);
  const cudaStream_t stream = current_cuda_stream(a.get_device_index());
  FP8EXT_CHECK(named != nullptr || !sm90::forced_kernel(), "fp8ext.scaled_mm: the forced kernel '",
               sm90::choice_name(sm90::forced_kernel()), "' takes row-wise or tensor-wise scales and does not "
               "compute this block-wise call; force a block-wise kernel (fp8ext.blockwise_kernel_names()), or make "
               "this call outside the `with fp8ext.force_kernel(...):` block");
  const sm90::BlockwiseKernelEntry* kernel = named != nullptr ? named : sm90::forced_blockwise_kernel();
  if (kernel != nullptr) {
    FP8EXT_CHECK(kernel->traits.out == out_type, "fp8ext.scaled_mm: the forced kernel '", kernel->name,
                 "' writes ", sm90::to_string(kernel->traits.out), ", not the ", dtype_name(problem.out_dtype),
                 " this call asks for");
    FP8EXT_CHECK(kernel->traits.max_m == 0 || problem.M <= kernel->traits.max_m, "fp8ext.scaled_mm: the forced "
                 "kernel '", kernel->name, "' computes M <= ", kernel->traits.max_m, ", not M = ", problem.M);
  } else {
    const bool capturing = stream_is_capturing(stream);
    const bool torch_ok = torch_can_run_blockwise(a, b, scale_a, scale_b, bias, problem);
    sm90::BlockwiseSelection s = sm90::select_blockwise_kernel(
        problem.M, problem.N, problem.K, out_type, props.multiProcessorCount, /*allow_workspace=*/!capturing, torch_ok);
    if (s.torch_blockwise) {
      if (std::optional<Tensor> out = blockwise_via_torch(a, b, scale_a, scale_b, problem)) return *out;
      s = sm90::select_blockwise_kernel(problem.M, problem.N, problem.K, out_type, props.multiProcessorCount,
                                        /*allow_workspace=*/!capturing, /*torch_can_run=*/false);
    }
    kernel = s.kernel;
  }
  if (kernel == nullptr) {
    static std::once_flag once;
    warn_once(once, str("fp8ext.scaled_mm: this build has no block-scaled sm_90a kernel writing ",
                        dtype_name(problem.out_dtype), "; using the float32 reference path (correct, much slower)"));
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
  }
  Tensor out = st::new_empty(a, {problem.M, problem.N}, problem.out_dtype);
  const sm90::BlockwiseParams p =
      blockwise_params(a, b, scale_a, scale_b, bias, problem, out, props.multiProcessorCount, stream);
  const sm90::LaunchResult r = launch(*kernel, p, a);  // stream-K's workspace from the caching allocator
  FP8EXT_CHECK(r.ok, "fp8ext.scaled_mm: CUTLASS kernel '", kernel->name, "' failed at ", r.stage, ": ", r.detail,
               " (M=", problem.M, ", N=", problem.N, ", K=", problem.K, ", lda=", p.lda, ", ldb=", p.ldb,
               ", block-wise scales)");
  return out;
}

}  // namespace

Tensor scaled_mm_cuda(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, std::optional<Tensor> bias,
                      std::optional<ScalarType> out_dtype, bool use_fast_accum) {
  const ScaledMmProblem problem = check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype);
  const int device = a.get_device_index();
  const st::accelerator::DeviceGuard guard(device);

  // Empty M, N or K: the reference path returns the empty / zero (+bias) result without a GEMM.
  if (problem.M == 0 || problem.N == 0 || problem.K == 0) {
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
  }

  const cudaDeviceProp& props = device_properties(device);
  const int cc = routing_cc(props);
  if (problem.blockwise && cc == 90) return run_blockwise(a, b, scale_a, scale_b, bias, problem, props);
  if (problem.tensorwise() && cc >= 89) {
    try {
      throw_planted_tensorwise_fault();
      return tensorwise_via_torch(a, b, scale_a, scale_b, bias, problem, use_fast_accum);
    } catch (const AtenError& e) {
      // cuBLASLt declines some shapes that the contract admits. fp8ext's own kernels take tensor-wise scales
      // too; use them (or the reference path) rather than fail a valid call. Any other error (out of memory, a
      // CUDA error, a bug) propagates unchanged: recomputing would hide it and change the numerics. A torch that
      // does not pass its message on (before 2.13) leaves the cause unknown; then fp8ext's kernels get the call,
      // as they would after a decline: a genuine out-of-memory or CUDA error fails them in turn.
      if (e.message_known && (out_of_memory(e) || !cublaslt_declined(e))) throw;
      const std::string what = e.what();
      static std::once_flag once;
      warn_once(once, str("fp8ext.scaled_mm: torch._scaled_mm ",
                          e.message_known ? "declined a tensor-wise call (" : "failed on a tensor-wise call (",
                          what.substr(0, what.find('\n')), "); computing it with fp8ext's own kernels instead"));
    }
  }
  if (cc != 90) {
    // Once per process, so that a slow program on such a GPU says why.
    static std::once_flag once;
    warn_once(once, str("fp8ext.scaled_mm: this GPU (", props.name, ", compute capability ", cc / 10, ".", cc % 10,
                        ") has no fp8ext kernels, which need compute capability 9.0 (sm_90a); row-wise and "
                        "block-wise calls, and tensor-wise calls that torch._scaled_mm cannot take, run on the "
                        "float32 reference path: correct, much slower"));
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
  }

  const sm90::ProblemKey key = problem_key(problem.M, problem.N, problem.K, problem.out_dtype, use_fast_accum,
                                           a.scalar_type(), b.scalar_type());
  return run_sm90(a, b, scale_a, scale_b, bias, problem, key, props, use_fast_accum);
}

// The named kernel, which must compute the call: a block-scaled kernel for block-wise scales, else a row-wise one
// (with scheduler options, "...@N4"). Checked as scaled_mm checks; no autotuner, no backstop. "" routes as
// scaled_mm does.
Tensor scaled_mm_with_kernel_cuda(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, std::optional<Tensor> bias,
                                  std::optional<ScalarType> out_dtype, bool use_fast_accum, std::string kernel) {
  if (kernel.empty()) return scaled_mm_cuda(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum);
  const ScaledMmProblem problem = check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype);
  const int device = a.get_device_index();
  const st::accelerator::DeviceGuard guard(device);
  if (problem.M == 0 || problem.N == 0 || problem.K == 0) {
    return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
  }
  const cudaDeviceProp& props = device_properties(device);
  FP8EXT_CHECK(routing_cc(props) == 90, "fp8ext._scaled_mm_with_kernel: kernel '", kernel, "' needs compute "
               "capability 9.0, this GPU (", props.name, ") has another");
  if (problem.blockwise) {
    const sm90::BlockwiseKernelEntry* entry = sm90::find_blockwise_kernel(kernel);
    FP8EXT_CHECK(entry != nullptr, "fp8ext._scaled_mm_with_kernel: '", kernel, "' is not a block-scaled kernel of "
                 "this build, and the call has block-wise scales (fp8ext.blockwise_kernel_names())");
    return run_blockwise(a, b, scale_a, scale_b, bias, problem, props, entry);
  }
  std::string error;
  const sm90::KernelChoice choice = sm90::parse_choice(kernel, &error);
  FP8EXT_CHECK(choice, "fp8ext._scaled_mm_with_kernel: ", error, "; fp8ext.kernel_names() lists the kernels");
  const sm90::ProblemKey key = problem_key(problem.M, problem.N, problem.K, problem.out_dtype, use_fast_accum,
                                           a.scalar_type(), b.scalar_type());
  FP8EXT_CHECK(sm90::kernel_matches(*choice.kernel, key), "fp8ext._scaled_mm_with_kernel: kernel '", kernel,
               "' does not compute this call (", sm90::describe(key), ")");
  return run_sm90(a, b, scale_a, scale_b, bias, problem, key, props, use_fast_accum, choice);
}

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) {
  m.impl("scaled_mm", TORCH_BOX(&scaled_mm_cuda));
  m.impl("_scaled_mm_with_kernel", TORCH_BOX(&scaled_mm_with_kernel_cuda));
}

}  // namespace fp8ext
