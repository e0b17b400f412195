// What the CUDA backends hand the sm90 kernels (csrc/sm90, plain CUDA/CUTLASS): the call in the kernels' types,
// their parameters from the call's tensors (or, for fp8ext.linear, from pointers), and the launch, whose workspace
// comes from torch's caching allocator.
#pragma once

#include <cstdint>
#include <optional>

#include <cuda_runtime.h>

#include <torch/csrc/stable/ops.h>

#include "ops/scaled_mm.h"
#include "sm90/blockwise/blockwise_gemm.h"
#include "sm90/common/gemm_params.h"
#include "sm90/dispatch/dispatch.h"

namespace fp8ext {

sm90::OutType to_out_type(ScalarType t);

// The dispatch's key of a row-wise call.
sm90::ProblemKey problem_key(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, bool use_fast_accum,
                             ScalarType a_dtype, ScalarType b_dtype);

// An operand as the kernels read it: its first element and its leading dimension (the stride between the rows
// of a, between the columns of b).
struct Operand {
  const void* data;
  int64_t ld;
};

// The row-wise kernel parameters of one call (sm90/common/gemm_params.h): the problem, the operands, the output
// (`out`, the contiguous [M, N] result, already allocated), the bias, where to run, a's FP8 type, and the scales
// (M values of scale_a when problem.scale_a_per_row, N of scale_b when problem.scale_b_per_col, else one value
// each). From pointers, for fp8ext.linear, which launches on the quantize's outputs without making tensor views
// of them.
sm90::GemmParams gemm_params(Operand a, Operand b, const float* scale_a, const float* scale_b, bool a_is_e5m2,
                             const void* bias, void* out, const ScaledMmProblem& problem, int device, int sm_count,
                             cudaStream_t stream);

// The same from scaled_mm's tensors.
sm90::GemmParams gemm_params(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                             const std::optional<Tensor>& bias, const ScaledMmProblem& problem, const Tensor& out,
                             int sm_count, cudaStream_t stream);

// The block-scaled kernel parameters of one call (sm90/blockwise/blockwise_gemm.h): the scales through their
// strides.
sm90::BlockwiseParams blockwise_params(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                                       const std::optional<Tensor>& bias, const ScaledMmProblem& problem,
                                       const Tensor& out, int sm_count, cudaStream_t stream);

// Launches one kernel. Only the stream-K kernels need a workspace; it comes from the caching allocator, never
// cudaMalloc, and dispatch keeps those kernels out of CUDA-graph capture unless one is forced by name.
// `like` is any tensor on the call's device. For both families (KernelEntry with GemmParams, BlockwiseKernelEntry
// with BlockwiseParams).
template <class Entry, class Params>
sm90::LaunchResult launch(const Entry& kernel, Params p, const Tensor& like) {
  std::optional<Tensor> workspace;
  p.workspace_bytes = kernel.workspace_size(p);
  if (p.workspace_bytes > 0) {
    workspace = torch::stable::new_empty(like, {static_cast<int64_t>(p.workspace_bytes)}, ScalarType::Byte);
    p.workspace = workspace->data_ptr();
  }
  return kernel.launch(p);
}

}  // namespace fp8ext
