// fp8ext::linear_rowwise at decode sizes (M <= 32 tokens): the row-wise activation quantize and the tensor-core
// GEMV (gemv_tensor_core.cuh) in one kernel. In the user's frame, all in fp32:
//
//     scale[i], q[i, :] = quantize_rowwise(x[i, :])          (quantize_rowwise.h: amax, scale = amax / 448,
//                                                              q = e4m3(x * (448 / amax)), round to nearest even)
//     out[i, j] = round_to_bf16( fma( scale[i] * scale_b[j], acc[i, j], bias[j] ) )        (decode_common.cuh)
//     acc[i, j] = sum over K of q[i, k] * w[j, k], summed exactly as gemv_tc_m32_r16_s<S>
//
// The same maths in the same order as quantize_rowwise followed by scaled_mm with that gemv_tc kernel, so the
// output is bit for bit the two-launch result (tests/test_linear_rowwise.py checks it).
//
// Why: at decode a Float8Linear was two short launches, and the GEMV could not read its activations before the
// quantize had completed and its writes were flushed. Here each block computes the rows' amax itself (its threads
// stride over the bf16 rows, read from L2), keeps scale and inv, and writes the quantized rows into shared
// memory, once: the grid is one wave of blocks that loop over the weight's row blocks (gemv_tensor_core.cuh,
// kPersistent), so the prologue is paid once per resident block and the main loop reads its activations from
// shared memory. x must fit there: M * (K + 16) bytes <= kDecodeLinearMaxSmem (decode_linear.h).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "quantize_rowwise.h"
#include "quantize_rowwise_device.cuh"
#include "sm90/decode_common.cuh"
#include "sm90/decode_linear.h"
#include "sm90/gemv_tensor_core.cuh"

namespace fp8ext::sm90 {
namespace {

namespace qd = quantize_device;
using BF16Pack = qd::InPack<__nv_bfloat16, 8>;  // 16 bytes of a row of x

constexpr int kThreads = gemv_tc::kWarps * 32;
constexpr unsigned kFullMask = 0xffffffffu;

// The gemv_tc kernel's activation source (Act, gemv_tensor_core.cuh) for these calls. Each block quantizes x into
// shared memory once, as quantize_rowwise would write it, and then loops over row blocks (kPersistent: the grid is
// one wave), reading its activations from there.
struct QuantizeIntoSmem {
  static constexpr bool kPersistent = true;
  using Raw = uint4;
  const uint8_t* xq;   // M rows of decode_linear_row_bytes(K) bytes, in shared memory
  int64_t ldq;
  const float* scale;  // [M] in shared memory: amax / 448 of each row

  static size_t dynamic_smem(const DecodeLinearParams& p) {
    return static_cast<size_t>(p.M * decode_linear_row_bytes(p.K));
  }

  // Every thread of the block. Pass 1: each row's amax; the rows are split over the warps (all eight on one row
  // at M = 1, one row per warp from M = 8 on), lanes striding K in 16-byte packs. Then each row's scale and inv.
  // Pass 2: every thread scales and casts packs of every row (read again, from L1) into shared memory.
  __device__ explicit QuantizeIntoSmem(const DecodeLinearParams& p) : ldq(decode_linear_row_bytes(p.K)) {
    extern __shared__ uint4 dynamic_smem_start[];
    __shared__ float part_amax[kDecodeLinearMaxM][gemv_tc::kWarps];
    __shared__ float row_inv[kDecodeLinearMaxM], row_scale[kDecodeLinearMaxM];
    const auto* x = static_cast<const __nv_bfloat16*>(p.x);
    auto* q = reinterpret_cast<uint8_t*>(dynamic_smem_start);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int rows_per_pass = p.M >= 8 ? 8 : (p.M > 4 ? 8 : (p.M > 2 ? 4 : static_cast<int>(p.M)));
    const int warps_per_row = gemv_tc::kWarps / rows_per_pass;
    const int part = warp % warps_per_row;
    const int64_t packs = p.K / 8;
    for (int64_t m = warp / warps_per_row; m < p.M; m += rows_per_pass) {
      const auto* row = reinterpret_cast<const uint4*>(x + m * p.ldx);
      float amax = 0.0f;
#pragma unroll 4
      for (int64_t i = part * 32 + lane; i < packs; i += warps_per_row * 32) {
        const uint4 v = __ldg(row + i);
        amax = qd::pack_amax(amax, *reinterpret_cast<const BF16Pack*>(&v));
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        amax = abs_max_nan(amax, __shfl_xor_sync(kFullMask, amax, offset));
      }
      if (lane == 0) part_amax[m][part] = amax;
    }
    __syncthreads();
    if (threadIdx.x < p.M) {
      float amax = 0.0f;
      for (int w = 0; w < warps_per_row; ++w) amax = abs_max_nan(amax, part_amax[threadIdx.x][w]);
      amax = rowwise_amax(amax, 0.0f);  // no scale_ub
      row_scale[threadIdx.x] = amax / kE4M3Max;
      row_inv[threadIdx.x] = kE4M3Max / amax;
    }
    __syncthreads();
    for (int64_t m = 0; m < p.M; ++m) {
      const auto* row = reinterpret_cast<const uint4*>(x + m * p.ldx);
      const float inv = row_inv[m];
#pragma unroll 4
      for (int64_t i = threadIdx.x; i < packs; i += kThreads) {
        const uint4 v = __ldg(row + i);
        const auto packed = qd::scaled_pack<__nv_bfloat16, __NV_E4M3, 8>(*reinterpret_cast<const BF16Pack*>(&v), inv);
        *reinterpret_cast<uint2*>(q + m * ldq + i * 8) = *reinterpret_cast<const uint2*>(&packed);
      }
    }
    __syncthreads();
    xq = q;
    scale = row_scale;
  }

  __device__ static Raw zero() { return make_uint4(0, 0, 0, 0); }

  // Token `token`'s 16 e4m3 bytes at k.
  __device__ Raw load(const DecodeLinearParams&, int token, int64_t k) const {
    return *reinterpret_cast<const uint4*>(xq + token * ldq + k);
  }
  __device__ uint4 convert(const Raw& raw, int) const { return raw; }

  template <class Policy, typename Out>
  __device__ void store(const DecodeLinearParams& p, int i, int64_t j, float acc) const {
    decode::store_scaled<Out>(p.out, p.ldo, p.bias, i, j, scale[i], p.scale_b[j], acc);
  }
};

// The gemv_tc kernel's Policy for these calls: row-wise, with the scales and bias applied by QuantizeIntoSmem::store.
struct LinearPolicy {
  using Params = DecodeLinearParams;
  static constexpr bool kBlockScaled = false;
};

}  // namespace

cudaError_t launch_decode_linear(const DecodeLinearParams& p, int slices) {
  if (!decode_linear_fits(p.M, p.K)) return cudaErrorInvalidValue;
  switch (slices) {
    case 4: return gemv_tc::launch_tiles<LinearPolicy, __nv_bfloat16, __NV_E4M3, 1, 4, QuantizeIntoSmem>(p);
    case 8: return gemv_tc::launch_tiles<LinearPolicy, __nv_bfloat16, __NV_E4M3, 1, 8, QuantizeIntoSmem>(p);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fp8ext::sm90
