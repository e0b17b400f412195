// The CUDA device facts the CUDA backends route on, read through the CUDA runtime: the device's properties (read
// once per device), the current device, whether there is a GPU at all, and whether a stream is being captured.
#pragma once

#include <cuda_runtime.h>

namespace fp8ext {

// The device's properties, read once per device (cudaGetDeviceProperties takes far longer than a GEMM at M = 1).
const cudaDeviceProp& device_properties(int device);

int current_device();

// Whether this process sees a CUDA GPU (a CUDA build on a machine without one answers for an H200).
bool cuda_available();

// Whether `stream` is being captured into a CUDA graph.
bool stream_is_capturing(cudaStream_t stream);

}  // namespace fp8ext
