// A planted fault, for tests only (tests/test_robustness_gpu.py).
//
// The routing (scaled_mm_cuda.cpp) must tell a shape cuBLASLt declines from an out-of-memory or CUDA error, and
// must warn on a GPU other than sm_90, but neither can be provoked at will on the H200 that runs the tests. The
// internal op _testing_fault(str) plants one: "tensorwise=not_supported", "tensorwise=oom" or "tensorwise=cuda"
// make the tensor-wise route throw what torch would, "blockwise=refused" or "blockwise=oom" make the block-wise
// backstop's torch call throw (as a torch whose block-wise checks differ from 2.11's would, or out of memory), and
// "cc=<major><minor>" routes as if the GPU had that compute capability. "" removes it, and turns the block-wise
// backstop back on after a refusal. Not API: nothing else may call it.
#include "ops/testing_hooks.h"

#include <mutex>
#include <string>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>

#include "ops/op_errors.h"
#include "ops/torch_backstop.h"
#include "ops/torch_calls.h"

namespace fp8ext {
namespace {

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
    clear_torch_blockwise_refusal();
  }
}

}  // namespace

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

// The schema is in schemas.cpp.
STABLE_TORCH_LIBRARY_IMPL(fp8ext, CompositeExplicitAutograd, m) {
  m.impl("_testing_fault", TORCH_BOX(&testing_fault));
}

}  // namespace fp8ext
