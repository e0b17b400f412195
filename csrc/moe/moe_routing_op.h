// Declarations shared by the torch-facing files of fp8ext::moe_dispatch and fp8ext::moe_combine: their validation
// on metadata alone (moe_routing_op.cpp, in every build). The CUDA backends are in moe_routing_cuda.cpp, the
// schemas in ops/schemas.cpp, the fake and CPU implementations in python/fp8ext/moe_routing.py.
#pragma once

#include <cstdint>

#include "moe/moe_routing.h"
#include "ops/scaled_mm_checks.h"

namespace fp8ext {

struct MoeDispatchProblem {
  QuantizeRowwiseParams quantize;  // x's quantize (e4m3), without the pointers and the row index
  int64_t tokens = 0;              // T
  int64_t H = 0;
  int64_t k = 1;
  int64_t num_experts = 1;
};

// Each checks every argument and throws (op_errors.h) naming the argument, what was expected and what was given,
// before anything is allocated or launched. moe_dispatch: x [T, H] (quantize_rowwise's x), top_k_index [T, k]
// int64 or int32 contiguous on x's device, T * k <= kMoeRouteMaxSlots, 1 <= num_experts <= kMaxGroups.
// moe_combine: o [rows, H] contiguous and 16-byte aligned, pos [T, k] int32 and weights [T, k] in o's dtype,
// contiguous, on o's device; returns the kernel's parameters without the pointers.
MoeDispatchProblem check_moe_dispatch(const TensorMeta& x, const TensorMeta& top_k_index, int64_t num_experts);
MoeCombineParams check_moe_combine(const TensorMeta& o, const TensorMeta& pos, const TensorMeta& weights);

}  // namespace fp8ext
