// The block-scaled kernels' dispatch (blockwise_dispatch.h explains the prediction).
#include "sm90/blockwise_dispatch.h"

#include <atomic>

#include "sm90/cost_model.h"
#include "sm90/kernel_registry.h"

namespace fp8ext::sm90 {
const BlockwiseCostCoeffs kBlockwiseCostCoeffs =
#include "sm90/blockwise_cost_coeffs.inc"
    ;

namespace {

// MACs issued per useful MAC for a wgmma of this N: 128 runs at full rate, narrower ones issue as often for less.
double wgmma_inefficiency(int mma_n, const BlockwiseCostCoeffs& c) {
  if (mma_n >= 128) return 1.0;
  return mma_n >= 64 ? c.wgmma_n64_cost : c.wgmma_n32_cost;
}

std::atomic<const BlockwiseKernelEntry*> g_forced{nullptr};

// Microseconds of a decode kernel, in the tile kernels' units: far below one tile's cost.
constexpr double kDecodeScale = 1e-9;

}  // namespace

double blockwise_predicted_cost(const BlockwiseKernelEntry& kernel, int64_t M, int64_t N, int64_t K, OutType out,
                                int sm_count, const BlockwiseCostCoeffs& c) {
  const BlockwiseTraits& t = kernel.traits;
  if (t.out != out || sm_count <= 0 || (t.max_m > 0 && M > t.max_m)) return -1.0;
  if (t.schedule == Schedule::kGemv) {
    // Below every tile kernel (whose cost is at least one tile's MACs), ranked by the row-wise twin's predicted
    // microseconds; a subset build without the twin ranks it last among the decode kernels.
    const KernelEntry* twin = t.rowwise_twin != nullptr ? find_kernel(t.rowwise_twin) : nullptr;
    const int out_bytes = out == OutType::kFP32 ? 4 : 2;
    const double us = twin != nullptr ? estimate(*twin, CostProblem{M, N, K, out_bytes, sm_count}).us : 1e6;
    return kDecodeScale * us;
  }
  const int64_t mma_m = t.swap_ab ? N : M, mma_n = t.swap_ab ? M : N;
  const int64_t tiles = ((mma_m + t.tile_m - 1) / t.tile_m) * ((mma_n + t.tile_n - 1) / t.tile_n);
  const double tile_macs = static_cast<double>(t.tile_m) * t.tile_n * wgmma_inefficiency(t.tile_n, c);
  if (t.schedule == Schedule::kStreamK) return static_cast<double>(tiles) * tile_macs / sm_count * c.stream_k_cost;
  return static_cast<double>((tiles + sm_count - 1) / sm_count) * tile_macs;
}

const BlockwiseKernelEntry* select_blockwise_kernel(int64_t M, int64_t N, int64_t K, OutType out, int sm_count,
                                                    bool allow_workspace, const BlockwiseCostCoeffs& c) {
  const BlockwiseKernelEntry* best = nullptr;
  double best_cost = 0.0;
  for (const BlockwiseKernelEntry& k : all_blockwise_kernels()) {
    if (!allow_workspace && k.traits.schedule == Schedule::kStreamK) continue;
    const double cost = blockwise_predicted_cost(k, M, N, K, out, sm_count, c);
    if (cost < 0.0) continue;
    if (best == nullptr || cost < best_cost) {  // ties: the first by name, so the choice is stable
      best = &k;
      best_cost = cost;
    }
  }
  return best;
}

const BlockwiseKernelEntry* forced_blockwise_kernel() { return g_forced.load(); }
void set_forced_blockwise_kernel(const BlockwiseKernelEntry* kernel) { g_forced.store(kernel); }

}  // namespace fp8ext::sm90
