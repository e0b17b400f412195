// The CUDA backend of fp8ext::scaled_mm (scaled_mm_cuda.cpp has the routing), and the row-wise kernel choice that
// fp8ext.linear and the introspection ops share with it.
#pragma once

#include <optional>
#include <string>

#include <cuda_runtime.h>

#include "ops/scaled_mm.h"
#include "sm90/dispatch/dispatch.h"

namespace fp8ext {

// A kernel forced by name wins (it must compute this key); then, when autotuning is on, the bucket's
// remembered choice (a stream-K one only outside graph capture); then the cost model's selection (which may be
// torch's row-wise path where torch_ok). Empty if none fits.
// When autotuning is on and the bucket has no choice yet, *untuned_bucket (if given) receives its name, so that
// the caller can tune it without computing the bucket again (never during capture: timing needs
// synchronisation, and the capture would record every candidate).
sm90::Selection chosen_kernel(const sm90::ProblemKey& key, const cudaDeviceProp& props, bool capturing, bool torch_ok,
                              std::string* untuned_bucket = nullptr);

// The op's CUDA backend (registered for the CUDA dispatch key in scaled_mm_cuda.cpp).
Tensor scaled_mm_cuda(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, std::optional<Tensor> bias,
                      std::optional<ScalarType> out_dtype, bool use_fast_accum);

}  // namespace fp8ext
