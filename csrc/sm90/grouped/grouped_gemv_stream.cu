// Grouped decode as one stream per warp: every warp of a persistent grid walks its share of (group, 16 weight rows)
// items and keeps kStages rounds of loads in flight across the items' boundaries, through its own ring in shared
// memory. In the user's frame, with row-wise scales (decode_common.cuh)
//
//   out_g[i, j] = round_to_out( fma( scale_a_g[i] * scale_b_g[j], acc[i, j], bias[g, j] ) )
//   acc[i, j]   = sum over the 128-wide K chunks q, in order, of  sum_{k in q} a_g[i, k] * b_g[k, j]
//
// each chunk's sum taken by mma.sync (gemv_tensor_core.cuh's fragment scheme), fast: into acc directly; precise:
// on its own, then added to acc in fp32 (the CUTLASS kernels' promotion interval); with block-wise scales
// (blockwise_policy.cuh)
//
//   out_g[i, j] = round_to_out( sum_q scale_a_g(i, q) * scale_b_g(q, j / 128) * (chunk q's sum) + bias[g, j] ).
//
// Why: in grouped_gemv.cu a block reads its 64 weight rows of one group and ends; with a short K (Qwen3-30B-A3B's
// 2048 x 768 experts: three 128-wide rounds per warp) each block's time is mostly its fixed costs (the group lookup,
// the first load's latency, the epilogue), and the masked decode read stayed near 2.2-2.4 TB/s. Here a warp's next
// item is already loading while it finishes the current one, so the weight stream does not stop at item boundaries.
//
// Work: the groups that hold rows (found once per block, from offs or the masked counts, into shared memory), each cut
// into items of 16 output columns; item w (group-major) goes to warp w mod (warps in the grid). An item's rows are
// taken 8 at a time (one MMA token tile), each 8 a pass over the item's weight rows, and each pass is K / 128 rounds.
// A round is one cp.async commit group per lane: the lane's own 16-byte pieces of its two weight rows and its token
// (and, block-wise, its three scales), zero-filled where they fall past N, the rows or the depth. Every lane reads
// back only what it copied itself, so a warp needs no barrier: cp.async.wait_group orders its reads. A round also
// records (item, token chunk, K offset) beside its data, so the consumer needs no cursor of its own.
//
// Forms: 2d x 3d, 3d x 3d (masked or not) and 2d x 2d (a group of depth 0 gets its bias, or zeros). Rows of a 2d x 3d
// output past the last offset are zeroed by the grid after its items. At most kMaxGroups groups.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "sm90/common/grid_dependency.cuh"
#include "sm90/decode/blockwise_policy.cuh"
#include "sm90/decode/decode_common.cuh"
#include "sm90/decode/gemv_tensor_core.cuh"
#include "sm90/grouped/grouped_groups.cuh"
#include "sm90/grouped/grouped_params.h"

namespace fp8ext::sm90 {
namespace {

using Out = __nv_bfloat16;
constexpr int kWarps = 4;  // per block
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 4;  // rounds in flight per warp
constexpr int kTileRows = 16;
constexpr int kTokens = 8;
constexpr int kChunk = 128;
constexpr int kMaxGroups = 1024;

// A lane's pieces of one round, each 16 bytes, stored [stage][piece][lane] so that a warp's 16-byte accesses of one
// piece are contiguous: weight row g at K 16t and 64 + 16t of the chunk (so that each copy instruction reads whole
// 32-byte sectors), row g + 8 at the same; the token at the same; block-wise, the scales (x: the weight block's, y, z:
// tokens 2t and 2t + 1); the round's record. A dot product may visit K in any order if both operands visit it in the
// same one (gemv_tensor_core.cuh): each 16 bytes feed two MMAs, words 0/1 the first, 2/3 the second.
enum Piece { kW0 = 0, kW1 = 2, kX = 4, kScales = 6, kRecord = 7, kPieces = 8 };
constexpr uint32_t kValid = 1, kFirst = 2, kLast = 4, kNoDepth = 8;  // a record's flags

constexpr size_t kTableBytes = (kMaxGroups + 4) * sizeof(int32_t);
constexpr size_t kSmemBytes = kTableBytes + size_t{kWarps} * kStages * kPieces * 32 * 16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes from global memory, bypassing L1 (the weight, read once), or zeros where !ok.
__device__ __forceinline__ void copy16_cg(void* dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0)
               : "memory");
}
// 16 bytes through L1 (a group's tokens, which its items' warps share), or zeros where !ok.
__device__ __forceinline__ void copy16_ca(void* dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy4_ca(void* dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Until this lane's round of kStages - 1 rounds ago has landed.
__device__ __forceinline__ void wait_oldest() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1) : "memory");
}

// The groups that hold rows, in order: table[0] their number, table[1 + i] the i-th. Every group holds rows in a
// 3d x 3d call without counts and in a 2d x 2d one: then no table (returns false, and group i is i).
__device__ bool list_groups_with_rows(const GroupedParams& p, int32_t* table) {
  if (p.form != GroupedForm::k2d3d && p.counts == nullptr) return false;
  __shared__ int warp_totals[kWarps];
  const int64_t per = (p.groups + kThreads - 1) / kThreads;
  const int64_t first = threadIdx.x * per, last = first + per < p.groups ? first + per : p.groups;
  uint32_t held = 0;  // bit i: group first + i holds rows (per <= 8: G <= kMaxGroups)
  for (int64_t g = first; g < last; ++g) held |= uint32_t{find_group<uint8_t, Out>(p, g).rows > 0} << (g - first);
  const int2 sums = block_exclusive_sum<kWarps>(__popc(held), warp_totals);
  int at = sums.x;
  for (int64_t g = first; g < last; ++g) {
    if (held >> (g - first) & 1) table[1 + at++] = static_cast<int32_t>(g);
  }
  if (threadIdx.x == 0) table[0] = sums.y;
  __syncthreads();
  return true;
}

// One warp's producer: where its next round is, and the group of its current item.
struct Cursor {
  int64_t item, items, step, tiles;  // the current item, the items in all, the grid's warps, items per group
  int64_t g, j0, c0, k0;             // its group and first column; the token chunk and K offset of the next round
  GroupView<uint8_t, Out> grp;
};

template <bool Blockwise>
class WarpStream {
 public:
  __device__ WarpStream(const GroupedParams& p, const int32_t* table, bool listed, uint4* ring)
      : p_(p), table_(table), listed_(listed), ring_(ring), lane_(threadIdx.x % 32) {}

  __device__ int64_t group_of(int64_t index) const { return listed_ ? table_[1 + index] : index; }

  __device__ void start(Cursor& c, int64_t first_item, int64_t items, int64_t step, int64_t tiles) const {
    c.items = items;
    c.step = step;
    c.tiles = tiles;
    enter(c, first_item);
  }

  // Copies the cursor's round into `stage` (or records that there is none), commits it, and moves the cursor on.
  __device__ void issue(Cursor& c, int stage) const {
    uint4* s = ring_ + stage * kPieces * 32 + lane_;
    uint32_t flags = 0;
    if (c.item < c.items) {
      const int g = lane_ / 4, t = lane_ % 4;
      const int64_t depth = c.grp.depth;
      flags = kValid | (c.k0 == 0 ? kFirst : 0) | (c.k0 + kChunk >= depth ? kLast : 0) | (depth == 0 ? kNoDepth : 0);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t k = c.k0 + h * 64 + t * 16;
        const bool in_k = k < depth;  // depth and K are multiples of 16: a piece is whole or absent
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t row = c.j0 + half * 8 + g;
          const bool ok = in_k && row < p_.N;
          copy16_cg(s + (kW0 + half * 2 + h) * 32, ok ? c.grp.b + row * p_.ldb + k : c.grp.b, ok);
        }
        const int64_t token = c.c0 + g;
        const bool ok = in_k && token < c.grp.rows;
        copy16_ca(s + (kX + h) * 32, ok ? c.grp.a + token * p_.lda + k : c.grp.a, ok);
      }
      if constexpr (Blockwise) {
        const bool in_k = c.k0 < depth;
        const int64_t q = c.k0 / kChunk;
        auto* scales = reinterpret_cast<float*>(s + kScales * 32);
        copy4_ca(scales, c.grp.scale_b + q * p_.sb_stride_q + (c.j0 / kBlockwiseBlockN) * p_.sb_stride_n, in_k);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t i = c.c0 + 2 * t + e;
          const bool ok = in_k && i < c.grp.rows;
          copy4_ca(scales + 1 + e, ok ? c.grp.scale_a + i * p_.sa_stride_m + q * p_.sa_stride_q : c.grp.scale_a, ok);
        }
      }
      s[kRecord * 32] = make_uint4(static_cast<uint32_t>(c.item), static_cast<uint32_t>(c.c0),
                                   static_cast<uint32_t>(c.k0), flags);
      advance(c);
    } else {
      s[kRecord * 32] = make_uint4(0, 0, 0, 0);
    }
    commit();
  }

 private:
  // The cursor to item `item` (or past the last), at its first round.
  __device__ void enter(Cursor& c, int64_t item) const {
    c.item = item;
    c.c0 = 0;
    c.k0 = 0;
    if (item >= c.items) return;
    c.g = group_of(item / c.tiles);
    c.j0 = item % c.tiles * kTileRows;
    c.grp = find_group<uint8_t, Out>(p_, c.g);
  }
  __device__ void advance(Cursor& c) const {
    c.k0 += kChunk;
    if (c.k0 < c.grp.depth) return;
    c.k0 = 0;
    c.c0 += kTokens;
    if (c.c0 < c.grp.rows) return;
    enter(c, c.item + c.step);
  }

  const GroupedParams& p_;
  const int32_t* table_;
  bool listed_;
  uint4* ring_;  // this warp's stages
  int lane_;
};

// Writes one item's token chunk from the lane's D fragment {(row g, token 2t), (g, 2t + 1), (g + 8, 2t),
// (g + 8, 2t + 1)}, through the decode kernels' stores (the row-wise or block-wise policy).
template <bool Blockwise>
__device__ void store_chunk(const GroupedParams& p, int64_t g, int64_t j0, int64_t c0, bool no_depth,
                            const float (&acc)[4]) {
  const auto grp = find_group<uint8_t, Out>(p, g);
  const int lane = threadIdx.x % 32;
  const int64_t rows = grp.rows - c0 < kTokens ? grp.rows - c0 : kTokens;
  const Out* bias = p.bias == nullptr ? nullptr : static_cast<const Out*>(p.bias) + g * p.N;
  using Policy = std::conditional_t<Blockwise, decode::BlockwisePolicy, decode::RowwisePolicy>;
  typename Policy::Params q;
  q.M = rows;
  q.N = p.N;
  q.ldo = p.N;
  q.out = grp.out + c0 * p.N;
  q.bias = bias;
  q.scale_b = grp.scale_b;
  q.scale_a = grp.scale_a + c0 * p.sa_stride_m;
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const int64_t i = 2 * (lane % 4) + (v & 1), j = j0 + lane / 4 + (v >> 1) * 8;
    if (i >= rows || j >= p.N) continue;
    if (no_depth) {  // no product to sum: the bias, or zeros
      static_cast<Out*>(q.out)[i * p.N + j] = bias == nullptr ? Out(0.0f) : bias[j];
    } else {
      Policy::template store<Out>(q, i, j, acc[v]);
    }
  }
}

// Blockwise: the block-wise policy (scales inside the K loop, so always promoted); else row-wise, Precise promoting
// every 128 of K.
template <bool Blockwise, bool Precise>
__global__ void __launch_bounds__(kThreads, 3) grouped_gemv_stream_kernel(const __grid_constant__ GroupedParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  auto* table = reinterpret_cast<int32_t*>(smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto* ring = reinterpret_cast<uint4*>(smem + kTableBytes) + warp * kStages * kPieces * 32;

  pdl::wait_for_prior_grids();
  pdl::allow_dependent_grids();
  const bool listed = list_groups_with_rows(p, table);
  const int64_t active = listed ? table[0] : p.groups;
  const int64_t tiles = (p.N + kTileRows - 1) / kTileRows;

  const WarpStream<Blockwise> stream(p, table, listed, ring);
  Cursor cursor;
  stream.start(cursor, static_cast<int64_t>(blockIdx.x) * kWarps + warp, active * tiles,
               static_cast<int64_t>(gridDim.x) * kWarps, tiles);
#pragma unroll
  for (int s = 0; s < kStages; ++s) stream.issue(cursor, s);

  float acc[4] = {};
  for (int stage = 0;; stage = stage + 1 == kStages ? 0 : stage + 1) {
    wait_oldest();
    const uint4* s = ring + stage * kPieces * 32 + lane;
    const uint4 record = s[kRecord * 32];
    if (!(record.w & kValid)) break;
    if (record.w & kFirst) {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[r] = 0.0f;
    }
    const uint4 w00 = s[(kW0 + 0) * 32], w01 = s[(kW0 + 1) * 32];  // row g: K 16t, 64 + 16t
    const uint4 w10 = s[(kW1 + 0) * 32], w11 = s[(kW1 + 1) * 32];  // row g + 8
    const uint4 x0 = s[kX * 32], x1 = s[(kX + 1) * 32];
    if constexpr (Blockwise || Precise) {
      float part[4] = {};
      gemv_tc::mma_16_bytes<__NV_E4M3>(part, w00, w10, x0);
      gemv_tc::mma_16_bytes<__NV_E4M3>(part, w01, w11, x1);
      if constexpr (Blockwise) {
        const uint4 sc = s[kScales * 32];
        const float sb = __uint_as_float(sc.x);
        const float s0 = sb * __uint_as_float(sc.y), s1 = sb * __uint_as_float(sc.z);
        acc[0] = fmaf(s0, part[0], acc[0]);
        acc[1] = fmaf(s1, part[1], acc[1]);
        acc[2] = fmaf(s0, part[2], acc[2]);
        acc[3] = fmaf(s1, part[3], acc[3]);
      } else {
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[r] += part[r];
      }
    } else {
      gemv_tc::mma_16_bytes<__NV_E4M3>(acc, w00, w10, x0);
      gemv_tc::mma_16_bytes<__NV_E4M3>(acc, w01, w11, x1);
    }
    if (record.w & kLast) {
      const int64_t item = record.x;
      store_chunk<Blockwise>(p, stream.group_of(item / tiles), item % tiles * kTileRows, record.y,
                             (record.w & kNoDepth) != 0, acc);
    }
    stream.issue(cursor, stage);  // the stage just read: every lane read only its own pieces
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  zero_tail_rows<Out>(p, blockIdx.x, gridDim.x);
}

template <bool Blockwise, bool Precise>
LaunchResult launch_grouped_gemv_stream(const GroupedParams& p) {
  constexpr auto kernel = &grouped_gemv_stream_kernel<Blockwise, Precise>;
  if (p.groups > kMaxGroups) return {false, "groups", "at most 1024 groups"};
  // The ring needs more than the default 48 KB of shared memory; the grid fills the SMs at most once.
  static const int per_sm = [] {
    int n = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, kSmemBytes) != cudaSuccess)
      return 0;
    return n;
  }();
  if (per_sm == 0) return {false, "launch", "the stream kernel does not fit an SM"};
  // No more warps than items could exist: a 2d x 3d call of T rows has at most min(G, T) groups with rows.
  const int64_t groups = p.form == GroupedForm::k2d3d && p.M < p.groups ? p.M : p.groups;
  const int64_t items = groups * ((p.N + kTileRows - 1) / kTileRows);
  if (items > UINT32_MAX) return {false, "shape", "more than 2^32 items of 16 columns"};
  // As many warps as give each the same number of items (their ceiling on a full grid): a warp left with one item
  // more than the others would set the call's time.
  const int64_t most_warps = static_cast<int64_t>(per_sm) * p.sm_count * kWarps;
  const int64_t per_warp = items <= most_warps ? 1 : (items + most_warps - 1) / most_warps;
  const int64_t warps = (items + per_warp - 1) / per_warp;
  const int64_t blocks = warps < kWarps ? 1 : (warps + kWarps - 1) / kWarps;
  const cudaError_t err = pdl::launch_with_smem(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                                                kSmemBytes, p.stream, p);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

template <bool Blockwise, bool Precise>
bool register_variant(const char* name) {
  return register_grouped_decode_kernel(name, Precise || Blockwise, &launch_grouped_gemv_stream<Blockwise, Precise>);
}

// stream_r16: 16 weight rows per item, 8 tokens per pass.
const bool kRegistered = register_variant<false, false>("grp_gemv_stream_r16_fast_bf16") &&
                         register_variant<false, true>("grp_gemv_stream_r16_precise_bf16") &&
                         register_variant<true, true>("grp_bw_gemv_stream_r16_bf16");

}  // namespace
}  // namespace fp8ext::sm90
