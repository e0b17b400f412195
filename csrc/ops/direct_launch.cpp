// The direct launch of fp8ext.scaled_mm's eager calls: two functions of the fp8ext._C module, called from Python
// (python/fp8ext/_eager_route.py) with the call's pointers, that launch one of fp8ext's row-wise kernels with no
// dispatcher and no tensors in between.
//
// Why: an eager call through the op crosses from Python into the dispatcher's boxed entry, through the op's
// checks and out again, which costs the host more than torch._scaled_mm's whole call (docs/design.md, "Host
// time"). For the calls it takes, Python has already checked everything the op's validation would (the layouts,
// dtypes, devices, alignment; _eager_route.py lists them) and allocated the output, and the route of the shape is
// the op's own dispatch answer. What is left is what run_sm90 (scaled_mm_cuda.cpp) does after its choice: the
// kernel parameters, the current stream, the launch.
//
//   _direct_plan(choice: str) -> int        the plan's index for a kernel choice ("name" or "name@H2"), or -1
//                                           when the kernel needs a workspace (stream-K) and the op must run it
//   _direct_launch(plan, a, b, scale_a, scale_b, out, M, N, K, device, scale_a_per_row) -> None
//                                           a [M, K] row-major with stride K, b [K, N] column-major with stride
//                                           K, float32 scales (M values, or one when not scale_a_per_row; N
//                                           values), out [M, N] bf16 contiguous: addresses as ints
//   _direct_linear(plan, x, x_dtype, M, K, buffer, weight, weight_scale, bias, out, N, device,
//                  use_fast_accum) -> bool  fp8ext.linear as linear_cuda.cpp runs it: x [M, K] contiguous (x_dtype
//                                           0 bf16, 1 fp16, 2 fp32, the output's too) quantized into `buffer` (q,
//                                           M x K e4m3, then the M float32 scales at the next 16-byte boundary),
//                                           then the GEMM against weight [N, K] (stride K) with weight_scale (N
//                                           values) and bias (0: none) into out [M, N]: the plan's kernel, or with
//                                           plan -2 torch's row-wise path as _torch_rowwise runs it (bf16, no
//                                           bias); False when that cannot be taken here, before any launch
//   _torch_rowwise_ready() -> bool          whether _torch_rowwise can run (cublaslt_rowwise.h)
//   _torch_rowwise(a, b, scale_a, scale_b, out, M, N, K, use_fast_accum, device) -> bool
//                                           torch's row-wise path on _direct_launch's operands, as torch calls
//                                           cuBLASLt (cublaslt_rowwise.cpp); False when it cannot be taken here
//                                           (then the caller calls torch._scaled_mm), None with an error set
//
// Only the CUDA runtime and the stable C shim's stream accessor are used; no libtorch tensors. fp8ext.linear's
// GEMV kernels are launched as programmatic dependents of its quantize, here as in the op (kernel->launch).
#include <Python.h>

#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "ops/cublaslt_rowwise.h"
#include "ops/cuda_device.h"
#include "ops/direct_launch.h"
#include "ops/sm90_launch.h"
#include "ops/torch_calls.h"
#include "quantize/quantize_rowwise_op.h"
#include "sm90/dispatch/dispatch.h"

namespace fp8ext {

namespace {

// Plans are never removed: a handful of distinct kernel choices per process, each a pointer into the registry.
std::mutex g_plans_mutex;
std::vector<sm90::KernelChoice> g_plans;

sm90::KernelChoice plan_at(long long index) {
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  if (index < 0 || index >= static_cast<long long>(g_plans.size())) return {};
  return g_plans[static_cast<size_t>(index)];
}

PyObject* direct_plan(PyObject*, PyObject* arg) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(arg, &size);
  if (text == nullptr) return nullptr;
  std::string error;
  const sm90::KernelChoice choice = sm90::parse_choice(std::string(text, static_cast<size_t>(size)), &error);
  if (!choice) {
    PyErr_SetString(PyExc_ValueError, error.c_str());
    return nullptr;
  }
  if (sm90::needs_workspace(*choice.kernel)) return PyLong_FromLong(-1);
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  for (size_t i = 0; i < g_plans.size(); ++i) {
    if (g_plans[i].kernel == choice.kernel && g_plans[i].sched == choice.sched) return PyLong_FromSize_t(i);
  }
  g_plans.push_back(choice);
  return PyLong_FromSize_t(g_plans.size() - 1);
}

// Switches to `device` for the launch (the stream belongs to it) and back.
class DeviceSwitch {
 public:
  explicit DeviceSwitch(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device && cudaSetDevice(device) != cudaSuccess) {
      throw std::runtime_error(str("fp8ext.scaled_mm: cannot make cuda:", device, " the current device"));
    }
  }
  ~DeviceSwitch() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

// The GEMM of a plan on its operands, as run_sm90 launches a chosen kernel. `what` names the op in errors.
void launch_gemm(const sm90::KernelChoice& choice, const char* what, const void* a, const void* b,
                 const float* scale_a, const float* scale_b, const void* bias, void* out, const ScaledMmProblem& problem,
                 int device, cudaStream_t stream) {
  sm90::GemmParams p = gemm_params(Operand{a, problem.K}, Operand{b, problem.K}, scale_a, scale_b,
                                   /*a_is_e5m2=*/false, bias, out, problem, device,
                                   device_properties(device).multiProcessorCount, stream);
  p.sched = choice.sched;
  p.workspace_bytes = choice.kernel->workspace_size(p);
  FP8EXT_CHECK(p.workspace_bytes == 0, what, ": kernel '", sm90::choice_name(choice),
               "' needs a workspace, which a direct launch does not provide");
  const sm90::LaunchResult r = choice.kernel->launch(p);
  FP8EXT_CHECK(r.ok, what, ": CUTLASS kernel '", sm90::choice_name(choice), "' failed at ", r.stage, ": ", r.detail,
               " (M=", problem.M, ", N=", problem.N, ", K=", problem.K, ", lda=", p.lda, ", ldb=", p.ldb, ")");
}

ScaledMmProblem problem_of(int64_t M, int64_t N, int64_t K, bool scale_a_per_row, ScalarType out_dtype) {
  ScaledMmProblem problem;
  problem.M = M;
  problem.N = N;
  problem.K = K;
  problem.scale_a_per_row = scale_a_per_row;
  problem.scale_b_per_col = true;
  problem.out_dtype = out_dtype;
  return problem;
}

void launch_plan(const sm90::KernelChoice& choice, const void* a, const void* b, const float* scale_a,
                 const float* scale_b, void* out, int64_t M, int64_t N, int64_t K, int device, bool scale_a_per_row) {
  const DeviceSwitch on(device);
  launch_gemm(choice, "fp8ext.scaled_mm", a, b, scale_a, scale_b, /*bias=*/nullptr, out,
              problem_of(M, N, K, scale_a_per_row, ScalarType::BFloat16), device, current_cuda_stream(device));
}

// The quantize's q in `buffer`, then its scales from the first 16-byte boundary after it.
int64_t scales_offset(int64_t M, int64_t K) { return (M * K + 15) / 16 * 16; }

// What _direct_linear runs after the quantize: one of fp8ext's kernels, or (kTorchPlan) torch's row-wise path.
constexpr long long kTorchPlan = -2;

struct LinearCall {
  const void* x = nullptr;
  ScalarType x_dtype = ScalarType::BFloat16;
  int64_t M = 0, K = 0, N = 0;
  void* buffer = nullptr;
  const void* weight = nullptr;
  const float* weight_scale = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
  bool use_fast_accum = false;
  int device = 0;
};

// fp8ext.linear as linear_cuda.cpp runs it: the quantize, then the GEMM. Returns false, having launched nothing,
// where torch's path cannot be taken here (then the caller runs the op).
bool launch_linear(long long plan, const LinearCall& c) {
  const DeviceSwitch on(c.device);
  const cudaStream_t stream = current_cuda_stream(c.device);
  const sm90::KernelChoice choice = plan == kTorchPlan ? sm90::KernelChoice{} : plan_at(plan);
  if (plan == kTorchPlan) {
    if (!rowwise_lt_available() || stream_is_capturing(stream)) return false;
  } else {
    FP8EXT_CHECK(static_cast<bool>(choice), "_direct_linear: no such plan");
  }
  const int64_t sizes[] = {c.M, c.K}, strides[] = {c.K, 1};
  QuantizeRowwiseParams q = check_quantize_rowwise(IntSpan(sizes), IntSpan(strides), c.x_dtype,
                                                   ScalarType::Float8_e4m3fn, std::nullopt, "fp8ext.linear");
  q.x = c.x;
  q.q = c.buffer;
  q.scale = reinterpret_cast<float*>(static_cast<char*>(c.buffer) + scales_offset(c.M, c.K));
  const cudaError_t err = launch_quantize_rowwise(q, stream);
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.linear: CUDA error: ", cudaGetErrorString(err));
  if (plan == kTorchPlan) {
    RowwiseLtCall lt;
    lt.a = q.q;
    lt.b = c.weight;
    lt.scale_a = q.scale;
    lt.scale_b = c.weight_scale;
    lt.out = c.out;
    lt.M = c.M;
    lt.N = c.N;
    lt.K = c.K;
    lt.use_fast_accum = c.use_fast_accum;
    lt.device = c.device;
    return run_rowwise_lt(lt, stream);
  }
  // As check_linear_meta sets the GEMM up: scale_a is (M, 1), one value (tensor-wise) when M = 1.
  launch_gemm(choice, "fp8ext.linear", q.q, c.weight, q.scale, c.weight_scale, c.bias, c.out,
              problem_of(c.M, c.N, c.K, c.M > 1, c.x_dtype), c.device, stream);
  return true;
}

constexpr Py_ssize_t kLaunchArgs = 11;
constexpr Py_ssize_t kLinearArgs = 13;
constexpr ScalarType kOutDtypes[] = {ScalarType::BFloat16, ScalarType::Half, ScalarType::Float};

PyObject* direct_launch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kLaunchArgs) {
    PyErr_SetString(PyExc_TypeError, "_direct_launch takes 11 arguments");
    return nullptr;
  }
  const long long plan = PyLong_AsLongLong(args[0]);
  void* ptrs[5];
  for (int i = 0; i < 5; ++i) ptrs[i] = PyLong_AsVoidPtr(args[1 + i]);
  const long long M = PyLong_AsLongLong(args[6]), N = PyLong_AsLongLong(args[7]), K = PyLong_AsLongLong(args[8]);
  const long device = PyLong_AsLong(args[9]);
  const int per_row = PyObject_IsTrue(args[10]);
  if (PyErr_Occurred() != nullptr) return nullptr;
  const sm90::KernelChoice choice = plan_at(plan);
  if (!choice) {
    PyErr_SetString(PyExc_ValueError, "_direct_launch: no such plan");
    return nullptr;
  }
  try {
    launch_plan(choice, ptrs[0], ptrs[1], static_cast<const float*>(ptrs[2]), static_cast<const float*>(ptrs[3]),
                ptrs[4], M, N, K, static_cast<int>(device), per_row != 0);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* direct_linear(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kLinearArgs) {
    PyErr_SetString(PyExc_TypeError, "_direct_linear takes 13 arguments");
    return nullptr;
  }
  const long long plan = PyLong_AsLongLong(args[0]);
  LinearCall c;
  c.x = PyLong_AsVoidPtr(args[1]);
  const long dtype = PyLong_AsLong(args[2]);
  c.M = PyLong_AsLongLong(args[3]);
  c.K = PyLong_AsLongLong(args[4]);
  c.buffer = PyLong_AsVoidPtr(args[5]);
  c.weight = PyLong_AsVoidPtr(args[6]);
  c.weight_scale = static_cast<const float*>(PyLong_AsVoidPtr(args[7]));
  c.bias = PyLong_AsVoidPtr(args[8]);
  c.out = PyLong_AsVoidPtr(args[9]);
  c.N = PyLong_AsLongLong(args[10]);
  c.device = static_cast<int>(PyLong_AsLong(args[11]));
  const int fast = PyObject_IsTrue(args[12]);
  if (PyErr_Occurred() != nullptr) return nullptr;
  if (dtype < 0 || dtype > 2 || (plan == kTorchPlan && (dtype != 0 || c.bias != nullptr))) {
    PyErr_SetString(PyExc_ValueError, "_direct_linear: no such dtype, or torch's path with a bias or not bf16");
    return nullptr;
  }
  c.x_dtype = kOutDtypes[dtype];
  c.use_fast_accum = fast != 0;
  bool ran = false;
  try {
    ran = launch_linear(plan, c);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  return PyBool_FromLong(ran ? 1 : 0);
}

PyObject* torch_rowwise_ready(PyObject*, PyObject*) { return PyBool_FromLong(rowwise_lt_available() ? 1 : 0); }

constexpr Py_ssize_t kTorchRowwiseArgs = 10;

PyObject* torch_rowwise(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kTorchRowwiseArgs) {
    PyErr_SetString(PyExc_TypeError, "_torch_rowwise takes 10 arguments");
    return nullptr;
  }
  void* ptrs[5];
  for (int i = 0; i < 5; ++i) ptrs[i] = PyLong_AsVoidPtr(args[i]);
  RowwiseLtCall c;
  c.M = PyLong_AsLongLong(args[5]);
  c.N = PyLong_AsLongLong(args[6]);
  c.K = PyLong_AsLongLong(args[7]);
  const int fast = PyObject_IsTrue(args[8]);
  c.device = static_cast<int>(PyLong_AsLong(args[9]));
  if (PyErr_Occurred() != nullptr) return nullptr;
  c.a = ptrs[0];
  c.b = ptrs[1];
  c.scale_a = static_cast<const float*>(ptrs[2]);
  c.scale_b = static_cast<const float*>(ptrs[3]);
  c.out = ptrs[4];
  c.use_fast_accum = fast != 0;
  bool ran = false;
  try {
    const DeviceSwitch on(c.device);
    ran = run_rowwise_lt(c, current_cuda_stream(c.device));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  return PyBool_FromLong(ran ? 1 : 0);
}

}  // namespace

PyMethodDef kModuleMethods[] = {
    {"_direct_plan", direct_plan, METH_O, "The direct launch's plan of a kernel choice (-1: it needs a workspace)."},
    {"_direct_launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(direct_launch)), METH_FASTCALL,
     "Launches a plan on the call's pointers (python/fp8ext/_eager_route.py)."},
    {"_direct_linear", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(direct_linear)), METH_FASTCALL,
     "fp8ext.linear's quantize and GEMM on the call's pointers (python/fp8ext/_eager_route.py)."},
    {"_torch_rowwise_ready", torch_rowwise_ready, METH_NOARGS,
     "Whether _torch_rowwise can run: torch's cuBLASLt is the one it mirrors, with torch's default workspace."},
    {"_torch_rowwise", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(torch_rowwise)), METH_FASTCALL,
     "torch's row-wise path, called as torch calls cuBLASLt (python/fp8ext/_eager_route.py)."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace fp8ext
