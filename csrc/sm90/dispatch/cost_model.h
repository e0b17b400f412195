// The cost model that ranks the built kernels for any problem. Plain C++: no CUTLASS, no libtorch.
//
// For one kernel and one problem (M, N, K in the user's frame) it derives, from the kernel's traits alone:
//   - the tile scheduler's options for this call (scheduler_options): the widest band (1, 2, 4 or 8 tiles) that
//     adds no padded tile. CUTLASS's persistent and stream-K schedulers round the tile grid up to a multiple of
//     band x cluster along BOTH dimensions, and a padded tile runs the whole K loop (4096x2176x7168 on a 128x256
//     tile: 227 us with band 8, 134 us with band 1);
//   - the tiles it computes (padding included) against the tiles the problem needs (tile_ratio);
//   - the rounds of clusters per wave on the device's SMs, and the bytes it moves from HBM;
// and predicts its time as
//
//     t = c0 + c1 * F1 + c2 * F2 + c3 * F3                                                [microseconds]
//
//     F1  serial mainloop work of one SM, in the kernel's own K iterations:
//           persistent kernels  rounds * ceil(K / tile_k)     rounds = ceil(clusters computed / clusters per wave)
//           stream-K            tiles computed * ceil(K / tile_k) / SMs   (K split continuously; c1 carries the
//                               fix-up of the split tiles)
//           decode kernels      ceil(M / 8) * N * K / SMs / 2^20   (one mma.sync row group of 8 tokens)
//     F3  waves of tiles (the per-tile prologue and epilogue), 0 for the decode kernels
//     F2  HBM traffic in MB: each operand once if it fits in L2 (half of it: two partitions), else what each wave
//         of CTAs touches of it, wave after wave (the raster and band of the walk decide that), and the output
//         once; the decode kernels read the weight and the activations once
//
// with c0..c3 fitted per kernel on measured times of the tuning shapes (tools/tune.py --fit writes
// cost_model_coeffs.inc; bench/tuning/ keeps the measurements). A kernel without coefficients borrows its twin's
// (the bf16 kernel of the same tile, manifest trait `twin`) or falls back to physical defaults (datasheet-level
// rates), so that every build ranks every kernel. torch._scaled_mm's row-wise path is modelled the same way as a
// 128x128 tile with its own fitted coefficients, so that dispatch can tell where torch is predicted to be faster.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sm90/common/gemm_params.h"
#include "sm90/common/kernel_config.h"
#include "sm90/rowwise/kernel_registry.h"

namespace fp8ext::sm90 {

struct Coefficients {
  double c0, c1, c2, c3;
};

// The problem as the model sees it: the user's frame, the output element size, the device's SM count.
struct CostProblem {
  int64_t M, N, K;
  int out_bytes;  // 2 for bf16/fp16, 4 for fp32
  int sm_count;
};

struct Estimate {
  SchedulerOptions sched;  // what the call should pass to the kernel
  double us = 0;           // predicted time
  int64_t tiles_needed = 0, tiles_computed = 0;
  double tile_ratio() const { return tiles_needed > 0 ? double(tiles_computed) / double(tiles_needed) : 1.0; }
  bool calibrated = false;  // the kernel (or its twin) has fitted coefficients
};

// The band width rule above, for a kernel with a tile scheduler (the decode kernels take the defaults).
SchedulerOptions scheduler_options(const KernelTraits& t, const CostProblem& p);

// The model's terms for one kernel with given scheduler options: F1..F3 of the formula above and the geometry
// behind them (tools/tune.py records them beside each measurement and fits c0..c3 on them).
struct CostTerms {
  double f1 = 0, f2 = 0, f3 = 0;
  int64_t tiles_needed = 0, tiles_computed = 0, rounds = 0, kiters = 0;
};
CostTerms cost_terms(const KernelTraits& t, const CostProblem& p, const SchedulerOptions& sched);

// What torch._scaled_mm's row-wise path is modelled as (a 128x128x128 tile, no cluster, band 1).
KernelTraits torch_rowwise_traits();

// The model's estimate for this kernel (its own coefficients, its twin's, or the defaults).
Estimate estimate(const KernelEntry& kernel, const CostProblem& p);

// torch._scaled_mm row-wise on the same problem (bf16 output); negative when the model has no calibration for
// it (then dispatch never prefers torch).
double torch_rowwise_estimate(const CostProblem& p, Accum accum);

// The calibration rows compiled in (name, c0..c3), for introspection and tests.
struct CoefficientRow {
  const char* name;
  Coefficients c;
};
const std::vector<CoefficientRow>& coefficient_rows();

}  // namespace fp8ext::sm90
