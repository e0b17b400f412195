// The block-scaled decode kernels' policy (gemv_tensor_core.cuh's Policy): each 128-wide K chunk's sums are scaled
// by scale_a(i, g) * scale_b(g, j / 128) inside the K loop, and the store adds the bias:
//
//     out[i, j] = round_to_out( acc[i, j] + bias[j] )
//
// Used by bw_gemv_tc.cu and the grouped decode kernels (sm90/grouped/grouped_gemv.cu). Plain CUDA.
#pragma once

#include <cstdint>

#include "sm90/blockwise/blockwise_gemm.h"
#include "sm90/decode/decode_common.cuh"

namespace fp8ext::sm90::decode {

struct BlockwisePolicy {
  using Params = BlockwiseParams;
  static constexpr bool kBlockScaled = true;
  // scale_a(i, g) for the chunk at k; 0 for a token past M (its MMA column holds zeros and is never stored).
  __device__ static float token_scale(const BlockwiseParams& p, int i, int64_t k) {
    return i < p.M ? __ldg(p.scale_a + i * p.sa_stride_m + (k / kBlockwiseGroupK) * p.sa_stride_g) : 0.0f;
  }
  // scale_b(g, h) of weight row `row`'s 128-row block h at the chunk at k (1 past N: those rows are never stored).
  __device__ static float weight_scale(const BlockwiseParams& p, int64_t row, int64_t k) {
    if (row >= p.N) return 1.0f;
    return __ldg(p.scale_b + (k / kBlockwiseGroupK) * p.sb_stride_g + (row / kBlockwiseBlockN) * p.sb_stride_n);
  }
  template <typename Out>
  __device__ static void store(const BlockwiseParams& p, int64_t i, int64_t j, float acc) {
    const float bias = p.bias != nullptr ? decode::to_float(static_cast<const Out*>(p.bias)[j]) : 0.0f;
    static_cast<Out*>(p.out)[i * p.ldo + j] = decode::from_float<Out>(acc + bias);
  }
};

}  // namespace fp8ext::sm90::decode
