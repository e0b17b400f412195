// torch's row-wise path, made as torch makes it but without torch's per-call cost: cuBLASLt's FP8 matmul with
// outer-vector scales, called from the eager route (python/fp8ext/_eager_route.py) for the calls fp8ext's dispatch
// hands to torch.
//
// Why: such a call through torch._scaled_mm costs the host torch's whole call (argument parsing, the dispatcher,
// autograd, the checks, four layouts and a descriptor built and the heuristic asked afresh every call) on top of
// fp8ext's own check, so it can never cost less than calling torch directly (docs/design.md, "Host time"). Here
// a shape's descriptors and the heuristic's answer are made once (per thread) and kept.
//
// The call is the one torch 2.11's _scaled_mm makes for e4m3 a [M, K] row-major, b [K, N] column-major, float32
// scales (M values, N values), no bias and a bf16 output (read from cuBLASLt's API log of torch's calls):
//   cuBLAS's column-major view swaps the operands: its A is b (K x N, ld K, transposed), its B is a (K x M, ld K),
//   D (and C, unread with beta = 0, at A's address) is N x M with ld N;
//   compute 32F, scale type 32F, TRANSA = T, TRANSB = N, A's scale = scale_b and B's scale = scale_a, both
//   CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F; FAST_ACCUM as asked; no alignment preferences (cuBLASLt's
//   defaults); MAX_WORKSPACE_BYTES = torch's cuBLASLt workspace, 1 MiB under torch's default settings; the
//   heuristic's first algorithm; alpha = 1, beta = 0 on the host.
// Same descriptors, same heuristic, same algorithm: the same kernel and the same bits as torch._scaled_mm, which
// tests/test_eager_route.py checks on the GPU.
//
// cuBLASLt is the library torch has loaded (libcublasLt.so.13, looked up with RTLD_NOLOAD), not a dependency of
// fp8ext's binary. Where it is not loaded, is another major version, torch's workspace settings are not its
// defaults, or a stream is being captured (the workspace would come from the graph's pool), the caller calls
// torch._scaled_mm instead.
#include "ops/cublaslt_rowwise.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <cublasLt.h>
#include <dlfcn.h>

#include "ops/cuda_device.h"
#include "ops/op_errors.h"
#include "ops/torch_calls.h"

namespace fp8ext {

namespace {

// The cuBLASLt entry points used, resolved from the loaded library.
struct LtApi {
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmulDescInit_internal) desc_init = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutInit_internal) layout_init = nullptr;
  decltype(&cublasLtMatmulPreferenceInit_internal) pref_init = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// torch's cuBLASLt workspace with its default settings: 1 MiB. The settings that change it (CUBLASLT_WORKSPACE_SIZE,
// and the cuBLAS workspace that caps it under TORCH_CUBLASLT_UNIFIED_WORKSPACE) are not mirrored: with any of them
// set, the calls go to torch.
constexpr size_t kWorkspaceBytes = size_t{1024} * 1024;

bool torch_workspace_is_default() {
  for (const char* name : {"CUBLASLT_WORKSPACE_SIZE", "TORCH_CUBLASLT_UNIFIED_WORKSPACE", "CUBLAS_WORKSPACE_CONFIG"}) {
    if (std::getenv(name) != nullptr) return false;
  }
  return true;
}

void check(cublasStatus_t status, const char* what) {
  FP8EXT_CHECK(status == CUBLAS_STATUS_SUCCESS, "fp8ext.scaled_mm: torch's row-wise path (cuBLASLt) failed at ",
               what, " with cublasStatus_t ", static_cast<int>(status));
}

template <typename F>
bool resolve(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// The API of the cuBLASLt torch loaded, or nullptr: not loaded, not the major version this call mirrors, or torch's
// workspace not its default.
const LtApi* lt_api() {
  static const LtApi* api = []() -> const LtApi* {
    void* lib = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) return nullptr;
    static LtApi fns;
    const bool ok = resolve(lib, "cublasLtGetVersion", fns.get_version) && resolve(lib, "cublasLtCreate", fns.create) &&
                    resolve(lib, "cublasLtMatmulDescInit_internal", fns.desc_init) &&
                    resolve(lib, "cublasLtMatmulDescSetAttribute", fns.desc_set) &&
                    resolve(lib, "cublasLtMatrixLayoutInit_internal", fns.layout_init) &&
                    resolve(lib, "cublasLtMatmulPreferenceInit_internal", fns.pref_init) &&
                    resolve(lib, "cublasLtMatmulPreferenceSetAttribute", fns.pref_set) &&
                    resolve(lib, "cublasLtMatmulAlgoGetHeuristic", fns.heuristic) &&
                    resolve(lib, "cublasLtMatmul", fns.matmul);
    if (!ok || fns.get_version() / 10000 != 13 || !torch_workspace_is_default()) return nullptr;
    return &fns;
  }();
  return api;
}

// One handle per device, made on first use and kept for the process, as torch keeps its own.
cublasLtHandle_t handle_for(const LtApi& lt, int device) {
  static std::mutex mu;
  static std::vector<cublasLtHandle_t> handles;
  const std::lock_guard lock(mu);
  if (device >= static_cast<int>(handles.size())) handles.resize(device + 1, nullptr);
  if (handles[device] == nullptr) check(lt.create(&handles[device]), "cublasLtCreate");
  return handles[device];
}

// The workspace of a (device, stream): torch's caching allocator's bytes, allocated on first use on that stream
// (never while it is being captured) and kept for the process, as torch keeps its own per handle and stream.
void* workspace_for(int device, cudaStream_t stream) {
  using Key = std::pair<int, cudaStream_t>;
  thread_local std::map<Key, void*> seen;  // this thread's copy of `spaces`, read without the lock
  auto hit = seen.find({device, stream});
  if (hit != seen.end()) return hit->second;
  static std::mutex mu;
  static std::map<Key, void*> spaces;
  const std::lock_guard lock(mu);
  auto found = spaces.find({device, stream});
  if (found == spaces.end()) {
    const int64_t size = static_cast<int64_t>(kWorkspaceBytes), stride = 1;
    AtenTensorHandle tensor = nullptr;  // never deleted: the process keeps the workspace
    FP8EXT_SHIM_CHECK(aoti_torch_empty_strided(1, &size, &stride, aoti_torch_dtype_uint8(),
                                               aoti_torch_device_type_cuda(), device, &tensor));
    void* data = nullptr;
    FP8EXT_SHIM_CHECK(aoti_torch_get_data_ptr(tensor, &data));
    found = spaces.emplace(Key{device, stream}, data).first;
  }
  seen.emplace(Key{device, stream}, found->second);
  return found->second;
}

// A shape's descriptors and algorithm, made once per thread (the descriptors are set per call, so each thread has
// its own): only the two scale pointers change from call to call.
struct Prepared {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t a, b, d;
  cublasLtMatmulAlgo_t algo;
};

void set(const LtApi& lt, Prepared& p, cublasLtMatmulDescAttributes_t name, const void* value, size_t size) {
  check(lt.desc_set(&p.op, name, value, size), "cublasLtMatmulDescSetAttribute");
}

void set_scales(const LtApi& lt, Prepared& p, const RowwiseLtCall& c) {
  const void* scale_of_a = c.scale_b;  // cuBLAS's A is torch's b
  const void* scale_of_b = c.scale_a;
  set(lt, p, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_of_a, sizeof(scale_of_a));
  set(lt, p, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_of_b, sizeof(scale_of_b));
}

// The descriptors of the call (header comment), in place, and the heuristic's first algorithm for them.
void prepare(const LtApi& lt, cublasLtHandle_t handle, const RowwiseLtCall& c, Prepared& p) {
  check(lt.desc_init(&p.op, sizeof(p.op), CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescInit");
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  const int8_t fast = c.use_fast_accum ? 1 : 0;
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  set(lt, p, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa));
  set(lt, p, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb));
  set_scales(lt, p, c);
  set(lt, p, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
  set(lt, p, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof(outer));
  set(lt, p, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof(outer));
  check(lt.layout_init(&p.a, sizeof(p.a), CUDA_R_8F_E4M3, c.K, c.N, c.K), "cublasLtMatrixLayoutInit");
  check(lt.layout_init(&p.b, sizeof(p.b), CUDA_R_8F_E4M3, c.K, c.M, c.K), "cublasLtMatrixLayoutInit");
  check(lt.layout_init(&p.d, sizeof(p.d), CUDA_R_16BF, c.N, c.M, c.N), "cublasLtMatrixLayoutInit");
  cublasLtMatmulPreferenceOpaque_t pref;
  check(lt.pref_init(&pref, sizeof(pref)), "cublasLtMatmulPreferenceInit");
  const uint64_t space = kWorkspaceBytes;
  check(lt.pref_set(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &space, sizeof(space)),
        "cublasLtMatmulPreferenceSetAttribute");
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof(result));
  int found = 0;
  check(lt.heuristic(handle, &p.op, &p.a, &p.b, &p.d, &p.d, &pref, 1, &result, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  FP8EXT_CHECK(found > 0, "fp8ext.scaled_mm: cuBLASLt has no algorithm for M=", c.M, ", N=", c.N, ", K=", c.K);
  p.algo = result.algo;
}

constexpr size_t kMostShapes = 4096;  // about 2 MiB of prepared calls per thread

// This thread's prepared call for a shape. The heuristic's answer depends on the descriptors and the preference
// alone, which hold nothing of the call but its shape and accumulation (the scale pointers aside).
Prepared& prepared(const LtApi& lt, cublasLtHandle_t handle, const RowwiseLtCall& c) {
  using Key = std::tuple<int, int64_t, int64_t, int64_t, bool>;
  thread_local std::map<Key, Prepared> known;  // a map: a descriptor stays where it was initialised
  const Key key{c.device, c.M, c.N, c.K, c.use_fast_accum};
  auto found = known.find(key);
  if (found != known.end()) {
    set_scales(lt, found->second, c);
    return found->second;
  }
  if (known.size() >= kMostShapes) known.clear();  // many dynamic shapes: start again rather than grow
  Prepared& p = known[key];
  try {
    prepare(lt, handle, c, p);
  } catch (...) {
    known.erase(key);
    throw;
  }
  return p;
}

}  // namespace

bool rowwise_lt_available() { return lt_api() != nullptr; }

bool run_rowwise_lt(const RowwiseLtCall& c, cudaStream_t stream) {
  const LtApi* lt = lt_api();
  if (lt == nullptr || stream_is_capturing(stream)) return false;
  const cublasLtHandle_t handle = handle_for(*lt, c.device);
  void* workspace = workspace_for(c.device, stream);
  Prepared& p = prepared(*lt, handle, c);
  const float alpha = 1.0f, beta = 0.0f;
  check(lt->matmul(handle, &p.op, &alpha, c.b, &p.a, c.a, &p.b, &beta, c.b, &p.d, c.out, &p.d, &p.algo, workspace,
                   kWorkspaceBytes, stream),
        "cublasLtMatmul");
  return true;
}

}  // namespace fp8ext
