// The fused block-wise FP8 quantization kernel for activations: each 1 x 128 group's amax, scale and cast in one
// launch (numerics in quantize_blockwise.h). Plain CUDA; the libtorch entry is quantize_blockwise_cuda.cpp.
//
// A warp takes the same group column of four consecutive rows, four consecutive elements of each a lane (a group
// is 128 elements, the last of a row possibly fewer, a multiple of 16, so whole lanes fall off its end): each lane
// issues its four loads (one 8-byte access of 16-bit inputs or 16-byte of fp32 each, where x allows) before any
// reduction, then per row the warp reduces the integer keys of |x| with one redux.sync (quantize_common.cuh) and
// the lane scales, casts and stores its four bytes as one word; lanes 0-3 store the four rows' scales, adjacent in
// the group-major scale buffer. x is read once and q written once, the least there is. Why four rows: with one
// group a warp, a lane kept one 8-byte load in flight, and at prefill sizes the kernel reached only 0.60-0.72 of a
// copy's bandwidth (docs/decisions.md). Eight warps share a 256-thread CTA, and a grid-stride loop covers any M.
// Launched as a dependent, as quantize_rowwise is (grid_dependency.cuh): at decode the GEMM after it may start
// prefetching its weight while it runs.
#include <climits>
#include <type_traits>

#include <cuda_runtime.h>

#include "sm90/common/grid_dependency.cuh"
#include "quantize/quantize_blockwise.h"
#include "quantize/quantize_common.cuh"

namespace fp8ext {
namespace {

constexpr int kElemsPerLane = 4;  // 32 lanes x 4 = 128, one group
constexpr int kRowsPerWarp = 4;   // groups a warp loads before it reduces any
constexpr int kWarpsPerCta = 8;
static_assert(32 * kElemsPerLane == kQuantizeGroup, "one warp covers one group");

// A lane's four elements: one vector access where aligned (Vec: 8 bytes of 16-bit inputs, 16 bytes of fp32), else
// four scalar loads. Both give the four values' keys and their q as one 32-bit word (element i in byte i).
template <typename In, __nv_fp8_interpretation_t kFormat, bool kVector>
struct LaneFour {
  In v[kElemsPerLane];

  __device__ __forceinline__ void load(const In* src) {
    if constexpr (kVector) {
      if constexpr (sizeof(In) == 2) {
        const uint2 w = *reinterpret_cast<const uint2*>(src);
        memcpy(v, &w, sizeof(w));
      } else {
        const uint4 w = *reinterpret_cast<const uint4*>(src);
        memcpy(v, &w, sizeof(w));
      }
    } else {
#pragma unroll
      for (int i = 0; i < kElemsPerLane; ++i) v[i] = src[i];
    }
  }
  __device__ __forceinline__ uint32_t key() const {
    uint32_t k = 0;
#pragma unroll
    for (int i = 0; i < kElemsPerLane; ++i) k = max(k, abs_key(v[i]));
    return k;
  }
  __device__ __forceinline__ uint32_t q(float inv) const {
    return fp8x2<kFormat>(to_float(v[0]), to_float(v[1]), inv) | fp8x2<kFormat>(to_float(v[2]), to_float(v[3]), inv)
                                                                       << 16;
  }
};

template <typename In, __nv_fp8_interpretation_t kFormat, bool kVector>
__global__ void __launch_bounds__(32 * kWarpsPerCta) quantize_blockwise_kernel(QuantizeBlockwiseParams p) {
  pdl::wait_for_prior_grids();  // nothing is read before the kernel before has completed
  pdl::allow_dependent_grids();
  const int lane = threadIdx.x % 32;
  // Group indices fit 32 bits (the op refuses more than INT_MAX groups), and so do the warps' work items (at most
  // one row tile of groups more), which keeps the division below short.
  const uint32_t groups_per_row = static_cast<uint32_t>((p.K + kQuantizeGroup - 1) / kQuantizeGroup);
  const uint32_t row_tiles = static_cast<uint32_t>((p.M + kRowsPerWarp - 1) / kRowsPerWarp);
  const uint32_t items = row_tiles * groups_per_row;
  const In* x = static_cast<const In*>(p.x);
  uint8_t* q = static_cast<uint8_t*>(p.q);
  // The whole warp takes the same trips (w is the warp's), so redux.sync below has every lane. Consecutive warps
  // take consecutive groups of the same rows.
  for (uint32_t w = blockIdx.x * kWarpsPerCta + threadIdx.x / 32; w < items; w += gridDim.x * kWarpsPerCta) {
    const uint32_t g = w % groups_per_row;
    const int64_t m0 = static_cast<int64_t>(w / groups_per_row) * kRowsPerWarp;
    const int64_t k = static_cast<int64_t>(g) * kQuantizeGroup + lane * kElemsPerLane;
    const bool lane_active = k < p.K;  // K is a multiple of 16: a lane holds four elements of the group or none
    LaneFour<In, kFormat, kVector> four[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      if (lane_active && m0 + r < p.M) four[r].load(x + (m0 + r) * p.row_stride + k);
    }
    float scale = 0.0f;  // lane r's: row m0 + r's
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const bool active = lane_active && m0 + r < p.M;  // rows past M reduce 0 and store nothing
      const uint32_t key = active ? four[r].key() : 0u;
      const float amax = rowwise_amax(key_value<In>(__reduce_max_sync(kFullMask, key)), 0.0f);
      const float inv = kFp8Max<kFormat> / amax;
      if (active) *reinterpret_cast<uint32_t*>(q + (m0 + r) * p.K + k) = four[r].q(inv);
      if (lane == r) scale = amax / kFp8Max<kFormat>;
    }
    if (lane < kRowsPerWarp && m0 + lane < p.M) p.scale[static_cast<int64_t>(g) * p.M + m0 + lane] = scale;
  }
}

template <typename In, __nv_fp8_interpretation_t kFormat>
cudaError_t launch_typed(const QuantizeBlockwiseParams& p, cudaStream_t stream) {
  const int64_t groups_per_row = (p.K + kQuantizeGroup - 1) / kQuantizeGroup;
  if (p.M * groups_per_row > INT_MAX) return cudaErrorInvalidValue;  // the op refuses such a call first
  const int64_t items = (p.M + kRowsPerWarp - 1) / kRowsPerWarp * groups_per_row;
  const unsigned grid = static_cast<unsigned>((items + kWarpsPerCta - 1) / kWarpsPerCta);
  // A lane's four elements start at a multiple of 4 elements of its row; one access needs every row start aligned
  // to the access: the base address and the row stride.
  constexpr int64_t kVecBytes = kElemsPerLane * sizeof(In);
  const bool vector = reinterpret_cast<uintptr_t>(p.x) % kVecBytes == 0 &&
                      (p.M == 1 || (p.row_stride * static_cast<int64_t>(sizeof(In))) % kVecBytes == 0);
  return vector ? pdl::launch(quantize_blockwise_kernel<In, kFormat, true>, grid, 32 * kWarpsPerCta, stream, p)
                : pdl::launch(quantize_blockwise_kernel<In, kFormat, false>, grid, 32 * kWarpsPerCta, stream, p);
}

}  // namespace

cudaError_t launch_quantize_blockwise(const QuantizeBlockwiseParams& p, cudaStream_t stream) {
  if (p.M == 0) return cudaSuccess;
  return launch_by_types(p, [&]<typename In, __nv_fp8_interpretation_t kFormat>() {
    return launch_typed<In, kFormat>(p, stream);
  });
}

}  // namespace fp8ext
