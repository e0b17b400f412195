// Which block-scaled kernel (blockwise_gemm.h) computes a call: a kernel forced by name, else the one with the
// least predicted work per SM. Plain C++: no CUTLASS, no libtorch.
//
// The prediction counts multiply-accumulates per SM, padded tiles included, since every tile runs its whole K:
//   data-parallel: ceil(tiles / SMs) * tile_m * tile_n            (whole waves; a partial wave costs a full one)
//   stream-K:      tiles * tile_m * tile_n / SMs * stream_k_cost   (K split evenly, plus the partial-tile fix-up)
// each times the wgmma efficiency of the tile's MMA N (a narrow wgmma issues as often for fewer MACs). At small M
// the call is bound by reading the weights, and the same count then says how many SMs take part in reading them.
// The decode kernels (bw_gemv_m4_* for M <= 4, bw_gemv_tc_* for M <= 32) come first where they apply: they put
// every SM on the weight, which the tile kernels cannot at small M. Among them, the row-wise cost model
// (cost_model.h) ranks each by its row-wise twin's predicted time (the same loads and MMAs, the scales placed
// differently).
// The constants were chosen on the tuning shapes of the blockwise suite (DeepSeek-V3's layers, python/fp8ext/bench)
// and are judged on the zoo's held-out rows (docs/blockwise.md).
#pragma once

#include <cstdint>
#include <string_view>

#include "sm90/blockwise_gemm.h"

namespace fp8ext::sm90 {

// The prediction's coefficients, fitted (blockwise_cost_coeffs.inc, scripts/fit_blockwise_dispatch.py).
struct BlockwiseCostCoeffs {
  double stream_k_cost;   // the fix-up of split tiles, and the partial sums' round trip through L2
  double wgmma_n64_cost;  // MACs issued per useful MAC at MMA N 64 (N >= 128 issues at 1)
  double wgmma_n32_cost;  // ... at MMA N 32 and below
};
extern const BlockwiseCostCoeffs kBlockwiseCostCoeffs;

// The predicted cost of `kernel` on the call (arbitrary units, lower is faster), or a negative value where it
// does not compute it (another output type).
double blockwise_predicted_cost(const BlockwiseKernelEntry& kernel, int64_t M, int64_t N, int64_t K, OutType out,
                                int sm_count, const BlockwiseCostCoeffs& c = kBlockwiseCostCoeffs);

// The kernel dispatch runs; nullptr when none was built for the output type. allow_workspace = false (inside CUDA
// graph capture) leaves out the stream-K kernels, which need a workspace.
const BlockwiseKernelEntry* select_blockwise_kernel(int64_t M, int64_t N, int64_t K, OutType out, int sm_count,
                                                    bool allow_workspace,
                                                    const BlockwiseCostCoeffs& c = kBlockwiseCostCoeffs);

// A kernel forced by name (fp8ext.force_kernel with a "bw_" name); nullptr for none. Process-wide.
const BlockwiseKernelEntry* forced_blockwise_kernel();
void set_forced_blockwise_kernel(const BlockwiseKernelEntry* kernel);

}  // namespace fp8ext::sm90
