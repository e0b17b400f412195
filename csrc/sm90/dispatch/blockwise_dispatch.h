// Which block-scaled kernel (blockwise_gemm.h) computes a call: a kernel forced by name, else the one predicted
// fastest. Plain C++: no CUTLASS, no libtorch.
//
// Every kernel's time is predicted as
//
//   t = (a + b * W) * exp(c)   [microseconds]
//
// with a and b fitted per kernel and c its correction from the tuning rows near the call, and the fastest
// prediction is taken. W is
//   tile kernels, data-parallel: ceil(tiles / SMs) * tile_m * tile_n * K   (MACs of serial work per SM, padded
//                                                                           tiles and whole waves included)
//   tile kernels, stream-K:      tiles * tile_m * tile_n * K / SMs          (K split evenly; b carries the fix-up)
//   decode kernels (bw_gemv_m4_* for M <= 4, bw_gemv_tc_* for M <= 32): the predicted microseconds of the
//                                kernel's row-wise twin (the same loads and MMAs, the scales placed differently)
//                                by the row-wise cost model (cost_model.h); b is then a dimensionless ratio.
// For a tile kernel b is its time per MAC on one SM: it holds the wgmma shape's efficiency and the mainloop's
// per-group scaling cost, which differ per tile and schedule; a its fixed cost.
//
// a + b * W is one straight line per kernel over every regime, and it misses by up to 2x where the regime
// changes (stream-K's fix-up on few tiles, bandwidth-bound small M). Each kernel therefore keeps the residuals of
// its fit on the tuning rows, r_i = ln(measured / (a + b * W)) at (M_i, N_i, K_i), and the correction is their
// Gaussian-weighted mean around the call, in octaves of M, N and K:
//
//   c = sum_i w_i r_i / (sum_i w_i + kResidualPrior),   w_i = exp(-d_i^2 / 2),
//   d_i^2 = (log2 M - log2 M_i)^2 + (log2 N - log2 N_i)^2 + (log2 K - log2 K_i)^2
//
// so a call within an octave of tuning rows takes their deviation, and one far from all of them (sum w << prior)
// keeps the straight line. Kernels without a fit borrow the bf16 kernel of the same tile (fit and residuals). A
// kernel with neither (one added since the last fit) is taken only where no fitted kernel computes the call, with
// defaults (datasheet-level for tiles, the twin's time as it is for decode).
//
// torch._scaled_mm's block-wise path (cuBLASLt) is the backstop, as torch's row-wise path is for the row-wise
// family (dispatch.h): it is modelled the same way, as a data-parallel 128 x 128 tile with its own fit and
// residuals (the "torch._scaled_mm" row of the fits), and it runs the call where the best kernel is not predicted
// at least kBlockwiseKernelAdvantage faster. Only above kBlockwiseBackstopAboveM and kBlockwiseBackstopMinUs of
// predicted time, on the shapes torch computes (torch_blockwise_computes), where the caller says torch can take
// the call as given (torch 2.11, torch's scale layouts, bf16 output, no bias: ops/torch_backstop.cpp) and the torch
// backend is on.
// tools/fit_blockwise_dispatch.py fits them on the tuning part of the blockwise suite (DeepSeek-V3's layers,
// every kernel timed, every M) and on the rows of --shapes runs named as tuning material (docs/blockwise.md); the
// zoo's held-out rows and a set of fresh shapes drawn before the fit judge them. Selections are memoized per problem.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sm90/blockwise/blockwise_gemm.h"

namespace fp8ext::sm90 {

// One tuning row's deviation from a kernel's fit: the row's log2 M, N, K and ln(measured / (a + b * W)).
struct BlockwiseResidual {
  float log2_m, log2_n, log2_k, log_ratio;
};

// The weight, in the correction's denominator, of "no deviation": the correction is shrunk towards 0 where the
// tuning rows are far (one row at 2.4 octaves has weight 0.05, and moves the prediction half its residual).
constexpr double kResidualPrior = 0.05;

struct BlockwiseFit {
  double a_us;          // fixed cost
  double b_us_per_mac;  // per MAC of serial work on one SM (per predicted us of the row-wise twin for decode)
  std::span<const BlockwiseResidual> residuals = {};
  // NaN marks a kernel without a fit: the dispatch takes it only where no fitted kernel computes the call.
  bool fitted() const { return std::isfinite(a_us) && std::isfinite(b_us_per_mac); }
};

// Where the backstop is considered, and by what margin the best kernel's prediction must beat torch's for the
// kernel to run (the time model's own error near a decision). Scored by tools/fit_blockwise_dispatch.py on the
// tuning rows, one weight shape left out at a time (docs/blockwise.md has the scan): letting torch take calls at
// M <= 64 lost there (on every tuning row at M <= 128 the fastest kernel beat torch, by 1.00-1.50x; torch's time
// hardly moves with M at that size and its prediction ties with the kernels', so a small error hands it a call it
// loses), and margins of 0 to 0.04 scored alike.
//
// The scan scores torch's own times, but the backstop is torch called through fp8ext, which costs more host
// time: where torch's GEMM is short, an eager call can wait on the host. Measured through the op on the tuning
// rows (the blockwise suite, two runs): 128 x 24576 x 1536 at 24.2 us against torch's 21.2 (16.4 us either way in
// a CUDA graph), and of the rows torch takes in 20-35 us, 512 x 4096 x 7168 at 0.85x and 512 x 32768 x 512 at 0.89x
// of torch in one run (1.00x in the other); rows of 41 us and more stayed at 0.99-1.06x in both. Hence the bound
// at M > 128 rather than the scan's 64 (0.15% apart there), and torch only where its predicted time is at least
// kBlockwiseBackstopMinUs; below that the kernels run (on those tuning rows 0.93-1.03x of torch).
constexpr int64_t kBlockwiseBackstopAboveM = 128;
constexpr double kBlockwiseKernelAdvantage = 0.04;
constexpr double kBlockwiseBackstopMinUs = 40.0;

// The shapes torch._scaled_mm's block-wise path computes (cuBLASLt 13, torch 2.11, on the H200): M a multiple of
// 4 (it declines every other M with CUBLAS_STATUS_NOT_SUPPORTED, M = 1 included), and K / 128 (rounded up) a
// multiple of 4. With any other K it returns a wrong result without an error (relative error 0.8 to 1e38 against
// the float64 reference, for K = 640, 768, 896, 2880, 4288, 4416, 29568), and rejects scale_b padded to 4 groups.
bool torch_blockwise_computes(int64_t M, int64_t K);

// c of the formula above for (M, N, K); 0 without residuals.
double residual_correction(std::span<const BlockwiseResidual> residuals, int64_t M, int64_t N, int64_t K);

// W of the formula above (0 for a decode kernel whose row-wise twin was not built: it is then never picked).
double blockwise_work(const BlockwiseTraits& t, int64_t M, int64_t N, int64_t K, int sm_count);

// The fit a kernel uses: its own row of blockwise_cost_coeffs.inc, its bf16 twin's, or none (NaN, not fitted).
BlockwiseFit blockwise_fit(const BlockwiseKernelEntry& kernel);

// The predicted time of `kernel` on the call, or a negative value where it does not compute it (another output
// type, M above its max_m). `fits`, when given, replaces the compiled-in fits: one per kernel of
// all_blockwise_kernels(), in its order (tools/fit_blockwise_dispatch.py tries its own that way).
double blockwise_predicted_us(const BlockwiseKernelEntry& kernel, int64_t M, int64_t N, int64_t K, OutType out,
                              int sm_count, const BlockwiseFit* fit = nullptr);

// What torch._scaled_mm's block-wise path is modelled as: a data-parallel 128 x 128 tile, bf16 output.
BlockwiseTraits torch_blockwise_traits();
// Its fit (the "torch._scaled_mm" row of blockwise_cost_coeffs.inc); NaN (never preferred) without one.
BlockwiseFit torch_blockwise_fit();
// Its predicted time on the call, or a negative value without a fit.
double torch_blockwise_predicted_us(int64_t M, int64_t N, int64_t K, int sm_count, const BlockwiseFit* fit = nullptr);

// Fits to try in place of the compiled-in ones (tools/fit_blockwise_dispatch.py): one per kernel of
// all_blockwise_kernels(), in its order (empty: the compiled-in ones), torch's, and the backstop's margin and lower
// M bound (the time floor is kBlockwiseBackstopMinUs either way).
struct BlockwiseTrial {
  std::vector<BlockwiseFit> kernels;
  BlockwiseFit torch;
  double kernel_advantage = kBlockwiseKernelAdvantage;
  int64_t backstop_above_m = kBlockwiseBackstopAboveM;
};

struct BlockwiseSelection {
  const BlockwiseKernelEntry* kernel = nullptr;  // null when torch runs the call or no kernel computes it
  bool torch_blockwise = false;                  // run torch._scaled_mm block-wise instead
};

// What the default dispatch runs. The kernel is null and torch_blockwise false when no kernel was built for the
// output type. allow_workspace = false (inside CUDA graph capture) leaves out the stream-K kernels, which need a
// workspace. torch_can_run: the caller's word that torch._scaled_mm takes the call as given; the backstop is then
// considered while the torch backend is on (dispatch.h, set_torch_backstop). Memoized per problem when `trial` is
// null (the compiled-in fits).
BlockwiseSelection select_blockwise_kernel(int64_t M, int64_t N, int64_t K, OutType out, int sm_count,
                                           bool allow_workspace, bool torch_can_run,
                                           const BlockwiseTrial* trial = nullptr);

// A kernel forced by name (fp8ext.force_kernel with a "bw_" name); nullptr for none. Process-wide.
const BlockwiseKernelEntry* forced_blockwise_kernel();
void set_forced_blockwise_kernel(const BlockwiseKernelEntry* kernel);

}  // namespace fp8ext::sm90
