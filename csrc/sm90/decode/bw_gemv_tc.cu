// Block-scaled decode on the tensor cores: 4 < M <= 32 tokens (gemv_tensor_core.cuh has the kernel and why; the
// block-scaled form sums each 128-wide K chunk by mma.sync on its own, then scales it and adds it in fp32):
//
//     out[i, j] = round_to_out( acc[i, j] + bias[j] )
//     acc[i, j] = sum over K slices s, in order, of  sum_{groups g in s} scale_a(i, g) * scale_b(g, j / 128) *
//                 sum_{k in g} a[i, k] * w[j, k]
//
// The three variants are those of the row-wise family (gemv_tensor_core.cu), whose fitted cost model predicts
// each one's time here too (blockwise_dispatch.h): the same loads and MMAs, a few more FMAs per chunk.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include "sm90/blockwise/blockwise_gemm.h"
#include "sm90/decode/blockwise_policy.cuh"
#include "sm90/decode/decode_common.cuh"
#include "sm90/decode/gemv_tensor_core.cuh"

namespace fp8ext::sm90 {
namespace {

using decode::BlockwisePolicy;

template <int MT, int S>
LaunchResult launch_blockwise_gemv_tc(const BlockwiseParams& p) {
  if (p.M < 1 || p.M > gemv_tc::kMaxM || p.N < 1 || p.K < 1) {
    return {false, "gemv_tc", "M must be between 1 and 32, and N and K positive, for the block-scaled gemv_tc"};
  }
  const cudaError_t err = gemv_tc::launch_tiles<BlockwisePolicy, __nv_bfloat16, __NV_E4M3, MT, S>(p);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

size_t no_workspace(const BlockwiseParams&) { return 0; }

template <int MT, int S>
bool register_variant(const char* name, const char* rowwise_twin) {
  const BlockwiseTraits t{0, 0, 0, 1, 1, Schedule::kGemv, OutType::kBF16, false, gemv_tc::kMaxM, rowwise_twin};
  return register_blockwise_kernel({name, t, &launch_blockwise_gemv_tc<MT, S>, &no_workspace});
}

const bool kRegistered =
    register_variant<1, 4>("bw_gemv_tc_m32_r16_s4_bf16", "gemv_tc_m32_r16_s4_fast_bf16") &&
    register_variant<1, 8>("bw_gemv_tc_m32_r16_s8_bf16", "gemv_tc_m32_r16_s8_fast_bf16") &&
    register_variant<2, 8>("bw_gemv_tc_m32_r32_s8_bf16", "gemv_tc_m32_r32_s8_fast_bf16");

}  // namespace
}  // namespace fp8ext::sm90
