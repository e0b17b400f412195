// The local correction both dispatches apply to a kernel's fitted time (cost_model.h for the row-wise family,
// blockwise_dispatch.h for the block-scaled one). Plain C++.
//
// A fitted formula is one smooth surface per kernel over every regime, and it misses where the regime changes
// (bandwidth-bound small M, stream-K's fix-up on few tiles, the last wave's occupancy). Each kernel therefore keeps
// its residuals on the tuning rows, r_i = ln(measured / formula) at (M_i, N_i, K_i), and a call's prediction is the
// formula times exp(c), c their Gaussian-weighted mean around the call in octaves of M, N and K:
//
//   c = sum_i w_i r_i / (sum_i w_i + kResidualPrior),   w_i = exp(-d_i^2 / 2),
//   d_i^2 = (log2 M - log2 M_i)^2 + (log2 N - log2 N_i)^2 + (log2 K - log2 K_i)^2
//
// A call within an octave of tuning rows takes their deviation; one far from all of them (sum w << prior) keeps the
// formula. Rows further than kResidualReach octaves are skipped (weight below 1e-11): the row-wise tables hold
// thousands of residuals and a selection is computed once per problem (selection_memo.h), so this keeps its cost
// to tens of microseconds.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

namespace fp8ext::sm90 {

// One tuning row's deviation from a kernel's formula: the row's log2 M, N, K and ln(measured / predicted).
struct Residual {
  float log2_m, log2_n, log2_k, log_ratio;
};

// The weight, in the correction's denominator, of "no deviation": the correction is shrunk towards 0 where the
// tuning rows are far (one row at 2.4 octaves has weight 0.05, and moves the prediction half its residual).
constexpr double kResidualPrior = 0.05;
constexpr double kResidualReach = 7.0;  // octaves; exp(-7^2 / 2) = 2e-11

// c of the formula above for (M, N, K); 0 without residuals.
inline double residual_correction(std::span<const Residual> residuals, int64_t M, int64_t N, int64_t K) {
  if (residuals.empty() || M <= 0 || N <= 0 || K <= 0) return 0.0;
  const double lm = std::log2(double(M)), ln = std::log2(double(N)), lk = std::log2(double(K));
  double weights = 0.0, weighted = 0.0;
  for (const Residual& r : residuals) {
    const double dm = lm - r.log2_m, dn = ln - r.log2_n, dk = lk - r.log2_k;
    const double d2 = dm * dm + dn * dn + dk * dk;
    if (d2 > kResidualReach * kResidualReach) continue;
    const double w = std::exp(-0.5 * d2);
    weights += w;
    weighted += w * r.log_ratio;
  }
  return weighted / (weights + kResidualPrior);
}

}  // namespace fp8ext::sm90
