// Grouped decode on the tensor cores: groups of a few rows (MoE decode, a handful of tokens per expert) against their
// experts' weights, each block running the decode kernel's block (sm90/decode/gemv_tensor_core.cuh) on one group's
// rows, bf16 output. In the user's frame, with row-wise scales (decode_common.cuh)
//
//   out_g[i, j] = round_to_out( fma( scale_a_g[i] * scale_b_g[j], acc[i, j], bias[g, j] ) )
//
// acc summed as gemv_tensor_core.cuh sums it, fast or precise (each 128-wide K chunk summed by mma.sync on its own and
// added to acc in fp32, the CUTLASS kernels' promotion interval); with block-wise scales (blockwise_policy.cuh)
//
//   out_g[i, j] = round_to_out( sum_q scale_a_g(i, q) * scale_b_g(q, j / 128) * (chunk q's sum) + bias[g, j] ).
//
// Why: at a few rows per group a grouped call is a read of the active experts' weights. The CUTLASS grouped kernels
// spend a prologue kernel on the per-group tables, and in the GEMM a tile's TMA descriptors are rewritten whenever it
// moves to another group; with a short K (Qwen3-30B-A3B's 2048 x 768 experts: six 128-deep blocks a tile) the masked
// decode read stayed at about 2.2 TB/s on an H100 and on the H200 alike. Here one kernel reads each weight byte once,
// straight into registers, and a group without rows costs its blocks one look at offs or counts.
//
// Grid: x over blocks of weight rows (output columns), y over group slots. A 3d x 3d call (masked or not) or a
// 2d x 2d one has a slot per group. A 2d x 3d call of T rows has min(G, T) slots, since no more groups can hold rows,
// and slot y runs the y-th group that holds rows (a scan of offs in the block); one more row of blocks zeros the
// output rows past the last offset. A group of more than 32 rows runs in chunks of 32, each reading the weight
// again: the dispatch sends these kernels 2d x 3d calls of at most 8 rows in all, and masked and 3d x 3d calls of at
// most 8 rows per group (a masked call's expected_m); any form runs by name. A group of depth 0 (an empty K slice,
// or K = 0) gets its bias, or zeros.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "sm90/blockwise/blockwise_gemm.h"
#include "sm90/common/gemm_params.h"
#include "sm90/common/grid_dependency.cuh"
#include "sm90/decode/blockwise_policy.cuh"
#include "sm90/decode/decode_common.cuh"
#include "sm90/decode/gemv_tensor_core.cuh"
#include "sm90/grouped/grouped_groups.cuh"
#include "sm90/grouped/grouped_params.h"

namespace fp8ext::sm90 {
namespace {

using Out = __nv_bfloat16;
using gemv_tc::kMaxM;
using gemv_tc::kWarps;
constexpr int kThreads = kWarps * 32;

// Rows of 2d x 3d group g, clamped as find_group() clamps them.
__device__ int64_t rows_2d3d(const GroupedParams& p, int64_t g) {
  const int64_t start = g == 0 ? 0 : clamped(p.offs[g - 1], 0, p.M);
  return clamped(p.offs[g], start, p.M) - start;
}

// The y-th group of a 2d x 3d call, in order, that holds rows, or -1. Every thread counts the groups of its share
// that hold rows; a block-wide exclusive scan of the counts says whose share holds the y-th. All threads call it.
__device__ int64_t nth_group_with_rows(const GroupedParams& p, int64_t y) {
  __shared__ int warp_totals[kWarps];
  __shared__ int64_t found;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t per = (p.groups + kThreads - 1) / kThreads;
  const int64_t first = threadIdx.x * per, last = first + per < p.groups ? first + per : p.groups;
  int count = 0;
  for (int64_t g = first; g < last; ++g) count += rows_2d3d(p, g) > 0;
  int inclusive = count;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += v;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  if (threadIdx.x == 0) found = -1;
  __syncthreads();
  int before = inclusive - count;
  for (int w = 0; w < warp; ++w) before += warp_totals[w];
  if (y >= before && y < before + count) {
    int64_t seen = before;
    for (int64_t g = first; g < last; ++g) {
      if (rows_2d3d(p, g) > 0 && seen++ == y) found = g;
    }
  }
  __syncthreads();
  return found;
}

// The block's columns [j0, j0 + kBlockRows) of a group of depth 0: its bias, or zeros (no product to sum).
template <int kBlockRows>
__device__ void fill_without_depth(const GroupedParams& p, const GroupView<uint8_t, Out>& grp, int64_t g) {
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const auto* bias = static_cast<const Out*>(p.bias);
  for (int64_t idx = threadIdx.x; idx < grp.rows * kBlockRows; idx += kThreads) {
    const int64_t i = idx / kBlockRows, j = j0 + idx % kBlockRows;
    if (j < p.N) grp.out[i * p.N + j] = bias == nullptr ? Out(0.0f) : bias[g * p.N + j];
  }
}

// Group grp's rows through gemv_tensor_core.cuh's block, kMaxM rows at a time (the fewest tiles of 8 tokens that
// hold a chunk): q holds everything but the chunk's rows, operand, scales and output.
template <class Policy, bool Promote, int MT, int S>
__device__ void run_chunks(typename Policy::Params q, const GroupView<uint8_t, Out>& grp, const GroupedParams& p) {
  for (int64_t c0 = 0; c0 < grp.rows; c0 += kMaxM) {
    q.M = grp.rows - c0 < kMaxM ? grp.rows - c0 : kMaxM;
    q.a = grp.a + c0 * p.lda;
    q.scale_a = grp.scale_a + c0 * p.sa_stride_m;
    q.out = grp.out + c0 * p.N;
    gemv_tc::with_token_tiles<kMaxM / 8>(q.M, [&](auto nt) {
      gemv_tc::gemv_tc_block<Policy, Out, __NV_E4M3, MT, decltype(nt)::value, S, Promote>(q, blockIdx.x);
    });
  }
}

// Blockwise: the block-scaled policy (scales inside the K loop, so always promoted); else row-wise, Precise
// promoting every 128 of K. MT, S: gemv_tensor_core.cuh's weight tiles per warp and K slices. `slots`: the grid's
// group slots (above).
template <bool Blockwise, bool Precise, int MT, int S>
__global__ void __launch_bounds__(kThreads, 2) grouped_gemv_kernel(GroupedParams p, int64_t slots) {
  constexpr int kBlockRows = gemv_tc::WarpPart<MT, S>::kBlockRows;
  pdl::wait_for_prior_grids();
  pdl::allow_dependent_grids();
  const int64_t y = blockIdx.y;
  if (y >= slots) {
    zero_tail_rows<Out>(p, blockIdx.x, gridDim.x);
    return;
  }
  const int64_t g = slots == p.groups ? y : nth_group_with_rows(p, y);
  if (g < 0) return;
  const auto grp = find_group<uint8_t, Out>(p, g);
  if (grp.rows == 0) return;
  if (grp.depth == 0) return fill_without_depth<kBlockRows>(p, grp, g);
  using Policy = std::conditional_t<Blockwise, decode::BlockwisePolicy, decode::RowwisePolicy>;
  typename Policy::Params q;  // the group's weight, depth and bias (run_chunks sets the rest per chunk)
  q.N = p.N;
  q.K = grp.depth;
  q.lda = p.lda;
  q.b = grp.b;
  q.ldb = p.ldb;
  q.ldo = p.N;
  q.scale_b = grp.scale_b;
  q.bias = p.bias == nullptr ? nullptr : static_cast<const Out*>(p.bias) + g * p.N;
  if constexpr (Blockwise) {
    q.sa_stride_m = p.sa_stride_m;
    q.sa_stride_g = p.sa_stride_q;
    q.sb_stride_g = p.sb_stride_q;
    q.sb_stride_n = p.sb_stride_n;
  }
  run_chunks<Policy, Precise && !Blockwise, MT, S>(q, grp, p);
}

template <bool Blockwise, bool Precise, int MT, int S>
LaunchResult launch_grouped_gemv(const GroupedParams& p) {
  constexpr int64_t kBlockRows = gemv_tc::WarpPart<MT, S>::kBlockRows;
  const bool rows_2d3d = p.form == GroupedForm::k2d3d;
  const int64_t slots = rows_2d3d && p.M < p.groups ? p.M : p.groups;
  const dim3 grid(static_cast<unsigned>((p.N + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(slots + (rows_2d3d ? 1 : 0)));
  const cudaError_t err =
      pdl::launch(&grouped_gemv_kernel<Blockwise, Precise, MT, S>, grid, dim3(kThreads), p.stream, p, slots);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

size_t no_workspace(const GroupedParams&) { return 0; }

constexpr KernelTraits grouped_gemv_traits(Accum accum) {
  KernelTraits t{};
  t.schedule = Schedule::kGemv;
  t.accum = accum;
  t.out = OutType::kBF16;
  t.in_a = InType::kE4M3;
  return t;
}

template <bool Blockwise, bool Precise, int MT, int S>
bool register_variant(const char* name) {
  return register_grouped_kernel({name, grouped_gemv_traits(Precise || Blockwise ? Accum::kPrecise : Accum::kFast),
                                  &launch_grouped_gemv<Blockwise, Precise, MT, S>, &no_workspace});
}

// m32: at most 32 rows (4 tiles of 8 tokens) per pass over the weight; r16: one 16-row weight tile per warp; s2: K in
// 2 slices. Eight slices ran slower than two on 164 of 180 of the tuning models' decode rows, by up to 1.9x; 8-row
// forms (registers for one token tile, three blocks per SM), K in one slice and 32 weight rows per warp ran no
// faster on their decode and masked rows (records: docs/decisions.md).
const bool kRegistered = register_variant<false, false, 1, 2>("grp_gemv_tc_m32_r16_s2_fast_bf16") &&
                         register_variant<false, true, 1, 2>("grp_gemv_tc_m32_r16_s2_precise_bf16") &&
                         register_variant<true, true, 1, 2>("grp_bw_gemv_tc_m32_r16_s2_bf16");

}  // namespace
}  // namespace fp8ext::sm90
