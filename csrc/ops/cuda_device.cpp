// The CUDA device facts of cuda_device.h.
#include "ops/cuda_device.h"

#include <memory>
#include <mutex>
#include <vector>

#include <torch/csrc/stable/macros.h>

namespace fp8ext {

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

bool cuda_available() {
  static const bool available = [] {
    int n = 0;
    const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();  // no GPU is an answer here, not an error for the next CUDA call to report
    return ok;
  }();
  return available;
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  STD_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace fp8ext
