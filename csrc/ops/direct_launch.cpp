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
//   _direct_linear(plan, x, x_dtype, M, K, buffer, weight, weight_scale, bias, out, N, device) -> None
//                                           fp8ext.linear as linear_cuda.cpp runs it on a kernel: x [M, K]
//                                           contiguous (x_dtype 0 bf16, 1 fp16, 2 fp32, the output's too) quantized
//                                           into `buffer` (q, M x K e4m3, then the M float32 scales at the next
//                                           16-byte boundary), then the GEMM against weight [N, K] (stride K) with
//                                           weight_scale (N values) and bias (0: none) into out [M, N]
//
// Only the CUDA runtime and the stable C shim's stream accessor are used; no libtorch tensors. fp8ext.linear's
// GEMV kernels are launched as programmatic dependents of its quantize, here as in the op (kernel->launch).
#include <Python.h>

#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime.h>

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

void launch_plan(const sm90::KernelChoice& choice, const void* a, const void* b, const float* scale_a,
                 const float* scale_b, void* out, int64_t M, int64_t N, int64_t K, int device, bool scale_a_per_row) {
  const DeviceSwitch on(device);
  const cudaDeviceProp& props = device_properties(device);
  ScaledMmProblem problem;
  problem.M = M;
  problem.N = N;
  problem.K = K;
  problem.scale_a_per_row = scale_a_per_row;
  problem.scale_b_per_col = true;
  problem.out_dtype = ScalarType::BFloat16;
  sm90::GemmParams p = gemm_params(Operand{a, K}, Operand{b, K}, scale_a, scale_b, /*a_is_e5m2=*/false,
                                   /*bias=*/nullptr, out, problem, device, props.multiProcessorCount,
                                   current_cuda_stream(device));
  p.sched = choice.sched;
  p.workspace_bytes = choice.kernel->workspace_size(p);
  FP8EXT_CHECK(p.workspace_bytes == 0, "fp8ext.scaled_mm: kernel '", sm90::choice_name(choice),
               "' needs a workspace, which a direct launch does not provide");
  const sm90::LaunchResult r = choice.kernel->launch(p);
  FP8EXT_CHECK(r.ok, "fp8ext.scaled_mm: CUTLASS kernel '", sm90::choice_name(choice), "' failed at ", r.stage,
               ": ", r.detail, " (M=", M, ", N=", N, ", K=", K, ", lda=", p.lda, ", ldb=", p.ldb, ")");
}

// The quantize's q in `buffer`, then its scales from the first 16-byte boundary after it.
int64_t scales_offset(int64_t M, int64_t K) { return (M * K + 15) / 16 * 16; }

void launch_linear(const sm90::KernelChoice& choice, const void* x, ScalarType x_dtype, int64_t M, int64_t K,
                   void* buffer, const void* weight, const float* weight_scale, const void* bias, void* out, int64_t N,
                   int device) {
  const DeviceSwitch on(device);
  const cudaDeviceProp& props = device_properties(device);
  const cudaStream_t stream = current_cuda_stream(device);
  const int64_t sizes[] = {M, K}, strides[] = {K, 1};
  QuantizeRowwiseParams q = check_quantize_rowwise(IntSpan(sizes), IntSpan(strides), x_dtype,
                                                   ScalarType::Float8_e4m3fn, std::nullopt, "fp8ext.linear");
  q.x = x;
  q.q = buffer;
  q.scale = reinterpret_cast<float*>(static_cast<char*>(buffer) + scales_offset(M, K));
  const cudaError_t err = launch_quantize_rowwise(q, stream);
  FP8EXT_CHECK(err == cudaSuccess, "fp8ext.linear: CUDA error: ", cudaGetErrorString(err));
  // As check_linear_meta sets the GEMM up: scale_a is (M, 1), one value (tensor-wise) when M = 1.
  ScaledMmProblem problem;
  problem.M = M;
  problem.N = N;
  problem.K = K;
  problem.scale_a_per_row = M > 1;
  problem.scale_b_per_col = true;
  problem.out_dtype = x_dtype;
  sm90::GemmParams p = gemm_params(Operand{q.q, K}, Operand{weight, K}, q.scale, weight_scale, /*a_is_e5m2=*/false,
                                   bias, out, problem, device, props.multiProcessorCount, stream);
  p.sched = choice.sched;
  p.workspace_bytes = choice.kernel->workspace_size(p);
  FP8EXT_CHECK(p.workspace_bytes == 0, "fp8ext.linear: kernel '", sm90::choice_name(choice),
               "' needs a workspace, which a direct launch does not provide");
  const sm90::LaunchResult r = choice.kernel->launch(p);
  FP8EXT_CHECK(r.ok, "fp8ext.linear: CUTLASS kernel '", sm90::choice_name(choice), "' failed at ", r.stage, ": ",
               r.detail, " (M=", M, ", N=", N, ", K=", K, ")");
}

constexpr Py_ssize_t kLaunchArgs = 11;
constexpr Py_ssize_t kLinearArgs = 12;
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
    PyErr_SetString(PyExc_TypeError, "_direct_linear takes 12 arguments");
    return nullptr;
  }
  const long long plan = PyLong_AsLongLong(args[0]);
  void* x = PyLong_AsVoidPtr(args[1]);
  const long dtype = PyLong_AsLong(args[2]);
  const long long M = PyLong_AsLongLong(args[3]), K = PyLong_AsLongLong(args[4]);
  void* ptrs[5];  // buffer, weight, weight_scale, bias, out
  for (int i = 0; i < 5; ++i) ptrs[i] = PyLong_AsVoidPtr(args[5 + i]);
  const long long N = PyLong_AsLongLong(args[10]);
  const long device = PyLong_AsLong(args[11]);
  if (PyErr_Occurred() != nullptr) return nullptr;
  const sm90::KernelChoice choice = plan_at(plan);
  if (!choice || dtype < 0 || dtype > 2) {
    PyErr_SetString(PyExc_ValueError, "_direct_linear: no such plan or dtype");
    return nullptr;
  }
  try {
    launch_linear(choice, x, kOutDtypes[dtype], M, K, ptrs[0], ptrs[1], static_cast<const float*>(ptrs[2]), ptrs[3],
                  ptrs[4], N, static_cast<int>(device));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

}  // namespace

PyMethodDef kModuleMethods[] = {
    {"_direct_plan", direct_plan, METH_O, "The direct launch's plan of a kernel choice (-1: it needs a workspace)."},
    {"_direct_launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(direct_launch)), METH_FASTCALL,
     "Launches a plan on the call's pointers (python/fp8ext/_eager_route.py)."},
    {"_direct_linear", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(direct_linear)), METH_FASTCALL,
     "fp8ext.linear's quantize and GEMM on the call's pointers (python/fp8ext/_eager_route.py)."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace fp8ext
