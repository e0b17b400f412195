// torch._scaled_mm as the CUDA backend of scaled_mm uses it, called by name through the dispatcher (PyTorch's
// stable ABI): the tensor-wise route (cuBLASLt), and the backstop of both kernel families, which the dispatch
// hands a call where torch is predicted faster and takes the call exactly as given. Which calls go where is the
// routing's (scaled_mm_cuda.cpp) and the dispatch's (sm90/dispatch/).
#pragma once

#include <cstdint>
#include <optional>

#include "ops/scaled_mm.h"
#include "ops/torch_calls.h"

namespace fp8ext {

// Tensor-wise scales on cuBLASLt.
Tensor tensorwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                            const std::optional<Tensor>& bias, const ScaledMmProblem& problem, bool use_fast_accum);

// Whether torch._scaled_mm's row-wise path can take this call exactly as given, so that the backstop may hand it
// over: bf16 output, e4m3 operands, one scale per row and per column, no bias, `a` without a padded leading
// dimension (lda, the stride between a's rows, is K), and both scale vectors starting on a 16-byte boundary
// (scales_aligned: on the H200, torch 2.11 failed calls whose scale_a was a view starting mid-vector, as a loop
// over an MoE layer's experts makes them; fp8ext's kernels take any float address). From plain facts, so that
// fp8ext.linear, whose `a` is the quantize's output and not a tensor it holds, asks the same question.
bool torch_can_run(const ScaledMmProblem& problem, ScalarType a_dtype, ScalarType b_dtype, int64_t lda,
                   bool has_bias, bool scales_aligned);

// Whether a tensor's data starts on a 16-byte boundary.
bool aligned16(const Tensor& t);

// The backstop: torch._scaled_mm row-wise on the same tensors (scales as (M, 1) and (1, N) views).
Tensor rowwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                         const ScaledMmProblem& problem, bool use_fast_accum);

// Whether the block-wise backstop may be used: the running torch is 2.11, the release whose block-wise path was
// measured, and torch has not refused a block-wise call yet.
bool torch_blockwise_backstop_usable();
// Set with the software key at import: whether the running torch is 2.11.
void set_torch_blockwise_measured(bool measured);
// Turns the block-wise backstop back on after a refusal.
void clear_torch_blockwise_refusal();

// Whether torch._scaled_mm's block-wise path takes this call exactly as given, so that the backstop may hand it
// over with no copy: e4m3 operands, a row-major and b column-major without padding, scale_a in torch's (1, M)
// strides and scale_b in its (1, G) strides (a contiguous [H, G] weight scale, transposed), bf16 output, no bias.
// A stride is not read where its dimension has one element, as in torch's own check. The shapes torch computes
// correctly are the dispatch's to check (sm90::torch_blockwise_computes).
bool torch_can_run_blockwise(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                             const std::optional<Tensor>& bias, const ScaledMmProblem& problem);

// The block-wise backstop: torch._scaled_mm on the same tensors. torch takes no fast accumulation with block-wise
// scales (and fp8ext's block-wise kernels promote every 128 of K either way). Empty where torch refused the call:
// the backstop is then turned off for block-wise calls, with a warning, and the caller runs a kernel. As on the
// tensor-wise route, an error known to be another (out of memory, a CUDA error) propagates unchanged.
std::optional<Tensor> blockwise_via_torch(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                                          const Tensor& scale_b, const ScaledMmProblem& problem);

// torch._scaled_mm reports a shape that cuBLASLt has no algorithm for as an error naming the status (seen on the
// H200: M = 1, K = 16). Only that outcome is fp8ext's to handle; everything else is the caller's.
bool cublaslt_declined(const AtenError& e);

// An out-of-memory error, told by torch's message (the stable ABI carries no exception types).
bool out_of_memory(const AtenError& e);

}  // namespace fp8ext
