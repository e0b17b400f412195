// The autotuner's side of the CUDA backend (sm90/autotune/autotune.h holds its memory and policy, in plain C++):
// what identifies the machine a choice was measured on, and the timing of the candidates on the call's own stream
// and operands, with CUDA events.
#pragma once

#include <string>

#include <cuda_runtime.h>

#include "ops/scaled_mm.h"
#include "sm90/common/gemm_params.h"
#include "sm90/dispatch/dispatch.h"

namespace fp8ext {

// What identifies the machine and software an autotuned choice was measured on: GPU name, SM count, and the
// CUDA, torch and fp8ext versions (the last three set by python/fp8ext at import, _set_software_key).
std::string device_key(const cudaDeviceProp& props);
// Sets the software part of that key (the _set_software_key op).
void store_software_key(const std::string& key);

// Tunes an untuned bucket on this call: times the cost model's top candidates (sm90::autotune_tune) with the
// call's parameters `p`, which write into the call's output (the chosen kernel then overwrites it), and warns if
// the cache file could not be saved. `like` is any tensor on the call's device. Returns the fastest candidate, or
// an empty choice when none ran.
sm90::KernelChoice tune_bucket(const std::string& bucket, const sm90::ProblemKey& key, const cudaDeviceProp& props,
                               const sm90::GemmParams& p, const Tensor& like);

}  // namespace fp8ext
