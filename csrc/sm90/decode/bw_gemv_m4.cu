// Decode-sized block-scaled GEMV: M <= 4 tokens against an fp8 weight with 1 x 128 / 128 x 128 scales
// (gemv_cuda_core.cuh has the kernel; blockwise_gemm.h the contract):
//
//     out[i, j] = round_to_out( acc[i, j] + bias[j] )                                         fp32
//     acc[i, j] = sum over 16-wide K chunks c of (scale_a(i, g) * scale_b(g, j / 128)) * sum_{k in c} a[i, k] w[j, k]
//
// The scales enter once per chunk, read through their runtime strides (they stay in L1). The CUTLASS kernels
// waste most of a 64-row wgmma at M <= 4 and run their K tiles in sequence; this kernel puts every SM on the
// weight.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include "sm90/blockwise/blockwise_gemm.h"
#include "sm90/decode/decode_common.cuh"
#include "sm90/decode/gemv_cuda_core.cuh"

namespace fp8ext::sm90 {
namespace {

struct BlockwisePolicy {
  using Params = BlockwiseParams;
  static constexpr bool kBlockScaled = true;
  // The scales of the 128-row block that holds weight rows row0 and row0 + 1.
  __device__ static const float* weight_scales(const BlockwiseParams& p, int64_t row0) {
    return p.scale_b + (row0 / kBlockwiseBlockN) * p.sb_stride_n;
  }
  // scale_a(i, g) * scale_b(g, h) for the chunk at k, g = k / 128.
  __device__ static float chunk_scale(const BlockwiseParams& p, int i, int64_t k, const float* block_scales) {
    const int64_t g = k / kBlockwiseGroupK;
    return __ldg(p.scale_a + i * p.sa_stride_m + g * p.sa_stride_g) * __ldg(block_scales + g * p.sb_stride_g);
  }
  template <typename Out>
  __device__ static void store(const BlockwiseParams& p, int64_t i, int64_t j, float acc) {
    const float bias = p.bias != nullptr ? decode::to_float(static_cast<const Out*>(p.bias)[j]) : 0.0f;
    static_cast<Out*>(p.out)[i * p.ldo + j] = decode::from_float<Out>(acc + bias);
  }
};

template <typename Out>
LaunchResult launch_blockwise_gemv(const BlockwiseParams& p) {
  if (p.M < 1 || p.M > gemv::kMaxM || p.N < 1 || p.K < 1) {
    return {false, "gemv", "M must be between 1 and 4, and N and K positive, for the block-scaled gemv"};
  }
  const cudaError_t err = gemv::launch<BlockwisePolicy, Out, __NV_E4M3>(p);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

size_t no_workspace(const BlockwiseParams&) { return 0; }

// rowwise_twin: the row-wise kernel of the same loads (gemv_rowwise.cu), whose predicted time the dispatch uses.
constexpr BlockwiseTraits gemv_traits(OutType out, const char* rowwise_twin) {
  return BlockwiseTraits{0, 0, 0, 1, 1, Schedule::kGemv, out, false, gemv::kMaxM, rowwise_twin};
}

const bool kRegistered =
    register_blockwise_kernel({"bw_gemv_m4_bf16", gemv_traits(OutType::kBF16, "gemv_m4_precise_bf16"),
                               &launch_blockwise_gemv<__nv_bfloat16>, &no_workspace}) &&
    register_blockwise_kernel({"bw_gemv_m4_fp16", gemv_traits(OutType::kFP16, "gemv_m4_precise_fp16"),
                               &launch_blockwise_gemv<__half>, &no_workspace}) &&
    register_blockwise_kernel({"bw_gemv_m4_fp32", gemv_traits(OutType::kFP32, "gemv_m4_precise_fp32"),
                               &launch_blockwise_gemv<float>, &no_workspace});

}  // namespace
}  // namespace fp8ext::sm90
