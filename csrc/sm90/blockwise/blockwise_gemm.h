// The plain-C++ interface between the libtorch entry (ops/scaled_mm_cuda.cpp) and the block-scaled CUTLASS kernels
// (blockwise_gemm.cuh, one config per file in kernels/).
//
// Everything is in the user's frame, with g = k / 128 (the K group) and h = j / 128 (the N block):
//   out[i, j] = sum_g scale_a(i, g) * scale_b(g, h) * sum_{k in group g} a[i, k] * b[k, j]  (+ bias[j])
// a [M, K] row-major e4m3, b [K, N] column-major e4m3 (b(k, j) at b + j * ldb + k), out [M, N] row-major.
// The scales are read through runtime strides, so torch's own layouts (strides (1, M) for scale_a's [M, K/128]
// and (1, K/128) for scale_b's [K/128, N/128]) and any other are taken as they are, with no copy (the op's checks
// take scale_b in torch's layout only, so that a square grid cannot pass untransposed: ops/scaled_mm_checks.cpp).
// The accumulator is promoted into fp32 and scaled once per K group in the mainloop (CUTLASS's sm90 blockwise
// mainloop); the epilogue only adds the bias and converts. A kernel compiled with swap_ab maps this onto its own
// frame itself; callers never transpose anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>

#include "sm90/common/gemm_params.h"  // LaunchResult
#include "sm90/common/kernel_config.h"
#include "sm90/common/name_registry.h"

namespace fp8ext::sm90 {

constexpr int kBlockwiseGroupK = 128;  // K elements per scale_a group and per scale_b block
constexpr int kBlockwiseBlockN = 128;  // N elements per scale_b block

struct BlockwiseParams {
  int64_t M = 0, N = 0, K = 0;

  const void* a = nullptr;  // e4m3, a(i, k) at a + i * lda + k
  int64_t lda = 0;
  const void* b = nullptr;  // e4m3, b(k, j) at b + j * ldb + k
  int64_t ldb = 0;
  void* out = nullptr;  // out(i, j) at out + i * ldo + j, element type = the kernel's OutType
  int64_t ldo = 0;

  const float* scale_a = nullptr;  // scale_a(i, g) at scale_a + i * sa_stride_m + g * sa_stride_g
  int64_t sa_stride_m = 1, sa_stride_g = 0;
  const float* scale_b = nullptr;  // scale_b(g, h) at scale_b + g * sb_stride_g + h * sb_stride_n
  int64_t sb_stride_g = 1, sb_stride_n = 0;
  const void* bias = nullptr;  // N values of the output type, or nullptr for no bias

  void* workspace = nullptr;  // at least the kernel's workspace_size(params) bytes, from the caller's allocator
  size_t workspace_bytes = 0;

  int device_id = 0;
  int sm_count = 0;
  cudaStream_t stream = nullptr;
};

struct BlockwiseTraits {
  int tile_m, tile_n, tile_k;  // in the MMA's frame: with swap_ab, tile_m runs over the user's N
  int cluster_m, cluster_n;
  Schedule schedule;  // kCooperative, kPingpong or kStreamK (CUTLASS); kGemv: decode/bw_gemv_*.cu, no tiles
  OutType out;
  bool swap_ab;
  int max_m = 0;  // the largest M the kernel computes, 0 for any
  // A decode kernel's row-wise counterpart (the same kernel with the scales at the store), whose time the
  // row-wise cost model predicts for the dispatch (blockwise_dispatch.h); nullptr for the CUTLASS kernels.
  const char* rowwise_twin = nullptr;
  bool overlap = false;  // the scaling overlapped with the next K tile's MMAs (overlap_blockwise_mainloop.cuh)
};

using BlockwiseKernelEntry = RegistryEntry<BlockwiseTraits, BlockwiseParams>;

// The registry (name_registry.h), as kernel_registry.h has it for the row-wise kernels: register_ is called from
// the kernel files' static initializers (true, to initialise a bool), all_ lists them by name, find_ gives
// nullptr for a name that was not built.
bool register_blockwise_kernel(const BlockwiseKernelEntry& entry);
const std::vector<BlockwiseKernelEntry>& all_blockwise_kernels();
const BlockwiseKernelEntry* find_blockwise_kernel(std::string_view name);

}  // namespace fp8ext::sm90
