// Declarations shared by the libtorch-facing files: the one validation of the op's contract, the reference
// path, and the per-backend entries registered in bindings.cpp / scaled_mm_cuda.cu.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/util/accumulate.h>

namespace fp8ext {

// The names users know from Python ("torch.bfloat16", "[2, 32, 64]"), for the ops' error messages.
std::string dtype_name(at::ScalarType t);
std::string shape_str(at::IntArrayRef sizes);

// What validation learned about a call, so the backends need not re-derive it.
struct ScaledMmProblem {
  int64_t M = 0, N = 0, K = 0;
  bool scale_a_per_row = false;  // false: scale_a is one value (tensor-wise)
  bool scale_b_per_col = false;  // false: scale_b is one value (tensor-wise)
  at::ScalarType out_dtype = at::kBFloat16;

  bool tensorwise() const { return !scale_a_per_row && !scale_b_per_col; }
};

// What validation reads of a tensor: a real one's (TensorMeta::of), or the numbers the fake implementation
// passes for a traced one (the _check_scaled_mm_meta op in bindings.cpp). The sizes and strides are views of the
// caller's arrays. The accessors are at::Tensor's, so the checks read the same either way.
struct TensorMeta {
  at::IntArrayRef sizes_, strides_;
  at::ScalarType dtype;
  c10::Device dev;
  int64_t offset;           // storage_offset, in elements
  std::uintptr_t address;   // of the first element; only its remainder modulo 16 is checked

  static TensorMeta of(const at::Tensor& t);
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  at::IntArrayRef sizes() const { return sizes_; }
  at::IntArrayRef strides() const { return strides_; }
  int64_t size(size_t i) const { return sizes_[i]; }
  int64_t stride(size_t i) const { return strides_[i]; }
  int64_t numel() const { return c10::multiply_integers(sizes_); }
  at::ScalarType scalar_type() const { return dtype; }
  c10::Device device() const { return dev; }
  int64_t storage_offset() const { return offset; }
};

// Checks every argument against the contract in README.md ("The op") and throws c10::Error naming the
// argument, what was expected and what was given. Runs before anything is allocated or launched.
ScaledMmProblem check_scaled_mm_args(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                                     const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                                     std::optional<at::ScalarType> out_dtype);
// The same checks on metadata alone: the one definition of every message, for real and traced calls.
ScaledMmProblem check_scaled_mm_meta(const TensorMeta& a, const TensorMeta& b, const TensorMeta& scale_a,
                                     const TensorMeta& scale_b, const std::optional<TensorMeta>& bias,
                                     std::optional<at::ScalarType> out_dtype);

// out = (a @ b) * scale_a * scale_b (+ bias) computed in float32 with ATen ops on whatever device the inputs
// are on. The CPU backend, the CUDA backend on GPUs without an sm_90a kernel for the case, and every backend's
// empty M, N or K (answered without a GEMM). It works on tiles of rows of a and columns of b whose float32
// temporaries (a's rows, b's columns, the tile's result and its scale product) take at most kReferenceChunkBytes
// together, plus at most a quarter of that for fp8 copies of padded views, as long as K <= 8M (beyond, one row
// and one column at a time: 8 bytes per K); only the output is full size.
constexpr int64_t kReferenceChunkBytes = int64_t{64} << 20;
at::Tensor scaled_mm_reference(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                               const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                               const ScaledMmProblem& problem);

at::Tensor scaled_mm_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                         const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                         std::optional<at::ScalarType> out_dtype, bool use_fast_accum);

}  // namespace fp8ext
