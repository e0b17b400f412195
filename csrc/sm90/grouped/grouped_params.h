// The plain-C++ interface between the grouped op's CUDA entry (ops/scaled_grouped_mm_cuda.cpp) and the grouped
// CUTLASS kernels (grouped_gemm.cuh), in the user's frame (the contract: ops/grouped_checks.h):
//
//   row-wise:    out_g[i, j] = scale_a_g[i] * scale_b_g[j] * sum_k a_g[i, k] * b_g[k, j]  (+ bias[g, j])
//   block-wise:  out_g[i, j] = sum_q scale_a_g(i, q) * scale_b_g(q, j / 128) * sum_{k in K group q} a_g[i, k] b_g[k, j]
//                              (+ bias[g, j])
//
// Where each group's rows, depth, operands and scales start is known only on the device (offs), so a prologue
// kernel writes the per-group tables that CUTLASS's grouped scheduler reads, from these base pointers and strides.
// Plain C++: no CUTLASS, no libtorch.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "sm90/common/gemm_params.h"
#include "sm90/common/kernel_config.h"
#include "sm90/common/name_registry.h"

namespace fp8ext::sm90 {

enum class GroupedForm {
  k2d3d,  // a [T, K] with b [G, K, N]; offs: the groups' end rows; out [T, N]
  k3d3d,  // a [G, M, K] with b [G, K, N]; out [G, M, N]
  k2d2d,  // a [M, K_total] with b [K_total, N]; offs: the groups' end columns of K; out [G, M, N]
};

struct GroupedParams {
  GroupedForm form = GroupedForm::k2d3d;
  int64_t groups = 0;
  int64_t M = 0;  // a's rows: T (2d x 3d) or one group's M
  int64_t N = 0;
  int64_t K = 0;  // one group's K, or K_total (2d x 2d)

  const void* a = nullptr;  // fp8 e4m3, a(i, k) at a + g * a_group_stride + i * lda + k (2d: a_group_stride 0)
  int64_t lda = 0, a_group_stride = 0;
  const void* b = nullptr;  // fp8 e4m3, b(k, j) at b + g * b_group_stride + j * ldb + k
  int64_t ldb = 0, b_group_stride = 0;
  const int32_t* offs = nullptr;    // G end offsets on the device (2d x 3d, 2d x 2d), else nullptr
  const int32_t* counts = nullptr;  // masked 3d x 3d: G row counts on the device (the rows past them are not written)
  void* out = nullptr;            // contiguous, element type = the kernel's OutType

  // Row-wise: scale_a(g, i) at scale_a + g * scale_a_group_stride + i * sa_stride_m (2d x 3d: the row index is
  // a's, r, and the group stride 0), scale_b(g, j) at scale_b + g * scale_b_group_stride + j.
  // Block-wise: scale_a(g, i, q) at scale_a + g * scale_a_group_stride + i * sa_stride_m + q * sa_stride_q for
  // K group q, scale_b(g, q, h) at scale_b + g * scale_b_group_stride + q * sb_stride_q + h * sb_stride_n for
  // block h of 128 columns. The block-wise kernels take only sa_stride_q = sb_stride_q = 1 and sa_stride_m =
  // sb_stride_n = ceil(K / 128): CUTLASS's mainloop rebuilds those layouts from the extents (run_grouped copies others).
  const float* scale_a = nullptr;
  int64_t scale_a_group_stride = 0, sa_stride_m = 1, sa_stride_q = 0;
  const float* scale_b = nullptr;
  int64_t scale_b_group_stride = 0, sb_stride_q = 0, sb_stride_n = 1;
  const void* bias = nullptr;  // [G, N] of the output type, contiguous, or nullptr

  // A split kernel (grouped_split_launch) runs groups of more than split_rows rows on its large-tile kernel and the
  // others on its small-tile one; the other kernels ignore it.
  int64_t split_rows = 0;
  // Set by a split kernel for its large-tile kernel: the split's prologue has written that kernel's tables at the
  // start of the workspace, so its launch runs the GEMM alone.
  bool tables_written = false;

  void* workspace = nullptr;  // at least grouped_workspace_size(params) bytes
  size_t workspace_bytes = 0;
  int device_id = 0;
  int sm_count = 0;
  cudaStream_t stream = nullptr;
};

// A grouped kernel's compile-time description: a row-wise KernelConfig, or block-wise scales (then the accumulation
// is precise by construction: fp32 promotion and scaling once per K group of 128).
template <int TileM, int TileN, int TileK, int ClusterM, int ClusterN, Schedule Sched, Accum Acc, OutType Out,
          bool SwapAB, bool Blockwise = false>
struct GroupedConfig : KernelConfig<TileM, TileN, TileK, ClusterM, ClusterN, Sched, Acc, Out, SwapAB> {
  static constexpr bool kBlockwise = Blockwise;
  static_assert(!Blockwise || (Acc == Accum::kPrecise && TileK == 128 && ClusterM * ClusterN == 1),
                "block-wise: precise, one K group per 128-deep tile, and no cluster (CUTLASS's blockwise pipeline "
                "does not order a stage's release with every thread's scale reads in a cluster)");
};

using GroupedKernelEntry = RegistryEntry<KernelTraits, GroupedParams>;
using GroupedRegistry = NameRegistry<GroupedKernelEntry>;
inline bool register_grouped_kernel(const GroupedKernelEntry& e) { return GroupedRegistry::add(e); }

}  // namespace fp8ext::sm90
