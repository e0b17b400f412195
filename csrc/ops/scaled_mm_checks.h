// The one validation of fp8ext::scaled_mm's contract, on tensor metadata alone and in header-only torch types (no
// libtorch): the eager backends (scaled_mm.h builds the metadata of real tensors) and the fake implementation
// (the _check_scaled_mm_meta op, for traced calls) run this same code, so both raise the same messages.
#pragma once

#include <cstdint>
#include <optional>

#include "ops/op_errors.h"

namespace fp8ext {

constexpr int64_t kBlockK = 128;  // K elements per block-wise scale group (a) and block (b)
constexpr int64_t kBlockN = 128;  // N elements per block-wise scale block of b

// What validation learned about a call, so the backends need not re-derive it.
struct ScaledMmProblem {
  int64_t M = 0, N = 0, K = 0;
  bool scale_a_per_row = false;  // false: scale_a is one value (tensor-wise), or block-wise
  bool scale_b_per_col = false;  // false: scale_b is one value (tensor-wise), or block-wise
  // Block-wise (DeepSeek-V3 style): scale_a (M, G) holds one value per 1 x 128 group of a row of a, scale_b (G, H)
  // one per 128 x 128 block of b, with G = ceil(K / 128) and H = ceil(N / 128); any strides.
  bool blockwise = false;
  ScalarType out_dtype = ScalarType::BFloat16;

  bool tensorwise() const { return !blockwise && !scale_a_per_row && !scale_b_per_col; }
  int64_t groups_k() const { return (K + kBlockK - 1) / kBlockK; }  // G above
  int64_t blocks_n() const { return (N + kBlockN - 1) / kBlockN; }  // H above
};

// What validation reads of a tensor: a real one's (tensor_meta in scaled_mm.h), or the numbers the fake
// implementation passes for a traced one. The sizes and strides are views of the caller's arrays. The accessors
// are named as a tensor's, so the checks read the same either way.
struct TensorMeta {
  IntSpan sizes_, strides_;
  ScalarType dtype;
  DeviceMeta dev;
  int64_t offset;           // storage_offset, in elements
  std::uintptr_t address;   // of the first element; only its remainder modulo 16 is checked

  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  IntSpan sizes() const { return sizes_; }
  IntSpan strides() const { return strides_; }
  int64_t size(size_t i) const { return sizes_[i]; }
  int64_t stride(size_t i) const { return strides_[i]; }
  // 2-D with its rows one after another, strides (size(1), 1), a size-1 dimension's stride free (as torch's
  // is_contiguous()).
  bool rows_contiguous() const {
    return numel() <= 1 || ((size(1) == 1 || stride(1) == 1) && (size(0) == 1 || stride(0) == size(1)));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (const int64_t s : sizes_) n *= s;
    return n;
  }
  ScalarType scalar_type() const { return dtype; }
  DeviceMeta device() const { return dev; }
  int64_t storage_offset() const { return offset; }
};

// Checks every argument against the contract in README.md ("The op") and throws (op_errors.h) naming the argument,
// what was expected and what was given. Runs before anything is allocated or launched.
ScaledMmProblem check_scaled_mm_meta(const TensorMeta& a, const TensorMeta& b, const TensorMeta& scale_a,
                                     const TensorMeta& scale_b, const std::optional<TensorMeta>& bias,
                                     std::optional<ScalarType> out_dtype);

// `op`'s argument `arg` is on the device of its first tensor `first` (named `first_name`: "a", "x"): the one message
// of every op for a tensor on another device.
void check_on_device_of(const char* op, const TensorMeta& t, const char* arg, const TensorMeta& first,
                        const char* first_name);

// `op`'s argument `arg` starts at a 16-byte boundary (TMA and the kernels' vector loads read it in 16-byte units): the
// one message of every op for a misaligned data pointer.
void check_address_aligned(const char* op, const TensorMeta& t, const char* arg);

// The bias's layout as the kernels read it (contiguous, 16-byte aligned), under the caller's op name ("fp8ext.linear"
// checks its bias before the GEMM it runs is checked).
void check_bias_layout(const TensorMeta& bias, const char* op);

}  // namespace fp8ext
