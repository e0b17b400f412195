// The block-scaled kernels' dispatch (blockwise_dispatch.h explains the prediction).
#include "sm90/dispatch/blockwise_dispatch.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "sm90/dispatch/cost_model.h"
#include "sm90/dispatch/dispatch.h"  // torch_backstop_enabled
#include "sm90/rowwise/kernel_registry.h"
#include "sm90/dispatch/selection_memo.h"

namespace fp8ext::sm90 {
namespace {

struct FitRow {
  const char* name;
  BlockwiseFit fit;
};
// kFits[] and the residual tables it points into, written by tools/fit_blockwise_dispatch.py.
#include "sm90/dispatch/blockwise_cost_coeffs.inc"

// Defaults for a kernel without a fit, used only where no fitted kernel computes the call: for a tile kernel 8 us
// fixed and one SM's share of about 900 dense fp8 TFLOP/s (132 SMs, 2 FLOP per MAC); a decode kernel takes its
// row-wise twin's time as it is.
constexpr BlockwiseFit kDefaultTileFit{8.0, 1.0 / (900e12 / 2 / 132) * 1e6};
constexpr BlockwiseFit kDefaultDecodeFit{0.0, 1.0};

const BlockwiseFit* own_fit(std::string_view name) {
  for (const FitRow& r : kFits) {
    if (name == r.name) return &r.fit;
  }
  return nullptr;
}

// The name of torch's row in kFits.
constexpr std::string_view kTorchFitName = "torch._scaled_mm";

std::atomic<const BlockwiseKernelEntry*> g_forced{nullptr};

// The memo of the compiled-in selections (selection_memo.h): everything select_blockwise_kernel reads.
struct SelectionKey {
  int64_t M, N, K;
  int out, sm_count;
  bool allow_workspace, backstop;
  bool operator==(const SelectionKey&) const = default;
};
struct SelectionKeyHash {
  size_t operator()(const SelectionKey& k) const {
    return hash_fields({uint64_t(k.M), uint64_t(k.N), uint64_t(k.K), uint64_t(k.out), uint64_t(k.sm_count),
                        uint64_t(k.allow_workspace), uint64_t(k.backstop)});
  }
};
SelectionMemo<SelectionKey, BlockwiseSelection, SelectionKeyHash> g_selections;

// The fastest predicted kernel, then torch's path in its place where `backstop`, M is above the backstop's lower
// bound and the kernel is not predicted at least the margin faster (or no fitted kernel computes the call).
BlockwiseSelection select_uncached(int64_t M, int64_t N, int64_t K, OutType out, int sm_count, bool allow_workspace,
                                   bool backstop, const BlockwiseTrial* trial) {
  const std::vector<BlockwiseFit>* fits = trial != nullptr ? &trial->kernels : nullptr;
  const std::vector<BlockwiseKernelEntry>& kernels = all_blockwise_kernels();
  // The fastest fitted kernel; the unfitted ones (a kernel not yet timed on the tuning rows) only where no fitted
  // kernel computes the call.
  const BlockwiseKernelEntry* best[2] = {nullptr, nullptr};  // [fitted, unfitted]
  double best_us[2] = {0.0, 0.0};
  for (size_t i = 0; i < kernels.size(); ++i) {
    const BlockwiseKernelEntry& k = kernels[i];
    if (!allow_workspace && k.traits.schedule == Schedule::kStreamK) continue;
    // The fit is looked up once per kernel (a name search) and serves both the prediction and the fitted test.
    const BlockwiseFit fit = fits != nullptr && i < fits->size() ? (*fits)[i] : blockwise_fit(k);
    const double us = blockwise_predicted_us(k, M, N, K, out, sm_count, &fit);
    if (us < 0.0) continue;
    const int u = fit.fitted() ? 0 : 1;
    if (best[u] == nullptr || us < best_us[u]) {  // ties: the first by name, so the choice is stable
      best[u] = &k;
      best_us[u] = us;
    }
  }
  BlockwiseSelection s{best[0] != nullptr ? best[0] : best[1], false};
  const int64_t above_m = trial ? trial->backstop_above_m : kBlockwiseBackstopAboveM;
  if (backstop && out == OutType::kBF16 && M > above_m && torch_blockwise_computes(M, K)) {
    const double torch_us = torch_blockwise_predicted_us(M, N, K, sm_count, trial ? &trial->torch : nullptr);
    const double advantage = trial ? trial->kernel_advantage : kBlockwiseKernelAdvantage;
    // torch_us is negative without a fit, so the (positive) floor also keeps an unfitted torch out.
    static_assert(kBlockwiseBackstopMinUs > 0.0);
    if (torch_us >= kBlockwiseBackstopMinUs && (best[0] == nullptr || best_us[0] > torch_us * (1.0 - advantage))) {
      s = BlockwiseSelection{nullptr, true};
    }
  }
  return s;
}

}  // namespace

bool torch_blockwise_computes(int64_t M, int64_t K) {
  return M % 4 == 0 && ((K + kBlockwiseGroupK - 1) / kBlockwiseGroupK) % 4 == 0;
}

BlockwiseTraits torch_blockwise_traits() {
  return BlockwiseTraits{128, 128, 128, 1, 1, Schedule::kCooperative, OutType::kBF16, /*swap_ab=*/false};
}

BlockwiseFit torch_blockwise_fit() {
  if (const BlockwiseFit* f = own_fit(kTorchFitName)) return *f;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  return BlockwiseFit{kNaN, kNaN};
}

double torch_blockwise_predicted_us(int64_t M, int64_t N, int64_t K, int sm_count, const BlockwiseFit* fit) {
  const BlockwiseFit f = fit != nullptr ? *fit : torch_blockwise_fit();
  if (!f.fitted() || sm_count <= 0) return -1.0;
  const double w = blockwise_work(torch_blockwise_traits(), M, N, K, sm_count);
  return (f.a_us + f.b_us_per_mac * w) * std::exp(residual_correction(f.residuals, M, N, K));
}

double blockwise_work(const BlockwiseTraits& t, int64_t M, int64_t N, int64_t K, int sm_count) {
  if (sm_count <= 0) return 0.0;
  if (t.schedule == Schedule::kGemv) {
    const KernelEntry* twin = t.rowwise_twin != nullptr ? find_kernel(t.rowwise_twin) : nullptr;
    if (twin == nullptr) return 0.0;  // a subset build without the twin: no prediction
    const int out_bytes = t.out == OutType::kFP32 ? 4 : 2;
    return estimate(*twin, CostProblem{M, N, K, out_bytes, sm_count}).us;
  }
  const int64_t mma_m = t.swap_ab ? N : M, mma_n = t.swap_ab ? M : N;
  const int64_t tiles = ((mma_m + t.tile_m - 1) / t.tile_m) * ((mma_n + t.tile_n - 1) / t.tile_n);
  const double tile_macs = static_cast<double>(t.tile_m) * t.tile_n * static_cast<double>(K);
  if (t.schedule == Schedule::kStreamK) return static_cast<double>(tiles) * tile_macs / sm_count;
  return static_cast<double>((tiles + sm_count - 1) / sm_count) * tile_macs;
}

double residual_correction(std::span<const BlockwiseResidual> residuals, int64_t M, int64_t N, int64_t K) {
  if (residuals.empty() || M <= 0 || N <= 0 || K <= 0) return 0.0;
  const double lm = std::log2(double(M)), ln = std::log2(double(N)), lk = std::log2(double(K));
  double weights = 0.0, weighted = 0.0;
  for (const BlockwiseResidual& r : residuals) {
    const double dm = lm - r.log2_m, dn = ln - r.log2_n, dk = lk - r.log2_k;
    const double w = std::exp(-0.5 * (dm * dm + dn * dn + dk * dk));
    weights += w;
    weighted += w * r.log_ratio;
  }
  return weighted / (weights + kResidualPrior);
}

BlockwiseFit blockwise_fit(const BlockwiseKernelEntry& kernel) {
  if (const BlockwiseFit* f = own_fit(kernel.name)) return *f;
  std::string twin = kernel.name;  // the bf16 kernel of the same tile: "..._fp16" -> "..._bf16"
  const size_t at = twin.rfind('_');
  if (at != std::string::npos) {
    twin = twin.substr(0, at) + "_bf16";
    if (const BlockwiseFit* f = own_fit(twin)) return *f;
  }
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  return BlockwiseFit{kNaN, kNaN};
}

double blockwise_predicted_us(const BlockwiseKernelEntry& kernel, int64_t M, int64_t N, int64_t K, OutType out,
                              int sm_count, const BlockwiseFit* fit) {
  const BlockwiseTraits& t = kernel.traits;
  if (t.out != out || sm_count <= 0 || (t.max_m > 0 && M > t.max_m)) return -1.0;
  const double w = blockwise_work(t, M, N, K, sm_count);
  if (t.schedule == Schedule::kGemv && w <= 0.0) return -1.0;  // no twin to predict it from: never picked
  BlockwiseFit f = fit != nullptr ? *fit : blockwise_fit(kernel);
  if (!f.fitted()) f = t.schedule == Schedule::kGemv ? kDefaultDecodeFit : kDefaultTileFit;
  return (f.a_us + f.b_us_per_mac * w) * std::exp(residual_correction(f.residuals, M, N, K));
}

BlockwiseSelection select_blockwise_kernel(int64_t M, int64_t N, int64_t K, OutType out, int sm_count,
                                           bool allow_workspace, bool torch_can_run, const BlockwiseTrial* trial) {
  if (M <= 0 || N <= 0 || K <= 0) return {};  // an empty problem runs no kernel (the entry returns its result first)
  const bool backstop = torch_can_run && torch_backstop_enabled();
  if (trial != nullptr) return select_uncached(M, N, K, out, sm_count, allow_workspace, backstop, trial);
  const SelectionKey key{M, N, K, int(out), sm_count, allow_workspace, backstop};
  return g_selections.get(key,
                          [&] { return select_uncached(M, N, K, out, sm_count, allow_workspace, backstop, nullptr); });
}

const BlockwiseKernelEntry* forced_blockwise_kernel() { return g_forced.load(); }
void set_forced_blockwise_kernel(const BlockwiseKernelEntry* kernel) { g_forced.store(kernel); }

}  // namespace fp8ext::sm90
