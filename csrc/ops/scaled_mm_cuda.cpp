// The CUDA backend of fp8ext::scaled_mm: validation, device guard and stream, and the routing
//
//   M, N or K == 0              -> the empty / zero (+bias) result, no GEMM launched
//   both scales tensor-wise     -> torch._scaled_mm (cuBLASLt); a shape it declines falls through to the rows below
//   compute capability 9.0      -> a kernel of the family (csrc/sm90): forced by name, else the autotuner's
//                                  choice (opt-in, sm90/autotune.h), else the cost model's pick (dispatch.h),
//                                  or torch._scaled_mm row-wise where the model predicts torch faster
//   otherwise                   -> the float32 reference path on the GPU (correct, not fast)
//
// and the CUDA backend of fp8ext::linear (linear_op.h), which quantizes and then takes the same route.
//
// The torch side is PyTorch's stable ABI (torch/csrc/stable, torch/headeronly and the C shim), as in every
// torch-facing file; csrc/sm90 is plain CUDA/CUTLASS.
#include <array>
#include <atomic>
#include <iomanip>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#ifndef USE_CUDA
#define USE_CUDA  // shim.h declares its CUDA stream accessors only under it
#endif
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>

#include "ops/linear_op.h"
#include "quantize/quantize_rowwise_op.h"
#include "ops/scaled_mm.h"
#include "sm90/autotune/autotune.h"
#include "sm90/autotune/autotune_cache.h"
#include "sm90/dispatch/blockwise_dispatch.h"
#include "sm90/blockwise/blockwise_gemm.h"
#include "sm90/dispatch/dispatch.h"
#include "sm90/common/gemm_params.h"
#include "sm90/rowwise/kernel_registry.h"
#include "ops/torch_calls.h"

namespace fp8ext {
namespace {

namespace st = torch::stable;

// ---- What libtorch's C++ API gave, through the stable ABI ----

// The device's properties, read once per device (cudaGetDeviceProperties takes far longer than a GEMM at M = 1).
const cudaDeviceProp& device_properties(int device) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<cudaDeviceProp>> props;
  const std::lock_guard lock(mu);
  if (device >= static_cast<int>(props.size())) props.resize(device + 1);
  if (!props[device]) {
    auto p = std::make_unique<cudaDeviceProp>();
    STD_CUDA_CHECK(cudaGetDeviceProperties(p.get(), device));
    props[device] = std::move(p);
  }
  return *props[device];
}

int current_device() {
  int device = 0;
  STD_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Whether this process sees a CUDA GPU (a CUDA build on a machine without one answers for an H200).
bool cuda_available() {
  static const bool available = [] {
    int n = 0;
    const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();  // no GPU is an answer here, not an error for the next CUDA call to report
    return ok;
  }();
  return available;
}

// A warning given once per process and call site (the `once` flag), as TORCH_WARN_ONCE.
void warn_once(std::once_flag& once, const std::string& message) {
  std::call_once(once, [&] { warn(message); });
}

sm90::OutType to_out_type(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16: return sm90::OutType::kBF16;
    case ScalarType::Half: return sm90::OutType::kFP16;
    default: return sm90::OutType::kFP32;  // validation admits only these three
  }
}

// torch._scaled_mm(a, b, scale_a, scale_b, bias, scale_result=None, out_dtype, use_fast_accum).
Tensor torch_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                       const std::optional<Tensor>& bias, ScalarType out_dtype, bool use_fast_accum) {
  std::array<StableIValue, 8> stack{st::detail::from(a),
                                    st::detail::from(b),
                                    st::detail::from(scale_a),
                                    st::detail::from(scale_b),
                                    st::detail::from(bias),
                                    st::detail::from(std::nullopt),
                                    st::detail::from(std::optional<ScalarType>(out_dtype)),
                                    st::detail::from(use_fast_accum)};
  call_aten("aten::_scaled_mm", "", stack);
  return st::detail::to<Tensor>(stack[0]);
}

Tensor tensorwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                            const std::optional<Tensor>& bias, const ScaledMmProblem& problem, bool use_fast_accum) {
  // cuBLASLt takes no bias with fp32 output (torch rejects it); add it afterwards in that one case
  // (out - (-1) * bias: the stable ops' subtract takes a double alpha, and -1 * bias is exact).
  const bool bias_after = bias.has_value() && problem.out_dtype == ScalarType::Float;
  Tensor out = torch_scaled_mm(a, b, st::reshape(scale_a, {}), st::reshape(scale_b, {}),
                               bias_after ? std::nullopt : bias, problem.out_dtype, use_fast_accum);
  if (bias_after) out = st::subtract(out, *bias, -1.0);
  return out;
}

sm90::InType to_in_type(ScalarType t) {
  return t == ScalarType::Float8_e5m2 ? sm90::InType::kE5M2 : sm90::InType::kE4M3;
}

sm90::ProblemKey problem_key(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, bool use_fast_accum,
                             ScalarType a_dtype, ScalarType b_dtype) {
  return {M,
          N,
          K,
          to_out_type(out_dtype),
          use_fast_accum ? sm90::Accum::kFast : sm90::Accum::kPrecise,
          to_in_type(a_dtype),
          to_in_type(b_dtype)};
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  STD_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// An operand as the kernels read it: its first element and its leading dimension (the stride between the rows
// of a, between the columns of b).
struct Operand {
  const void* data;
  int64_t ld;
};

// What both kernel families' parameters hold alike (sm90/gemm_params.h, sm90/blockwise_gemm.h): the problem, the
// operands, the output (`out`, the contiguous [M, N] result, already allocated), the bias and where to run.
template <class Params>
Params common_params(Operand a, Operand b, const void* bias, void* out, const ScaledMmProblem& problem, int device,
                     int sm_count, cudaStream_t stream) {
  Params p;
  p.M = problem.M;
  p.N = problem.N;
  p.K = problem.K;
  p.a = a.data;
  p.lda = problem.M == 1 ? problem.K : a.ld;  // a size-1 dimension's stride is never used
  p.b = b.data;
  p.ldb = b.ld;
  p.out = out;
  p.ldo = problem.N;
  p.bias = bias;
  p.device_id = device;
  p.sm_count = sm_count;
  p.stream = stream;
  return p;
}

template <class Params>
Params common_params(const Tensor& a, const Tensor& b, const std::optional<Tensor>& bias,
                     const ScaledMmProblem& problem, const Tensor& out, int sm_count, cudaStream_t stream) {
  return common_params<Params>({a.data_ptr(), a.stride(0)}, {b.data_ptr(), b.stride(1)},
                               bias.has_value() ? bias->data_ptr() : nullptr, out.data_ptr(), problem,
                               a.get_device_index(), sm_count, stream);
}

// The row-wise kernel parameters of one call: common_params', a's FP8 type, and the scales (M values of scale_a
// when problem.scale_a_per_row, N of scale_b when problem.scale_b_per_col, else one value each). From pointers,
// for fp8ext.linear, which launches on the quantize's outputs without making tensor views of them.
sm90::GemmParams gemm_params(Operand a, Operand b, const float* scale_a, const float* scale_b, bool a_is_e5m2,
                             const void* bias, void* out, const ScaledMmProblem& problem, int device, int sm_count,
                             cudaStream_t stream) {
  auto p = common_params<sm90::GemmParams>(a, b, bias, out, problem, device, sm_count, stream);
  p.a_is_e5m2 = a_is_e5m2;
  p.scale_a = scale_a;
  p.scale_a_per_row = problem.scale_a_per_row;
  p.scale_b = scale_b;
  p.scale_b_per_col = problem.scale_b_per_col;
  return p;
}

// The same from scaled_mm's tensors.
sm90::GemmParams gemm_params(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                             const std::optional<Tensor>& bias, const ScaledMmProblem& problem, const Tensor& out,
                             int sm_count, cudaStream_t stream) {
  return gemm_params({a.data_ptr(), a.stride(0)}, {b.data_ptr(), b.stride(1)},
                     static_cast<const float*>(scale_a.data_ptr()), static_cast<const float*>(scale_b.data_ptr()),
                     a.scalar_type() == ScalarType::Float8_e5m2, bias.has_value() ? bias->data_ptr() : nullptr,
                     out.data_ptr(), problem, a.get_device_index(), sm_count, stream);
}

// Launches one kernel. Only the stream-K kernels need a workspace; it comes from the caching allocator, never
// cudaMalloc, and dispatch keeps those kernels out of CUDA-graph capture unless one is forced by name.
// `like` is any tensor on the call's device. For both families (KernelEntry with GemmParams, BlockwiseKernelEntry
// with BlockwiseParams).
template <class Entry, class Params>
sm90::LaunchResult launch(const Entry& kernel, Params p, const Tensor& like) {
  std::optional<Tensor> workspace;
  p.workspace_bytes = kernel.workspace_size(p);
  if (p.workspace_bytes > 0) {
    workspace = st::new_empty(like, {static_cast<int64_t>(p.workspace_bytes)}, ScalarType::Byte);
    p.workspace = workspace->data_ptr();
  }
  return kernel.launch(p);
}

// A CUDA event destroyed with its scope, so that a CUDA error thrown mid-measurement does not leak it.
class ScopedEvent {
 public:
  ScopedEvent() { STD_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~ScopedEvent() { cudaEventDestroy(event_); }  // no check: a destructor must not throw
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// The autotuner's stopwatch: one launch on the call's own stream and operands, timed with events, after L2 is
// flushed by zeroing `flush` (when given and defined), so that a weight smaller than L2 is read from HBM as in a
// model's forward pass, not from the previous timing's copy in L2. Returns -1 if the kernel cannot run this
// problem. Writes into the call's output, which the chosen kernel then overwrites. Each candidate runs with the
// scheduler options the cost model chose for it.
double time_candidate_us(const sm90::KernelChoice& choice, sm90::GemmParams p, const Tensor& like,
                         std::optional<Tensor>* flush) {
  if (flush != nullptr && flush->has_value()) st::zero_(**flush);
  p.sched = choice.sched;
  const ScopedEvent start, stop;
  STD_CUDA_CHECK(cudaEventRecord(start.get(), p.stream));
  const bool ok = launch(*choice.kernel, p, like).ok;
  STD_CUDA_CHECK(cudaEventRecord(stop.get(), p.stream));
  STD_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  STD_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ok ? 1000.0 * ms : -1.0;
}

// Twice the L2 size, borrowed from the caching allocator for one tuning (given back to its cache afterwards);
// empty, and the timings unflushed, if it cannot be had (the device has no room for it: the stable ABI reports an
// out-of-memory error as any other, so any failure to allocate counts).
std::optional<Tensor> l2_flush_buffer(const cudaDeviceProp& props, const Tensor& like) {
  try {
    return st::new_empty(like, {2 * static_cast<int64_t>(props.l2CacheSize)}, ScalarType::Byte);
  } catch (const std::exception& e) {
    static std::once_flag once;
    warn_once(once, str("fp8ext.autotune: could not allocate a ", 2 * props.l2CacheSize,
                        "-byte buffer to flush L2 between timings (", e.what(),
                        "); timing candidates without the flush"));
    return std::nullopt;
  }
}

// What identifies the machine and software an autotuned choice was measured on: GPU name, SM count, and the
// CUDA, torch and fp8ext versions (the last three set by python/fp8ext at import, _set_software_key).
std::mutex g_software_mutex;
std::string g_software_key = "unknown";

std::string device_key(const cudaDeviceProp& props) {
  std::lock_guard<std::mutex> lock(g_software_mutex);
  return std::string(props.name) + "/" + std::to_string(props.multiProcessorCount) + "sm/" + g_software_key;
}

// Whether torch._scaled_mm's row-wise path can take this call exactly as given, so that the backstop may hand it
// over: bf16 output, e4m3 operands, one scale per row and per column, no bias, `a` without a padded leading
// dimension (lda, the stride between a's rows, is K). From plain facts, so that fp8ext.linear, whose `a` is
// the quantize's output and not a tensor it holds, asks the same question.
bool torch_can_run(const ScaledMmProblem& problem, ScalarType a_dtype, ScalarType b_dtype, int64_t lda,
                   bool has_bias) {
  return problem.out_dtype == ScalarType::BFloat16 && a_dtype == ScalarType::Float8_e4m3fn &&
         b_dtype == ScalarType::Float8_e4m3fn && problem.scale_a_per_row && problem.scale_b_per_col && !has_bias &&
         (problem.M == 1 || lda == problem.K);
}

// The backstop: torch._scaled_mm row-wise on the same tensors (scales as (M, 1) and (1, N) views).
Tensor rowwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                         const ScaledMmProblem& problem, bool use_fast_accum) {
  return torch_scaled_mm(a, b, st::reshape(scale_a, {problem.M, 1}), st::reshape(scale_b, {1, problem.N}),
                         std::nullopt, problem.out_dtype, use_fast_accum);
}

// A kernel forced by name wins (it must compute this key); then, when autotuning is on, the bucket's
// remembered choice (a stream-K one only outside graph capture); then the cost model's selection (which may be
// torch's row-wise path where torch_ok). Empty if none fits.
// When autotuning is on and the bucket has no choice yet, *untuned_bucket (if given) receives its name, so that
// the caller can tune it without computing the bucket again (never during capture: timing needs
// synchronisation, and the capture would record every candidate).
sm90::Selection chosen_kernel(const sm90::ProblemKey& key, const cudaDeviceProp& props, bool capturing, bool torch_ok,
                              std::string* untuned_bucket = nullptr) {
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

Tensor run_sm90(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                const std::optional<Tensor>& bias, const ScaledMmProblem& problem, const sm90::ProblemKey& key,
                const cudaDeviceProp& props, bool use_fast_accum) {
  const cudaStream_t stream = current_cuda_stream(a.get_device_index());
  const bool capturing = stream_is_capturing(stream);
  std::string untuned_bucket;
  const sm90::Selection selection =
      chosen_kernel(key, props, capturing,
                    torch_can_run(problem, a.scalar_type(), b.scalar_type(), a.stride(0), bias.has_value()),
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
    std::string file_error;
    // The flush buffer is borrowed on the first timed launch: autotune_tune calls the timer only under its
    // tuning lock and only if no other thread tuned the bucket meanwhile, and the warm-up launches need no flush.
    std::optional<std::optional<Tensor>> flush;
    const auto timer = [&](const sm90::KernelChoice& c, bool warm_up) {
      if (warm_up) return time_candidate_us(c, p, a, nullptr);
      if (!flush) flush = l2_flush_buffer(props, a);
      return time_candidate_us(c, p, a, &*flush);
    };
    const sm90::KernelChoice tuned =
        sm90::autotune_tune(untuned_bucket, key, props.multiProcessorCount, timer, &file_error);
    if (!file_error.empty()) warn("fp8ext.autotune: could not save the cache file: " + file_error);
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

// Set once torch._scaled_mm has refused a block-wise call that torch_can_run_blockwise admitted (a torch whose
// checks differ from 2.11's, where the backstop was measured): the backstop is then off for block-wise calls.
std::atomic<bool> g_torch_blockwise_refused{false};

// Whether the running torch is 2.11, the release whose block-wise path was measured (which shapes it computes
// right: sm90::torch_blockwise_computes). Another release may get other shapes wrong, without an error, so the
// block-wise backstop stays off there until measured. Set with the software key at import.
std::atomic<bool> g_torch_blockwise_measured{false};

// Both flags above: torch 2.11 and no refusal yet.
bool torch_blockwise_backstop_usable() {
  return g_torch_blockwise_measured.load(std::memory_order_relaxed) &&
         !g_torch_blockwise_refused.load(std::memory_order_relaxed);
}

// ---- A planted fault, for tests only (tests/test_robustness_gpu.py) ----
// The routing below must tell a shape cuBLASLt declines from an out-of-memory or CUDA error, and must warn on a GPU
// other than sm_90, but neither can be provoked at will on the H200 that runs the tests. The internal op
// _testing_fault(str) plants one: "tensorwise=not_supported", "tensorwise=oom" or "tensorwise=cuda" make the
// tensor-wise route throw what torch would, "blockwise=refused" or "blockwise=oom" make the block-wise backstop's
// torch call throw (as a torch whose block-wise checks differ from 2.11's would, or out of memory), and
// "cc=<major><minor>" routes as if the GPU had that compute capability. "" removes it, and turns the block-wise
// backstop back on after a refusal. Not API: nothing else may call it.
struct PlantedFault {
  std::mutex mu;
  std::string tensorwise;  // "", "not_supported", "oom" or "cuda"
  std::string blockwise;   // "", "refused" or "oom"
  int cc = 0;              // 0: the device's own compute capability
};

PlantedFault& planted_fault() {
  static PlantedFault f;
  return f;
}

void testing_fault(std::string fault) {
  PlantedFault& f = planted_fault();
  const std::lock_guard lock(f.mu);
  f.tensorwise.clear();
  f.blockwise.clear();
  f.cc = 0;
  if (fault.rfind("tensorwise=", 0) == 0) {
    f.tensorwise = fault.substr(11);
    FP8EXT_CHECK(f.tensorwise == "not_supported" || f.tensorwise == "oom" || f.tensorwise == "cuda",
                 "fp8ext._testing_fault: unknown tensor-wise fault '", f.tensorwise, "'");
  } else if (fault.rfind("blockwise=", 0) == 0) {
    f.blockwise = fault.substr(10);
    FP8EXT_CHECK(f.blockwise == "refused" || f.blockwise == "oom", "fp8ext._testing_fault: unknown block-wise "
                 "fault '", f.blockwise, "'");
  } else if (fault.rfind("cc=", 0) == 0) {
    f.cc = std::stoi(fault.substr(3));
  } else {
    FP8EXT_CHECK(fault.empty(), "fp8ext._testing_fault: unknown fault '", fault, "'");
    g_torch_blockwise_refused.store(false);
  }
}

// Throws the planted block-wise fault, as torch would, if there is one.
void throw_planted_blockwise_fault() {
  PlantedFault& f = planted_fault();
  const std::lock_guard lock(f.mu);
  if (f.blockwise == "refused") {
    throw AtenError("Invalid scaling configuration (planted by fp8ext._testing_fault)", true);
  }
  if (f.blockwise == "oom") throw AtenError("CUDA out of memory (planted by fp8ext._testing_fault)", true);
}

// Throws, as a failed torch._scaled_mm call would (an AtenError with torch's message), the planted tensor-wise
// fault if there is one.
void throw_planted_tensorwise_fault() {
  PlantedFault& f = planted_fault();
  const std::lock_guard lock(f.mu);
  if (f.tensorwise == "not_supported") {
    throw AtenError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul (planted by "
                    "fp8ext._testing_fault)", true);
  }
  if (f.tensorwise == "oom") throw AtenError("CUDA out of memory (planted by fp8ext._testing_fault)", true);
  if (f.tensorwise == "cuda") STD_CUDA_CHECK(cudaErrorLaunchFailure);  // the error a faulting kernel leaves
}

int routing_cc(const cudaDeviceProp& props) {
  PlantedFault& f = planted_fault();
  const std::lock_guard lock(f.mu);
  return f.cc != 0 ? f.cc : props.major * 10 + props.minor;
}

// torch._scaled_mm reports a shape that cuBLASLt has no algorithm for as an error naming the status (seen on the
// H200: M = 1, K = 16). Only that outcome is fp8ext's to handle; everything else is the caller's.
bool cublaslt_declined(const AtenError& e) {
  return std::string(e.what()).find("CUBLAS_STATUS_NOT_SUPPORTED") != std::string::npos;
}

// An out-of-memory error, told by torch's message (the stable ABI carries no exception types).
bool out_of_memory(const AtenError& e) {
  return std::string(e.what()).find("out of memory") != std::string::npos;
}

// ---- Block-wise scales (sm90/blockwise_gemm.h) ----

sm90::BlockwiseParams blockwise_params(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                                       const std::optional<Tensor>& bias, const ScaledMmProblem& problem,
                                       const Tensor& out, int sm_count, cudaStream_t stream) {
  auto p = common_params<sm90::BlockwiseParams>(a, b, bias, problem, out, sm_count, stream);
  // Validation admits any strides; scale_a may be (M, 1) (one K group), whose column stride is never used.
  p.scale_a = static_cast<const float*>(scale_a.data_ptr());
  p.sa_stride_m = scale_a.stride(0);
  p.sa_stride_g = scale_a.stride(1);
  p.scale_b = static_cast<const float*>(scale_b.data_ptr());
  p.sb_stride_g = scale_b.stride(0);
  p.sb_stride_n = scale_b.stride(1);
  return p;
}

// Whether torch._scaled_mm's block-wise path takes this call exactly as given, so that the backstop may hand it
// over with no copy: e4m3 operands, a row-major and b column-major without padding, scale_a in torch's (1, M)
// strides and scale_b in its (1, G) strides (a contiguous [H, G] weight scale, transposed), bf16 output, no bias.
// A stride is not read where its dimension has one element, as in torch's own check. The shapes torch computes
// correctly are the dispatch's to check (sm90::torch_blockwise_computes).
bool torch_can_run_blockwise(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                             const std::optional<Tensor>& bias, const ScaledMmProblem& problem) {
  const int64_t M = problem.M, K = problem.K, G = problem.groups_k(), H = problem.blocks_n();
  auto stride_is = [](const Tensor& t, int dim, int64_t want) { return t.size(dim) == 1 || t.stride(dim) == want; };
  return torch_blockwise_backstop_usable() && problem.out_dtype == ScalarType::BFloat16 &&
         !bias.has_value() && a.scalar_type() == ScalarType::Float8_e4m3fn &&
         b.scalar_type() == ScalarType::Float8_e4m3fn && stride_is(a, 0, K) && stride_is(a, 1, 1) &&
         stride_is(b, 0, 1) && stride_is(b, 1, K) &&
         scale_a.size(0) == M && scale_a.size(1) == G && stride_is(scale_a, 0, 1) && stride_is(scale_a, 1, M) &&
         scale_b.size(0) == G && scale_b.size(1) == H && stride_is(scale_b, 0, 1) && stride_is(scale_b, 1, G);
}

// The block-wise backstop: torch._scaled_mm on the same tensors. torch takes no fast accumulation with block-wise
// scales (and fp8ext's block-wise kernels promote every 128 of K either way). Empty where torch refused the call:
// the backstop is then turned off for block-wise calls, with a warning, and the caller runs a kernel. As on the
// tensor-wise route, an error known to be another (out of memory, a CUDA error) propagates unchanged.
std::optional<Tensor> blockwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                                          const Tensor& scale_b, const ScaledMmProblem& problem) {
  try {
    throw_planted_blockwise_fault();
    return torch_scaled_mm(a, b, scale_a, scale_b, std::nullopt, problem.out_dtype, /*use_fast_accum=*/false);
  } catch (const AtenError& e) {
    if (e.message_known && out_of_memory(e)) throw;
    g_torch_blockwise_refused.store(true);
    const std::string what = e.what();
    static std::once_flag once;
    warn_once(once, str("fp8ext.scaled_mm: torch._scaled_mm refused a block-wise call (",
                        what.substr(0, what.find('\n')),
                        "); block-wise calls run on fp8ext's own kernels from now on"));
    return std::nullopt;
  }
}

// A forced block-scaled kernel wins (a forced row-wise kernel cannot compute the call); else the dispatch's pick,
// without the stream-K kernels inside CUDA-graph capture, which may be torch._scaled_mm's block-wise path (the
// backstop). The float32 reference path where no kernel was built.
Tensor run_blockwise(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                     const std::optional<Tensor>& bias, const ScaledMmProblem& problem, const cudaDeviceProp& props) {
  const sm90::OutType out_type = to_out_type(problem.out_dtype);
  const cudaStream_t stream = current_cuda_stream(a.get_device_index());
  FP8EXT_CHECK(!sm90::forced_kernel(), "fp8ext.scaled_mm: the forced kernel '",
               sm90::choice_name(sm90::forced_kernel()), "' takes row-wise or tensor-wise scales and does not "
               "compute this block-wise call; force a block-wise kernel (fp8ext.blockwise_kernel_names()), or make "
               "this call outside the `with fp8ext.force_kernel(...):` block");
  const sm90::BlockwiseKernelEntry* kernel = sm90::forced_blockwise_kernel();
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

// ---- fp8ext::linear (linear_op.h): quantize_rowwise, then scaled_mm's row-wise GEMM, in one call ----

// On an sm_90 GPU, when the selection is a kernel of this build (the case of every layer of a converted model
// unless torch's backstop, autotuning or a kernel missing from the build takes it): the GEMM is launched here
// straight from the quantize's outputs, with the choice run_sm90 would make for the same problem, so the result
// is the two ops' bit for bit. Every other case runs scaled_mm itself on views of those outputs.
Tensor linear_cuda(Tensor x, Tensor weight, Tensor weight_scale, std::optional<Tensor> bias, bool use_fast_accum) {
  const std::optional<TensorMeta> bias_meta =
      bias.has_value() ? std::optional<TensorMeta>(tensor_meta(*bias)) : std::nullopt;
  const LinearProblem lp = check_linear_meta(tensor_meta(x), tensor_meta(weight), tensor_meta(weight_scale),
                                             bias_meta);
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
    // a is q viewed [M, K] (contiguous: lda = K), b the weight; both e4m3.
    const bool torch_ok = torch_can_run(problem, ScalarType::Float8_e4m3fn, ScalarType::Float8_e4m3fn,
                                        /*lda=*/problem.K, bias.has_value());
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
  const Tensor scale_b = weight_scale.dim() == 1 ? weight_scale : st::view(weight_scale, {problem.N});
  const Tensor out = scaled_mm_cuda(a, st::transpose(weight, 0, 1), scale_a, scale_b, bias, problem.out_dtype,
                                    use_fast_accum);
  return x.dim() == 2 ? out : st::view(out, out_shape);
}

// ---- Introspection and control, used by python/fp8ext (kernel_names, force_kernel, selected_kernel). ----

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const auto& k : sm90::all_kernels()) names.emplace_back(k.name);
  return names;
}

// The forced kernel's written form ("" when none), so that fp8ext.force_kernel can restore an outer block's.
std::string current_forced_kernel() {
  if (const sm90::BlockwiseKernelEntry* blockwise = sm90::forced_blockwise_kernel()) return blockwise->name;
  return sm90::choice_name(sm90::forced_kernel());
}

std::vector<std::string> blockwise_kernel_names() {
  std::vector<std::string> names;
  for (const auto& k : sm90::all_blockwise_kernels()) names.emplace_back(k.name);
  return names;
}

// The block-scaled kernel the dispatch runs for (M, N, K, out_dtype) with sm_count SMs ("" if none), or inside
// capture. `fits` and `residuals`: trial fits for scripts/fit_blockwise_dispatch.py; fits are [a0, b0, a1, b1, ...]
// for the kernels of _blockwise_kernel_names in order, residuals [kernel index, log2 M, log2 N, log2 K, ln ratio,
// ...] (blockwise_dispatch.h); both empty for the compiled-in ones. Needs no GPU.
// torch_ok: the call is in torch's layouts with no bias (as the blockwise bench suite makes it), so that the
// backstop may take it where torch computes the shape and the output is bf16; "torch._scaled_mm" names that
// choice.
// Trial fits: the kernels', then torch's (two more numbers; its residuals have the index after the last kernel's),
// the margin (kernel_advantage) and the M above which the backstop is considered (negative: the compiled-in ones).
std::string selected_blockwise_kernel(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, int64_t sm_count,
                                      bool capturing, std::vector<double> fits, std::vector<double> residuals,
                                      bool torch_ok, double kernel_advantage, int64_t backstop_above_m) {
  if (const sm90::BlockwiseKernelEntry* forced = sm90::forced_blockwise_kernel()) return forced->name;
  const size_t kernels = sm90::all_blockwise_kernels().size();
  std::vector<std::vector<sm90::BlockwiseResidual>> trial_residuals(kernels + 1);  // the last: torch's
  FP8EXT_CHECK(residuals.size() % 5 == 0 && (residuals.empty() || !fits.empty()),
               "fp8ext._selected_blockwise_kernel: residuals come in fives, with trial fits");
  for (size_t i = 0; i < residuals.size(); i += 5) {
    const double at = residuals[i];
    FP8EXT_CHECK(at >= 0 && at <= double(kernels), "fp8ext._selected_blockwise_kernel: no kernel index ", at);
    trial_residuals[size_t(at)].push_back({float(residuals[i + 1]), float(residuals[i + 2]), float(residuals[i + 3]),
                                           float(residuals[i + 4])});
  }
  sm90::BlockwiseTrial trial{{}, sm90::torch_blockwise_fit()};
  if (!fits.empty()) {
    FP8EXT_CHECK(fits.size() == 2 * kernels || fits.size() == 2 * kernels + 2,
                 "fp8ext._selected_blockwise_kernel: expected two numbers per block-scaled kernel (", 2 * kernels,
                 "), and optionally two for torch, got ", fits.size());
    for (size_t i = 0; i < kernels; ++i) trial.kernels.push_back({fits[2 * i], fits[2 * i + 1], trial_residuals[i]});
    if (fits.size() == 2 * kernels + 2) {
      trial.torch = {fits[2 * kernels], fits[2 * kernels + 1], trial_residuals[kernels]};
    }
  }
  if (kernel_advantage >= 0) trial.kernel_advantage = kernel_advantage;
  if (backstop_above_m >= 0) trial.backstop_above_m = backstop_above_m;
  // Without trial fits, trial.kernels stays empty and the dispatch uses the compiled-in ones.
  const bool use_trial = !fits.empty() || kernel_advantage >= 0 || backstop_above_m >= 0;
  // Trial fits score the backstop on any torch (the fit runs anywhere); the compiled-in dispatch as calls meet it.
  const bool torch_can_run = torch_ok && (use_trial || torch_blockwise_backstop_usable());
  const sm90::BlockwiseSelection s =
      sm90::select_blockwise_kernel(M, N, K, to_out_type(out_dtype), static_cast<int>(sm_count), !capturing,
                                    torch_can_run, use_trial ? &trial : nullptr);
  if (s.torch_blockwise) return "torch._scaled_mm";
  return s.kernel != nullptr ? s.kernel->name : "";
}

// The serial work per SM, in MACs, that the dispatch's time model gives the named block-scaled kernel (0 for a
// decode kernel) or torch._scaled_mm (the backstop), and its compiled-in fit: [W, a, b]. For
// scripts/fit_blockwise_dispatch.py.
std::vector<double> blockwise_work_and_fit(std::string name, int64_t M, int64_t N, int64_t K, int64_t sm_count) {
  if (name == "torch._scaled_mm") {  // the backstop, as the dispatch models it
    const sm90::BlockwiseFit f = sm90::torch_blockwise_fit();
    return {sm90::blockwise_work(sm90::torch_blockwise_traits(), M, N, K, static_cast<int>(sm_count)), f.a_us,
            f.b_us_per_mac};
  }
  const sm90::BlockwiseKernelEntry* k = sm90::find_blockwise_kernel(name);
  FP8EXT_CHECK(k != nullptr, "fp8ext._blockwise_work: no block-scaled kernel '", name, "' in this build");
  const sm90::BlockwiseFit f = sm90::blockwise_fit(*k);
  return {sm90::blockwise_work(k->traits, M, N, K, static_cast<int>(sm_count)), f.a_us, f.b_us_per_mac};
}

// `name` is a kernel's name, optionally with scheduler options ("...@N4", dispatch.h); "" clears it.
// Process-wide: every thread's calls see it (python/fp8ext/ops.py, force_kernel).
void force_kernel(std::string name) {
  sm90::set_forced_kernel({});
  sm90::set_forced_blockwise_kernel(nullptr);
  if (name.empty()) return;
  if (const sm90::BlockwiseKernelEntry* blockwise = sm90::find_blockwise_kernel(name)) {
    sm90::set_forced_blockwise_kernel(blockwise);
    return;
  }
  std::string error;
  const sm90::KernelChoice choice = sm90::parse_choice(name, &error);
  FP8EXT_CHECK(choice, "fp8ext.force_kernel: ", error, "; fp8ext.kernel_names() lists the kernels");
  sm90::set_forced_kernel(choice);
}

// A number for the introspection ops' text lines, with every digit a double holds.
std::string num(double x) {
  std::ostringstream os;
  os << std::setprecision(17) << x;
  return os.str();
}

// The written form of what the default dispatch runs; "torch._scaled_mm" for the backstop. torch_ok says whether
// torch could take the call (the Python side decides it from the arguments it was given).
std::string selection_name(const sm90::Selection& s) {
  return s.torch_rowwise ? "torch._scaled_mm" : sm90::choice_name(s.choice);
}

std::string selected_kernel(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, bool use_fast_accum,
                            ScalarType a_dtype, bool capturing, bool torch_ok) {
  const sm90::ProblemKey key = problem_key(M, N, K, out_dtype, use_fast_accum, a_dtype, ScalarType::Float8_e4m3fn);
  // As torch_can_run: torch's row-wise path takes bf16 output and e4m3 operands only.
  torch_ok = torch_ok && out_dtype == ScalarType::BFloat16 && a_dtype == ScalarType::Float8_e4m3fn;
  if (!cuda_available()) {  // a CUDA build on a machine without a GPU: what an H200 would run
    if (const sm90::KernelChoice c = sm90::forced_kernel()) return sm90::choice_name(c);
    return selection_name(sm90::select_kernel(key, 132, /*allow_workspace=*/!capturing, torch_ok));
  }
  return selection_name(chosen_kernel(key, device_properties(current_device()), capturing, torch_ok));
}

// The cost model's ranking of every built kernel that computes the call, fastest predicted first, as
// "name@options predicted_us tile_ratio calibrated" lines; the last line is torch's row-wise estimate.
// The SM count of the current device, or an H200's 132 without a GPU.
int sm_count() { return cuda_available() ? device_properties(current_device()).multiProcessorCount : 132; }

std::vector<std::string> rank_kernels(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, bool use_fast_accum,
                                      ScalarType a_dtype, bool capturing) {
  const sm90::ProblemKey key = problem_key(M, N, K, out_dtype, use_fast_accum, a_dtype, ScalarType::Float8_e4m3fn);
  const int sms = sm_count();
  std::vector<std::string> lines;
  for (const sm90::RankedKernel& r : sm90::rank_kernels(key, sms, /*allow_workspace=*/!capturing)) {
    lines.push_back(sm90::choice_name(r.choice) + " " + num(r.estimate.us) + " " + num(r.estimate.tile_ratio()) +
                    " " + (r.estimate.calibrated ? "1" : "0"));
  }
  const double torch_us =
      sm90::torch_rowwise_estimate({M, N, K, out_dtype == ScalarType::Float ? 4 : 2, sms}, key.accum);
  lines.push_back("torch._scaled_mm " + num(torch_us) + " 1 " + (torch_us > 0 ? "1" : "0"));
  return lines;
}

// Every registered kernel's traits, one "name schedule tm tn tk cm cn accum out in_a swap promotion overlap max_m
// workspace" line each, so that a test can hold them against python/fp8ext/kernel_manifest.json.
std::vector<std::string> kernel_traits() {
  std::vector<std::string> lines;
  for (const auto& k : sm90::all_kernels()) {
    const sm90::KernelTraits& t = k.traits;
    std::string line = std::string(k.name) + " " + sm90::to_string(t.schedule);
    for (int v : {t.tile_m, t.tile_n, t.tile_k, t.cluster_m, t.cluster_n}) line += " " + std::to_string(v);
    line += std::string(" ") + sm90::to_string(t.accum) + " " + sm90::to_string(t.out) + " " +
            (t.any_in_a ? "any" : sm90::to_string(t.in_a)) + " " + (t.swap_ab ? "1" : "0") + " " +
            std::to_string(t.accum == sm90::Accum::kPrecise && t.schedule != sm90::Schedule::kGemv
                               ? t.promotion_interval : 0) +
            " " + (t.overlap ? "1" : "0") + " " + std::to_string(t.max_m) + " " +
            (sm90::needs_workspace(k) ? "1" : "0");
    lines.push_back(line);
  }
  return lines;
}

// The cost model's terms (f1, f2, f3, tiles needed, tiles computed, rounds, K iterations) for a kernel in its
// written form (with its scheduler options), or for "torch._scaled_mm", on this device's SM count (132 without a
// GPU). scripts/tune.py records them beside each measurement and fits the coefficients on them.
std::vector<double> cost_terms(std::string choice, int64_t M, int64_t N, int64_t K, ScalarType out_dtype) {
  const sm90::CostProblem p{M, N, K, out_dtype == ScalarType::Float ? 4 : 2, sm_count()};
  sm90::CostTerms f;
  if (choice == "torch._scaled_mm") {
    f = sm90::cost_terms(sm90::torch_rowwise_traits(), p, sm90::SchedulerOptions{sm90::Raster::kHeuristic, 1});
  } else {
    std::string error;
    const sm90::KernelChoice c = sm90::parse_choice(choice, &error);
    FP8EXT_CHECK(c, "fp8ext: ", error);
    f = sm90::cost_terms(c.kernel->traits, p, c.sched);
  }
  return {f.f1, f.f2, f.f3, double(f.tiles_needed), double(f.tiles_computed), double(f.rounds), double(f.kiters)};
}

// The fitted coefficient rows compiled in: "name c0 c1 c2 c3" each.
std::vector<std::string> cost_coefficients() {
  std::vector<std::string> lines;
  for (const auto& r : sm90::coefficient_rows()) {
    lines.push_back(std::string(r.name) + " " + num(r.c.c0) + " " + num(r.c.c1) + " " + num(r.c.c2) + " " +
                    num(r.c.c3));
  }
  return lines;
}

void set_backends(std::string backends) {
  FP8EXT_CHECK(backends == "fp8ext" || backends == "fp8ext,torch", "fp8ext: backends must be 'fp8ext' or "
              "'fp8ext,torch', got '", backends, "'");
  sm90::set_torch_backstop(backends == "fp8ext,torch");
}

std::string backends() { return sm90::torch_backstop_enabled() ? "fp8ext,torch" : "fp8ext"; }

void set_software_key(std::string key) {
  std::lock_guard<std::mutex> lock(g_software_mutex);
  g_software_key = key;
  g_torch_blockwise_measured.store(key.find("/torch2.11.") != std::string::npos);
}

void autotune_configure(bool enabled, std::string cache_file, std::vector<std::string> buckets,
                        std::vector<std::string> kernels) {
  FP8EXT_CHECK(buckets.size() == kernels.size(), "fp8ext.autotune: ", buckets.size(), " buckets but ",
              kernels.size(), " kernel names");
  std::vector<std::pair<std::string, std::string>> entries;
  for (size_t i = 0; i < buckets.size(); ++i) entries.emplace_back(buckets[i], kernels[i]);
  sm90::autotune_configure(enabled, cache_file, entries);
}

// (bucket, kernel) pairs flattened: [bucket0, kernel0, bucket1, kernel1, ...].
std::vector<std::string> autotune_entries() { return sm90::flatten_entries(sm90::autotune_entries()); }

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CUDA, m) {
  m.impl("scaled_mm", TORCH_BOX(&scaled_mm_cuda));
  m.impl("linear", TORCH_BOX(&linear_cuda));
}

STABLE_TORCH_LIBRARY_FRAGMENT(fp8ext, m) {
  m.def("_kernel_names() -> str[]");
  m.def("_force_kernel(str name) -> ()");
  m.def("_forced_kernel() -> str");
  m.def("_testing_fault(str fault) -> ()");
  m.def(
      "_selected_kernel(int M, int N, int K, ScalarType out_dtype, bool use_fast_accum, "
      "ScalarType a_dtype, bool capturing=False, bool torch_ok=True) -> str");
  m.def(
      "_rank_kernels(int M, int N, int K, ScalarType out_dtype, bool use_fast_accum, ScalarType a_dtype, "
      "bool capturing=False) -> str[]");
  m.def("_kernel_traits() -> str[]");
  m.def("_cost_terms(str choice, int M, int N, int K, ScalarType out_dtype) -> float[]");
  m.def("_cost_coefficients() -> str[]");
  m.def("_set_backends(str backends) -> ()");
  m.def("_backends() -> str");
  m.def("_set_software_key(str key) -> ()");
  m.def("_autotune_configure(bool enabled, str cache_file, str[] buckets, str[] kernels) -> ()");
  m.def("_autotune_entries() -> str[]");
  m.def("_blockwise_kernel_names() -> str[]");
  m.def("_selected_blockwise_kernel(int M, int N, int K, ScalarType out_dtype, int sm_count, bool capturing=False, "
        "float[] fits=[], float[] residuals=[], bool torch_ok=True, float kernel_advantage=-1.0, "
        "int backstop_above_m=-1) -> str");
  m.def("_blockwise_work(str name, int M, int N, int K, int sm_count) -> float[]");
}

// They take no tensors: CompositeExplicitAutograd serves every call.
STABLE_TORCH_LIBRARY_IMPL(fp8ext, CompositeExplicitAutograd, m) {
  m.impl("_kernel_names", TORCH_BOX(&kernel_names));
  m.impl("_force_kernel", TORCH_BOX(&force_kernel));
  m.impl("_forced_kernel", TORCH_BOX(&current_forced_kernel));
  m.impl("_testing_fault", TORCH_BOX(&testing_fault));
  m.impl("_selected_kernel", TORCH_BOX(&selected_kernel));
  m.impl("_rank_kernels", TORCH_BOX(&rank_kernels));
  m.impl("_kernel_traits", TORCH_BOX(&kernel_traits));
  m.impl("_cost_terms", TORCH_BOX(&cost_terms));
  m.impl("_cost_coefficients", TORCH_BOX(&cost_coefficients));
  m.impl("_set_backends", TORCH_BOX(&set_backends));
  m.impl("_backends", TORCH_BOX(&backends));
  m.impl("_set_software_key", TORCH_BOX(&set_software_key));
  m.impl("_autotune_configure", TORCH_BOX(&autotune_configure));
  m.impl("_autotune_entries", TORCH_BOX(&autotune_entries));
  m.impl("_blockwise_kernel_names", TORCH_BOX(&blockwise_kernel_names));
  m.impl("_selected_blockwise_kernel", TORCH_BOX(&selected_blockwise_kernel));
  m.impl("_blockwise_work", TORCH_BOX(&blockwise_work_and_fit));
}

}  // namespace fp8ext
