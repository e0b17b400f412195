// Test-only hooks of the CUDA backend: the planted faults of the internal op _testing_fault (testing_hooks.cpp),
// read where the routing would meet the real ones. Not API: only tests/test_robustness_gpu.py plants them.
#pragma once

#include <cuda_runtime.h>

namespace fp8ext {

// Throws the planted block-wise fault, as torch would, if there is one.
void throw_planted_blockwise_fault();

// Throws, as a failed torch._scaled_mm call would (an AtenError with torch's message), the planted tensor-wise
// fault if there is one.
void throw_planted_tensorwise_fault();

// The compute capability the routing goes by (major * 10 + minor): the planted one, else the device's own.
int routing_cc(const cudaDeviceProp& props);

}  // namespace fp8ext
