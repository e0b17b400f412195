// The fused row-wise FP8 quantization kernels: per-row amax, scale and cast in one launch (numerics in
// quantize_rowwise.h). Plain CUDA; the libtorch entry is quantize_rowwise_cuda.cpp.
//
// One pass (every row whose start is 16-byte aligned and whose width is at most 64 KiB: K <= 32768 in bf16):
// kThreadsPerRow threads share a row and each holds kPacks 16-byte packs of it in registers. All of a thread's
// loads are issued before any is used, so a row costs one trip to memory; the packs' |x| reduce to the row's amax
// (redux.sync in each warp, then shared memory across the row's warps), and the same registers are scaled, cast
// and stored. x is read once: the kernel moves K * (sizeof(In) + 1) bytes per row, the least there is. The width
// is the smallest power of two from a warp to 1024 threads that covers the row with 4 packs a thread, so a thread
// keeps 64 bytes in flight and several rows share an SM; with at most kFewRows rows, 2 packs a thread and twice
// the threads, which shortens each row's chain when the GPU is not full (launch_aligned).
//
// Two passes (rows that are not 16-byte aligned, read one element at a time, and rows over 64 KiB): pass 1 reads
// the row and reduces it to amax, pass 2 reads it again, from L1/L2, and writes q. The width is chosen so that the
// rows in flight on the whole GPU fit in L2 and pass 2 does not go back to HBM: a warp per row for rows up to
// 2 KiB, 128 threads up to 8 KiB, else 512 threads.
#include <climits>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "grid_dependency.cuh"
#include "quantize_rowwise.h"

namespace fp8ext {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }

// kVec elements loaded as one access: 16 bytes when the rows are 16-byte aligned, else one element.
template <typename In, int kVec>
struct alignas(sizeof(In) * kVec) InPack {
  In v[kVec];
};
template <int kVec>
struct alignas(kVec) OutPack {
  __nv_fp8_storage_t v[kVec];
};

template <__nv_fp8_interpretation_t kFormat, int kVec>
__device__ __forceinline__ OutPack<kVec> to_fp8(const float (&v)[kVec]) {
  OutPack<kVec> out;
  // Round to nearest even; SATFINITE clamps to the finite range and keeps NaN.
  if constexpr (kVec % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 2) {
      const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(make_float2(v[i], v[i + 1]), __NV_SATFINITE, kFormat);
      out.v[i] = static_cast<__nv_fp8_storage_t>(pair & 0xff);
      out.v[i + 1] = static_cast<__nv_fp8_storage_t>(pair >> 8);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) out.v[i] = __nv_cvt_float_to_fp8(v[i], __NV_SATFINITE, kFormat);
  }
  return out;
}

// CTAs of at least 256 threads: several rows share a CTA when a row needs fewer threads.
__host__ __device__ constexpr int cta_threads(int threads_per_row) {
  return threads_per_row < 256 ? 256 : threads_per_row;
}

template <__nv_fp8_interpretation_t kFormat>
constexpr float kFp8Max = kFormat == __NV_E4M3 ? kE4M3Max : kE5M2Max;

// Where row r of x starts (the layout of QuantizeRowwiseParams). Without an outer stride (2-D x, or 3-D with
// B = 1) every row is an inner row, and the 64-bit division, a long subroutine, is skipped.
template <typename In>
__device__ __forceinline__ const In* row_start(const QuantizeRowwiseParams& p, int64_t r) {
  const In* x = static_cast<const In*>(p.x);
  if (p.outer_stride == 0) return x + r * p.inner_stride;
  return x + (r / p.inner_rows) * p.outer_stride + (r % p.inner_rows) * p.inner_stride;
}

// The row's amax from each of its kThreadsPerRow threads' partial amax. Every partial is +0, positive, +inf or NaN
// (of either sign): the |x| of pack_amax, never -0. Read as unsigned integers those order the same way, and every
// NaN is above +inf, so the integer max is the float max with NaN propagated: one redux.sync per warp instead of
// five shuffles. Across the row's warps, each warp's max goes through shared memory and is reduced once more by
// redux. Every thread of the CTA must call it (it holds __syncthreads() when a row spans warps); `last` says the
// CTA has no further row group, so no barrier is needed before shared memory could be written again.
template <int kThreadsPerRow, int kRowsPerCta>
__device__ __forceinline__ float row_amax(float amax, int row_in_cta, int lane, bool last) {
  constexpr int kWarpsPerRow = kThreadsPerRow / 32;
  unsigned bits = __reduce_max_sync(kFullMask, __float_as_uint(amax));
  if constexpr (kWarpsPerRow > 1) {
    __shared__ unsigned warp_amax[kRowsPerCta][kWarpsPerRow];
    if (lane % 32 == 0) warp_amax[row_in_cta][lane / 32] = bits;
    __syncthreads();
    bits = __reduce_max_sync(kFullMask, lane % 32 < kWarpsPerRow ? warp_amax[row_in_cta][lane % 32] : 0u);
    if (!last) __syncthreads();  // the CTA's next row group overwrites warp_amax
  }
  return __uint_as_float(bits);
}

// max(amax, |v[0]|, ..., |v[kVec-1]|), NaN-propagating. 16-bit packs are reduced pairwise in their own type first
// (exact: the max of 16-bit values is one of them), so that the float conversions happen once, when the pack is
// scaled, and the kernel keeps only the raw packs live across the row's reduction.
template <typename In, int kVec>
__device__ __forceinline__ float pack_amax(float amax, const InPack<In, kVec>& v) {
  if constexpr (kVec >= 4 && (std::is_same_v<In, __nv_bfloat16> || std::is_same_v<In, __half>)) {
    using Pair = std::conditional_t<std::is_same_v<In, __nv_bfloat16>, __nv_bfloat162, __half2>;
    const Pair* pairs = reinterpret_cast<const Pair*>(v.v);
    auto pair = [&](int j) { return __habs2(pairs[j]); };
    auto m = pair(0);
#pragma unroll
    for (int j = 1; j < kVec / 2; ++j) m = __hmax2_nan(m, pair(j));
    return abs_max_nan(abs_max_nan(amax, __low2float(m)), __high2float(m));
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) amax = abs_max_nan(amax, to_float(v.v[j]));
    return amax;
  }
}

// q for one pack: x * inv, cast with round to nearest even. The cast saturates finite values and infinities to
// +-FP8_MAX and keeps NaN (SATFINITE), which is the formula's clamp: the CPU path clamps first, and both give the
// same bits.
template <typename In, __nv_fp8_interpretation_t kFormat, int kVec>
__device__ __forceinline__ OutPack<kVec> scaled_pack(const InPack<In, kVec>& v, float inv) {
  float f[kVec];
  if constexpr (std::is_same_v<In, __nv_bfloat16> && kVec % 2 == 0) {
    // bfloat16 is the top half of a float32: widen each half of the packed 32-bit words in place, which keeps the
    // pack in its 4 registers instead of one register per element.
    const uint32_t* w = reinterpret_cast<const uint32_t*>(v.v);
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) {
      f[2 * j] = __uint_as_float(w[j] << 16) * inv;
      f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u) * inv;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) f[j] = to_float(v.v[j]) * inv;
  }
  return to_fp8<kFormat, kVec>(f);
}

// After a row's reduction, in both kernels: the formula's amax (eps, scale_ub), the row's scale (written by
// lane 0), and what the row's elements are multiplied by: FP8_MAX / amax.
template <__nv_fp8_interpretation_t kFormat>
__device__ __forceinline__ float finish_amax(const QuantizeRowwiseParams& p, int64_t r, int lane, float amax) {
  amax = rowwise_amax(amax, p.scale_ub);
  if (lane == 0) p.scale[r] = amax / kFp8Max<kFormat>;
  return kFp8Max<kFormat> / amax;
}

// One pass: thread `lane` of a row holds packs lane, lane + kThreadsPerRow, ... (kPacks of them, coalesced across
// the warp) in registers; packs past the row's end are zeros, which leave amax unchanged and are not stored.
template <typename In, __nv_fp8_interpretation_t kFormat, int kThreadsPerRow, int kPacks>
__global__ void __launch_bounds__(cta_threads(kThreadsPerRow)) quantize_rowwise_one_pass_kernel(QuantizeRowwiseParams p) {
  constexpr int kVec = 16 / sizeof(In);
  constexpr int kRowsPerCta = cta_threads(kThreadsPerRow) / kThreadsPerRow;
  using Pack = InPack<In, kVec>;

  // Launched as a dependent (grid_dependency.cuh): x is read only after the kernel before has completed, and the
  // kernel after (the GEMM of a decode step) may start prefetching its weight right away.
  pdl::wait_for_prior_grids();
  pdl::allow_dependent_grids();
  const int row_in_cta = threadIdx.x / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t nvec = p.K / kVec;
  const int64_t groups = (p.rows + kRowsPerCta - 1) / kRowsPerCta;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {  // uniform trip count: see row_amax
    const int64_t r = g * kRowsPerCta + row_in_cta;
    const bool active = r < p.rows;
    Pack v[kPacks];
    float amax = 0.0f;
    if (active) {
      const Pack* x = reinterpret_cast<const Pack*>(row_start<In>(p, r));
#pragma unroll
      for (int j = 0; j < kPacks; ++j) {
        const int64_t i = lane + static_cast<int64_t>(j) * kThreadsPerRow;
        if (i < nvec) {
          v[j] = x[i];
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) v[j].v[e] = In(0.0f);
        }
      }
#pragma unroll
      for (int j = 0; j < kPacks; ++j) amax = pack_amax(amax, v[j]);
    }
    amax = row_amax<kThreadsPerRow, kRowsPerCta>(amax, row_in_cta, lane, g + gridDim.x >= groups);
    if (!active) continue;
    const float inv = finish_amax<kFormat>(p, r, lane, amax);
    OutPack<kVec>* q = reinterpret_cast<OutPack<kVec>*>(static_cast<__nv_fp8_storage_t*>(p.q) + r * p.K);
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
      const int64_t i = lane + static_cast<int64_t>(j) * kThreadsPerRow;
      if (i < nvec) q[i] = scaled_pack<In, kFormat, kVec>(v[j], inv);
    }
  }
}

// Two passes: the row is read once for amax and once more, from cache, for q.
template <typename In, __nv_fp8_interpretation_t kFormat, int kVec, int kThreadsPerRow>
__global__ void __launch_bounds__(cta_threads(kThreadsPerRow)) quantize_rowwise_two_pass_kernel(QuantizeRowwiseParams p) {
  constexpr int kRowsPerCta = cta_threads(kThreadsPerRow) / kThreadsPerRow;
  using Pack = InPack<In, kVec>;

  pdl::wait_for_prior_grids();  // as in the one-pass kernel
  pdl::allow_dependent_grids();
  const int row_in_cta = threadIdx.x / kThreadsPerRow;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t nvec = p.K / kVec;
  const int64_t groups = (p.rows + kRowsPerCta - 1) / kRowsPerCta;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {  // uniform trip count: see row_amax
    const int64_t r = g * kRowsPerCta + row_in_cta;
    const bool active = r < p.rows;
    const Pack* x = nullptr;
    float amax = 0.0f;
    if (active) {
      x = reinterpret_cast<const Pack*>(row_start<In>(p, r));
#pragma unroll 4
      for (int64_t i = lane; i < nvec; i += kThreadsPerRow) {
        amax = pack_amax(amax, x[i]);
      }
    }
    amax = row_amax<kThreadsPerRow, kRowsPerCta>(amax, row_in_cta, lane, g + gridDim.x >= groups);
    if (!active) continue;
    const float inv = finish_amax<kFormat>(p, r, lane, amax);
    OutPack<kVec>* q = reinterpret_cast<OutPack<kVec>*>(static_cast<__nv_fp8_storage_t*>(p.q) + r * p.K);
#pragma unroll 4
    for (int64_t i = lane; i < nvec; i += kThreadsPerRow) q[i] = scaled_pack<In, kFormat, kVec>(x[i], inv);
  }
}

// One CTA per row group, up to the grid's limit (the kernels loop past it).
template <int kThreadsPerRow>
unsigned grid_for(const QuantizeRowwiseParams& p) {
  constexpr int kRowsPerCta = cta_threads(kThreadsPerRow) / kThreadsPerRow;
  const int64_t groups = (p.rows + kRowsPerCta - 1) / kRowsPerCta;
  return static_cast<unsigned>(groups < INT_MAX ? groups : INT_MAX);
}

template <typename In, __nv_fp8_interpretation_t kFormat, int kThreadsPerRow, int kPacks>
cudaError_t launch_one_pass(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  return pdl::launch(quantize_rowwise_one_pass_kernel<In, kFormat, kThreadsPerRow, kPacks>,
                     grid_for<kThreadsPerRow>(p), cta_threads(kThreadsPerRow), stream, p);
}

template <typename In, __nv_fp8_interpretation_t kFormat, int kVec, int kThreadsPerRow>
cudaError_t launch_two_pass(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  return pdl::launch(quantize_rowwise_two_pass_kernel<In, kFormat, kVec, kThreadsPerRow>,
                     grid_for<kThreadsPerRow>(p), cta_threads(kThreadsPerRow), stream, p);
}

// 16-byte aligned rows: one pass with the narrowest width that holds the row in kPacks packs a thread, two passes
// past 64 KiB (8 packs a thread at 1024 threads would need more than the 64 registers a thread can have there).
template <typename In, __nv_fp8_interpretation_t kFormat, int kPacks>
cudaError_t launch_one_pass_width(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(In);
  const int64_t nvec = p.K / kVec;
  if (nvec <= 32 * kPacks) return launch_one_pass<In, kFormat, 32, kPacks>(p, stream);
  if (nvec <= 64 * kPacks) return launch_one_pass<In, kFormat, 64, kPacks>(p, stream);
  if (nvec <= 128 * kPacks) return launch_one_pass<In, kFormat, 128, kPacks>(p, stream);
  if (nvec <= 256 * kPacks) return launch_one_pass<In, kFormat, 256, kPacks>(p, stream);
  if (nvec <= 512 * kPacks) return launch_one_pass<In, kFormat, 512, kPacks>(p, stream);
  return launch_one_pass<In, kFormat, 1024, kPacks>(p, stream);
}

// Up to this many rows the grid is at most one CTA per SM of an H200 (132): every row is a latency chain (load,
// reduce, scale, convert, store) with nothing to overlap it, and the chain is shorter at 2 packs a thread and twice
// the threads (measured at M = 1..16, K = 4096 and 8192: scripts/probe_quantize_small_m.cu). Past it the GPU is
// full and 4 packs a thread keep more bytes in flight per thread.
constexpr int64_t kFewRows = 128;

template <typename In, __nv_fp8_interpretation_t kFormat>
cudaError_t launch_aligned(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(In);
  const int64_t nvec = p.K / kVec;
  if (p.rows <= kFewRows && nvec <= 1024 * 2) return launch_one_pass_width<In, kFormat, 2>(p, stream);
  if (nvec <= 1024 * 4) return launch_one_pass_width<In, kFormat, 4>(p, stream);
  return launch_two_pass<In, kFormat, kVec, 512>(p, stream);
}

// Rows that are not 16-byte aligned: two passes, one element a load.
template <typename In, __nv_fp8_interpretation_t kFormat>
cudaError_t launch_unaligned(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  const int64_t row_bytes = p.K * static_cast<int64_t>(sizeof(In));
  if (row_bytes <= 2048) return launch_two_pass<In, kFormat, 1, 32>(p, stream);
  if (row_bytes <= 8192) return launch_two_pass<In, kFormat, 1, 128>(p, stream);
  return launch_two_pass<In, kFormat, 1, 512>(p, stream);
}

template <typename In, __nv_fp8_interpretation_t kFormat>
cudaError_t launch_typed(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  // 16-byte loads need every row start 16-byte aligned: the base address and both row strides. K is a multiple
  // of 16, so 16 bytes never straddle a row's end.
  constexpr int64_t kVec16 = 16 / sizeof(In);
  const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.outer_stride % kVec16 == 0 &&
                       p.inner_stride % kVec16 == 0;
  return aligned ? launch_aligned<In, kFormat>(p, stream) : launch_unaligned<In, kFormat>(p, stream);
}

template <__nv_fp8_interpretation_t kFormat>
cudaError_t launch_format(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  switch (p.src) {
    case QuantSrc::kBF16: return launch_typed<__nv_bfloat16, kFormat>(p, stream);
    case QuantSrc::kFP16: return launch_typed<__half, kFormat>(p, stream);
    case QuantSrc::kFP32: return launch_typed<float, kFormat>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_quantize_rowwise(const QuantizeRowwiseParams& p, cudaStream_t stream) {
  if (p.rows == 0) return cudaSuccess;
  return p.dst == QuantDst::kE4M3 ? launch_format<__NV_E4M3>(p, stream) : launch_format<__NV_E5M2>(p, stream);
}

}  // namespace fp8ext
