// The kernels of fp8ext.moe_dispatch and fp8ext.moe_combine (the maths at the top of moe_routing.h). Plain CUDA;
// the libtorch entries are in moe_routing_cuda.cpp.
//
// Why kernels of their own: at decode a MoE layer is a chain of small launches, and its time follows their number.
// torch's way to the same routing (a stable sort, searchsorted, a division, a gather) is five launches, its way back
// (index_copy_, a cast of the weights, bmm) three; here each way is one, the gather folded into the quantize.
//
// Route: one CTA, a thread per slot. The experts' counts come from shared-memory atomics (their order does not
// matter), their exclusive scan from warp shuffles, and each slot's rank among the earlier slots of its expert
// from __match_any_sync within its warp plus the counts of the earlier warps, which the warps add in turn (one
// barrier a warp): the order is the stable sort's, the same on every run.
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "moe/moe_routing.h"
#include "quantize/quantize_common.cuh"
#include "sm90/common/grid_dependency.cuh"

namespace fp8ext {
namespace {

constexpr int kRouteThreads = 1024;
static_assert(kRouteThreads == kMoeRouteMaxSlots && kRouteThreads == kMoeMaxExperts);

// Inclusive sum over the warp's lanes.
__device__ __forceinline__ int warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(kFullMask, v, d);
    if (lane >= d) v += y;
  }
  return v;
}

__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(MoeRouteParams p) {
  __shared__ int next_row[kMoeMaxExperts];  // the experts' counts, then the next free row of each
  __shared__ int warp_total[kRouteThreads / 32];
  pdl::wait_for_prior_grids();  // the router's top-k wrote the ids
  pdl::allow_dependent_grids();
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int G = p.num_experts;

  if (t < G) next_row[t] = 0;
  int e = -1;  // this slot's expert, -1 for no slot or an id out of range
  bool skipped = false;  // id G: another rank's expert
  if (t < p.slots) {
    const int64_t id = p.ids_int64 ? static_cast<const int64_t*>(p.ids)[t] : static_cast<const int32_t*>(p.ids)[t];
    e = id >= 0 && id < G ? static_cast<int>(id) : -1;
    skipped = id == G;
    p.tokens[t] = 0;  // the rows that invalid slots leave empty read token 0 (the scatter below comes after a barrier)
  }
  __syncthreads();
  if (e >= 0) atomicAdd(&next_row[e], 1);
  __syncthreads();

  // offs: the inclusive scan of the counts, a thread per expert; next_row becomes each expert's first row.
  const int count = t < G ? next_row[t] : 0;
  const int in_warp = warp_inclusive_sum(count, lane);
  if (lane == 31) warp_total[warp] = in_warp;
  __syncthreads();
  if (warp == 0) warp_total[lane] = warp_inclusive_sum(warp_total[lane], lane);
  __syncthreads();
  const int end = in_warp + (warp > 0 ? warp_total[warp - 1] : 0);
  if (t < G) {
    p.offs[t] = end;
    next_row[t] = end - count;
  }
  __syncthreads();

  // Ranks: lanes of one expert in this warp (invalid slots share e = -1 and take no row), then the earlier warps'.
  const unsigned same = __match_any_sync(kFullMask, e);
  const int leader = __ffs(same) - 1;
  const int warps = static_cast<int>((p.slots + 31) / 32);  // the same for every thread: the barriers are uniform
  int base = 0;
  for (int w = 0; w < warps; ++w) {
    if (warp == w && lane == leader && e >= 0) {
      base = next_row[e];
      next_row[e] = base + __popc(same);
    }
    __syncthreads();
  }
  base = __shfl_sync(kFullMask, base, leader);
  if (t < p.slots) {
    const int row = e >= 0 ? base + __popc(same & ((1u << lane) - 1u)) : -1;
    p.pos[t] = skipped ? kMoeSkipped : row;
    if (row >= 0) p.tokens[row] = t / p.k;
  }
}

// A CTA covers kCombineThreads 16-byte packs of one token's output row; each thread sums its pack over the k slots.
constexpr int kCombineThreads = 128;

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoeCombineParams p) {
  constexpr int kVec = 16 / sizeof(T);
  pdl::wait_for_prior_grids();  // the down projection wrote o
  pdl::allow_dependent_grids();
  const int64_t token = blockIdx.x;
  const int64_t h = (static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x) * kVec;
  if (h >= p.H) return;
  const T* w = static_cast<const T*>(p.w) + token * p.k;
  const int32_t* pos = p.pos + token * p.k;
  float acc[kVec] = {};
  bool valid = true;
  for (int j = 0; j < p.k; ++j) {
    const int32_t row = pos[j];
    if (row == kMoeSkipped) continue;  // another rank's expert: nothing to add
    if (row < 0 || row >= p.rows) {  // no row (an expert id out of range), or not one of o's: the token's row is NaN
      valid = false;
      continue;
    }
    const float wj = to_float(w[j]);
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.o) + row * p.H + h);
    T o[kVec];
    memcpy(o, &v, 16);
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(wj, to_float(o[i])));  // no FMA: see the .h
  }
  T out[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) out[i] = from_float<T>(valid ? acc[i] : __int_as_float(0x7fc00000));  // NaN
  uint4 v;
  memcpy(&v, out, 16);
  *reinterpret_cast<uint4*>(static_cast<T*>(p.out) + token * p.H + h) = v;
}

template <typename T>
cudaError_t launch_combine(const MoeCombineParams& p, cudaStream_t stream) {
  constexpr int64_t kPerCta = kCombineThreads * (16 / sizeof(T));
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((p.H + kPerCta - 1) / kPerCta));
  return pdl::launch(moe_combine_kernel<T>, grid, dim3(kCombineThreads), stream, p);
}

}  // namespace

cudaError_t launch_moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  return pdl::launch(moe_route_kernel, dim3(1), dim3(kRouteThreads), stream, p);
}

cudaError_t launch_moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.tokens == 0) return cudaSuccess;
  switch (p.dtype) {
    case QuantSrc::kBF16: return launch_combine<__nv_bfloat16>(p, stream);
    case QuantSrc::kFP16: return launch_combine<__half>(p, stream);
    case QuantSrc::kFP32: return launch_combine<float>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fp8ext
