// The fused row-wise FP8 quantization kernels: per-row amax, scale and cast in one launch (numerics in
// quantize_rowwise.h). Plain CUDA; the libtorch entry is quantize_rowwise_cuda.cpp.
//
// One pass (every row whose start is 16-byte aligned and whose width is at most 64 KiB: K <= 32768 in bf16):
// kThreadsPerRow threads share a row and each holds kPacks 16-byte packs of it in registers. All of a thread's
// loads are issued before any is used, so a row costs one trip to memory; the packs' |x| reduce to the row's amax
// (redux.sync in each warp, then shared memory across the row's warps), and the same registers are scaled, cast
// and stored. x is read once: the kernel moves K * (sizeof(In) + 1) bytes per row, the least there is. Each CTA
// takes one row group, with no loop. The width
// is the smallest power of two from a warp to 1024 threads that covers the row with 4 packs a thread, so a thread
// keeps 64 bytes in flight and several rows share an SM; with at most kFewRows rows, 2 packs a thread and twice
// the threads, which shortens each row's chain when the GPU is not full (launch_aligned).
//
// Two passes (rows that are not 16-byte aligned, read one element at a time, and rows over 64 KiB): pass 1 reads
// the row and reduces it to amax, pass 2 reads it again, from L1/L2, and writes q. The width is chosen so that the
// rows in flight on the whole GPU fit in L2 and pass 2 does not go back to HBM: a warp per row for rows up to
// 2 KiB, 128 threads up to 8 KiB, else 512 threads.
//
// Short code is part of the speed at small M, where the kernel is one chain of dependent steps with nothing to
// overlap it. So the amax is taken on integer keys (abs_key: a few integer instructions a pack, no float compares),
// packs are kept and stored as whole 32-bit words, and what is rare stays out of line (the 64-bit division for 3-D
// strides, the slow path of the IEEE divisions). That took the bf16 small-M kernel's path from about 370
// instructions to about 200, and its time at M = 1..16 down by 0.15-0.3 us (docs/decisions.md).
// Gated rows (fp8ext.silu_mul_quantize_rowwise, QuantizeRowwiseParams::gated): a row of x holds the gate half and
// the up half, and each unit the kernels load is y = silu(gate) * up computed from the two halves' units at the same
// position (load_unit), with torch's roundings; the rest is the same kernel, so y is never written to memory.
#include <climits>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "sm90/common/grid_dependency.cuh"
#include "quantize/quantize_common.cuh"
#include "quantize/quantize_rowwise.h"

namespace fp8ext {
namespace {

// The largest key of a 16-byte pack (four 32-bit words): for 16-bit inputs the words' two halves are keyed and
// compared at once (max.u16x2), then the two halves of the result.
template <typename In>
__device__ __forceinline__ uint32_t pack_key(const uint4& v) {
  if constexpr (sizeof(In) == 2) {
    constexpr uint32_t kAbs = 0x7fff7fffu;
    const uint32_t m = __vmaxu2(__vmaxu2(v.x & kAbs, v.y & kAbs), __vmaxu2(v.z & kAbs, v.w & kAbs));
    return max(m & 0xffffu, m >> 16);
  } else {
    constexpr uint32_t kAbs = 0x7fffffffu;
    return max(max(v.x & kAbs, v.y & kAbs), max(v.z & kAbs, v.w & kAbs));
  }
}

// What a 16-byte pack of In becomes: 8 bytes from 16-bit inputs, 4 bytes from fp32.
template <typename In>
using QPack = std::conditional_t<sizeof(In) == 2, uint2, uint32_t>;

// q for a 16-byte pack, stored as one access. Element i of the pack is byte i of the result, as in memory.
template <typename In, __nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ QPack<In> scaled(const uint4& v, float inv) {
  if constexpr (sizeof(In) == 2) {
    return make_uint2(fp8x2_of_word<In, kFormat>(v.x, inv) | fp8x2_of_word<In, kFormat>(v.y, inv) << 16,
                      fp8x2_of_word<In, kFormat>(v.z, inv) | fp8x2_of_word<In, kFormat>(v.w, inv) << 16);
  } else {
    return fp8x2<kFormat>(__uint_as_float(v.x), __uint_as_float(v.y), inv) |
           fp8x2<kFormat>(__uint_as_float(v.z), __uint_as_float(v.w), inv) << 16;
  }
}
// q for one element (rows that are not 16-byte aligned).
template <typename In, __nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ __nv_fp8_storage_t scaled(const In& v, float inv) {
  return __nv_cvt_float_to_fp8(to_float(v) * inv, __NV_SATFINITE, kFormat);
}

// A gated row's values (QuantizeRowwiseParams::gated): y = silu(gate) * up with torch's roundings to In
// (silu_mul in quantize_rowwise.h), from the gate's and the up's unit at the same position of their halves.
template <typename In>
__device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<In>(v));
}
template <typename In>
__device__ __forceinline__ In gated(const In& g, const In& u) {
  const float y = silu_mul(to_float(g), to_float(u), [](float v) { return round_to<In>(v); });
  return from_float<In>(y);  // exact: y is already a value of In
}
template <typename In>
__device__ __forceinline__ uint4 gated(const uint4& g, const uint4& u) {
  constexpr int kN = 16 / sizeof(In);
  In gv[kN], uv[kN], yv[kN];
  memcpy(gv, &g, 16);
  memcpy(uv, &u, 16);
#pragma unroll
  for (int i = 0; i < kN; ++i) yv[i] = gated<In>(gv[i], uv[i]);
  uint4 y;
  memcpy(&y, yv, 16);
  return y;
}

// Unit i of a row (a 16-byte pack or one element): x's own, or of a gated row, y from the gate's unit i and the
// up's, `half` units further.
template <typename In, bool kGated, typename Unit>
__device__ __forceinline__ Unit load_unit(const Unit* x, int64_t i, int64_t half) {
  if constexpr (kGated) {
    return gated<In>(x[i], x[i + half]);
  } else {
    return x[i];
  }
}

// CTAs of at least 256 threads: several rows share a CTA when a row needs fewer threads.
__host__ __device__ constexpr int cta_threads(int threads_per_row) {
  return threads_per_row < 256 ? 256 : threads_per_row;
}

// Row r's start when x has an outer stride (3-D, not collapsible to 2-D): a 64-bit division, a long subroutine,
// kept out of line so that the common path's code stays short (see the top of the file).
__device__ __noinline__ int64_t strided_row_offset(int64_t r, int64_t inner_rows, int64_t outer_stride,
                                                   int64_t inner_stride) {
  return (r / inner_rows) * outer_stride + (r % inner_rows) * inner_stride;
}

// Where the row that row r of q quantizes starts (the layout of QuantizeRowwiseParams; through row_index when
// gathered). Without an outer stride (2-D x, or 3-D with B = 1) every row is an inner row.
template <typename In>
__device__ __forceinline__ const In* row_start(const QuantizeRowwiseParams& p, int64_t r) {
  const In* x = static_cast<const In*>(p.x);
  if (p.row_index != nullptr) r = p.row_index[r];
  if (p.outer_stride == 0) return x + r * p.inner_stride;
  return x + strided_row_offset(r, p.inner_rows, p.outer_stride, p.inner_stride);
}

// The row's largest key from each of its kThreadsPerRow threads' partial one: one redux.sync per warp, then, when
// the row spans warps, each warp's max through shared memory and redux once more. Every thread of the CTA must
// call it (it holds __syncthreads() when a row spans warps); `last` says the CTA has no further row group, so no
// barrier is needed before shared memory could be written again.
template <int kThreadsPerRow, int kRowsPerCta>
__device__ __forceinline__ uint32_t row_max_key(uint32_t key, int row_in_cta, int lane, bool last) {
  constexpr int kWarpsPerRow = kThreadsPerRow / 32;
  key = __reduce_max_sync(kFullMask, key);
  if constexpr (kWarpsPerRow > 1) {
    __shared__ uint32_t warp_key[kRowsPerCta][kWarpsPerRow];
    if (lane % 32 == 0) warp_key[row_in_cta][lane / 32] = key;
    __syncthreads();
    key = __reduce_max_sync(kFullMask, lane % 32 < kWarpsPerRow ? warp_key[row_in_cta][lane % 32] : 0u);
    if (!last) __syncthreads();  // the CTA's next row group overwrites warp_key
  }
  return key;
}

// After a row's reduction, in both kernels: the formula's amax (eps, scale_ub) and the row's scale, written by
// lane 0 after the row's q (the scale's division is then off the path to the stores).
template <typename In>
__device__ __forceinline__ float row_amax(const QuantizeRowwiseParams& p, uint32_t key) {
  return rowwise_amax(key_value<In>(key), p.scale_ub);
}
template <__nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ void store_scale(const QuantizeRowwiseParams& p, int64_t r, int lane, float amax) {
  if (lane == 0) p.scale[r] = amax / kFp8Max<kFormat>;
}

// One pass: thread `lane` of a row holds 16-byte packs lane, lane + kThreadsPerRow, ... (kPacks of them, coalesced
// across the warp) in registers; packs past the row's end are zeros, which leave the amax unchanged and are not
// stored. A row has at most 64 KiB, 4096 packs, so pack indices are ints.
template <typename In, __nv_fp8_interpretation_t kFormat, int kThreadsPerRow, int kPacks, bool kGated>
__global__ void __launch_bounds__(cta_threads(kThreadsPerRow))
quantize_rowwise_one_pass_kernel(QuantizeRowwiseParams p) {
  constexpr int kRowsPerCta = cta_threads(kThreadsPerRow) / kThreadsPerRow;

  // Launched as a dependent (grid_dependency.cuh): x is read only after the kernel before has completed, and the
  // kernel after (the GEMM of a decode step) may start prefetching its weight right away.
  pdl::wait_for_prior_grids();
  pdl::allow_dependent_grids();
  const int row_in_cta = threadIdx.x / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int npacks = static_cast<int>(p.K * static_cast<int64_t>(sizeof(In)) / 16);
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + row_in_cta;  // one row group a CTA
  const bool active = r < p.rows;
  uint4 v[kPacks];
  uint32_t key = 0;
  if (active) {
    const uint4* x = reinterpret_cast<const uint4*>(row_start<In>(p, r));
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
      const int i = lane + j * kThreadsPerRow;
      v[j] = i < npacks ? load_unit<In, kGated>(x, i, npacks) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < kPacks; ++j) key = max(key, pack_key<In>(v[j]));
  }
  key = row_max_key<kThreadsPerRow, kRowsPerCta>(key, row_in_cta, lane, /*last=*/true);
  if (!active) return;
  const float amax = row_amax<In>(p, key);
  const float inv = kFp8Max<kFormat> / amax;
  QPack<In>* q = reinterpret_cast<QPack<In>*>(static_cast<uint8_t*>(p.q) + r * p.K);
#pragma unroll
  for (int j = 0; j < kPacks; ++j) {
    const int i = lane + j * kThreadsPerRow;
    if (i < npacks) q[i] = scaled<In, kFormat>(v[j], inv);
  }
  store_scale<kFormat>(p, r, lane, amax);
}

// Two passes: the row is read once for amax and once more, from cache, for q. A Unit is a 16-byte pack (uint4)
// when rows are 16-byte aligned, else one element.
template <typename In, __nv_fp8_interpretation_t kFormat, typename Unit, int kThreadsPerRow, bool kGated>
__global__ void __launch_bounds__(cta_threads(kThreadsPerRow))
quantize_rowwise_two_pass_kernel(QuantizeRowwiseParams p) {
  constexpr int kRowsPerCta = cta_threads(kThreadsPerRow) / kThreadsPerRow;
  using QUnit = decltype(scaled<In, kFormat>(Unit{}, 0.0f));

  pdl::wait_for_prior_grids();  // as in the one-pass kernel
  pdl::allow_dependent_grids();
  const int row_in_cta = threadIdx.x / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t nunits = p.K * static_cast<int64_t>(sizeof(In)) / static_cast<int64_t>(sizeof(Unit));
  const int64_t groups = (p.rows + kRowsPerCta - 1) / kRowsPerCta;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {  // uniform trip count: see row_max_key
    const int64_t r = g * kRowsPerCta + row_in_cta;
    const bool active = r < p.rows;
    const Unit* x = nullptr;
    uint32_t key = 0;
    if (active) {
      x = reinterpret_cast<const Unit*>(row_start<In>(p, r));
#pragma unroll 4
      for (int64_t i = lane; i < nunits; i += kThreadsPerRow) {
        const Unit u = load_unit<In, kGated>(x, i, nunits);
        if constexpr (std::is_same_v<Unit, uint4>) {
          key = max(key, pack_key<In>(u));
        } else {
          key = max(key, abs_key(u));
        }
      }
    }
    key = row_max_key<kThreadsPerRow, kRowsPerCta>(key, row_in_cta, lane, g + gridDim.x >= groups);
    if (!active) continue;
    const float amax = row_amax<In>(p, key);
    const float inv = kFp8Max<kFormat> / amax;
    QUnit* q = reinterpret_cast<QUnit*>(static_cast<uint8_t*>(p.q) + r * p.K);
#pragma unroll 4
    for (int64_t i = lane; i < nunits; i += kThreadsPerRow) {
      q[i] = scaled<In, kFormat>(load_unit<In, kGated>(x, i, nunits), inv);
    }
    store_scale<kFormat>(p, r, lane, amax);
  }
}

// One CTA per row group, up to the grid's limit (the two-pass kernel loops past it; the one-pass kernel takes at most
// INT_MAX rows, launch_aligned).
template <int kThreadsPerRow>
unsigned grid_for(const QuantizeRowwiseParams& p) {
  constexpr int kRowsPerCta = cta_threads(kThreadsPerRow) / kThreadsPerRow;
  const int64_t groups = (p.rows + kRowsPerCta - 1) / kRowsPerCta;
  return static_cast<unsigned>(groups < INT_MAX ? groups : INT_MAX);
}

template <typename In, __nv_fp8_interpretation_t kFormat, int kThreadsPerRow, int kPacks, bool kGated>
cudaError_t launch_one_pass(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  return pdl::launch(quantize_rowwise_one_pass_kernel<In, kFormat, kThreadsPerRow, kPacks, kGated>,
                     grid_for<kThreadsPerRow>(p), cta_threads(kThreadsPerRow), stream, p);
}

template <typename In, __nv_fp8_interpretation_t kFormat, typename Unit, int kThreadsPerRow, bool kGated>
cudaError_t launch_two_pass(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  return pdl::launch(quantize_rowwise_two_pass_kernel<In, kFormat, Unit, kThreadsPerRow, kGated>,
                     grid_for<kThreadsPerRow>(p), cta_threads(kThreadsPerRow), stream, p);
}

// 16-byte aligned rows: one pass with the narrowest width that holds the row in kPacks packs a thread, two passes
// past 64 KiB (8 packs a thread at 1024 threads would need more than the 64 registers a thread can have there).
template <typename In, __nv_fp8_interpretation_t kFormat, int kPacks, bool kGated>
cudaError_t launch_one_pass_width(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(In);
  const int64_t nvec = p.K / kVec;
  if (nvec <= 32 * kPacks) return launch_one_pass<In, kFormat, 32, kPacks, kGated>(p, stream);
  if (nvec <= 64 * kPacks) return launch_one_pass<In, kFormat, 64, kPacks, kGated>(p, stream);
  if (nvec <= 128 * kPacks) return launch_one_pass<In, kFormat, 128, kPacks, kGated>(p, stream);
  if (nvec <= 256 * kPacks) return launch_one_pass<In, kFormat, 256, kPacks, kGated>(p, stream);
  if (nvec <= 512 * kPacks) return launch_one_pass<In, kFormat, 512, kPacks, kGated>(p, stream);
  return launch_one_pass<In, kFormat, 1024, kPacks, kGated>(p, stream);
}

// Up to this many rows the grid is at most one CTA per SM of an H200 (132): every row is a latency chain (load,
// reduce, scale, convert, store) with nothing to overlap it, and the chain is shorter at 2 packs a thread and twice
// the threads (measured at M = 1..16, K = 4096 and 8192: docs/decisions.md). Past it the GPU is
// full and 4 packs a thread keep more bytes in flight per thread.
constexpr int64_t kFewRows = 128;

template <typename In, __nv_fp8_interpretation_t kFormat, bool kGated>
cudaError_t launch_aligned(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(In);
  const int64_t nvec = p.K / kVec;
  if (p.rows <= kFewRows && nvec <= 1024 * 2) return launch_one_pass_width<In, kFormat, 2, kGated>(p, stream);
  // The one-pass kernel has one row group a CTA, so it takes at most INT_MAX rows (the grid's limit); past that
  // (a 64 GiB input at the least) the two-pass kernel loops.
  if (nvec <= 1024 * 4 && p.rows <= INT_MAX) return launch_one_pass_width<In, kFormat, 4, kGated>(p, stream);
  return launch_two_pass<In, kFormat, uint4, 512, kGated>(p, stream);
}

// Rows that are not 16-byte aligned: two passes, one element a load.
template <typename In, __nv_fp8_interpretation_t kFormat, bool kGated>
cudaError_t launch_unaligned(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  const int64_t row_bytes = p.K * static_cast<int64_t>(sizeof(In));
  if (row_bytes <= 2048) return launch_two_pass<In, kFormat, In, 32, kGated>(p, stream);
  if (row_bytes <= 8192) return launch_two_pass<In, kFormat, In, 128, kGated>(p, stream);
  return launch_two_pass<In, kFormat, In, 512, kGated>(p, stream);
}

template <typename In, __nv_fp8_interpretation_t kFormat, bool kGated>
cudaError_t launch_typed(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  // 16-byte loads need every row start 16-byte aligned: the base address and both row strides. K is a multiple
  // of 16, so 16 bytes never straddle a row's end.
  constexpr int64_t kVec16 = 16 / sizeof(In);
  const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.outer_stride % kVec16 == 0 &&
                       p.inner_stride % kVec16 == 0;
  return aligned ? launch_aligned<In, kFormat, kGated>(p, stream) : launch_unaligned<In, kFormat, kGated>(p, stream);
}

}  // namespace

cudaError_t launch_quantize_rowwise(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  if (p.rows == 0) return cudaSuccess;
  return launch_by_types(p, [&]<typename In, __nv_fp8_interpretation_t kFormat>() {
    return p.gated ? launch_typed<In, kFormat, true>(p, stream) : launch_typed<In, kFormat, false>(p, stream);
  });
}

}  // namespace fp8ext
