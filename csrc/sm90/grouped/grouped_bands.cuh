// Bands: how a grouped call's one dominant group runs as several problems, so that its tokens are read from DRAM
// about once (grouped_gemm.cuh's prologue writes them). Plain CUDA: no CUTLASS, no libtorch.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "sm90/grouped/grouped_params.h"

namespace fp8ext::sm90 {

// Bands. CUTLASS's group scheduler walks a group's tiles along M: a wave takes the next rows' tiles at one column of
// tiles, so a group whose tokens (rows x K bytes) outgrow the L2 (50 MB) reads all of them from DRAM again for every
// column of tiles. Under skew-free routing the groups are smaller than that; a group holding more than half of a 2d x
// 3d call's rows (one expert taking most tokens) may not be. Such a group, with more than kBandMinBytes of tokens,
// runs as bands of BandPlan::rows rows (kBandBytes of tokens, whole tiles), each a problem of its own: the walk
// crosses the weight's columns while a band's rows stay in the L2, so the group's tokens are read about once and its
// weight once per band (from the L2 where it fits). Band b starts b * rows into the group, on the unbanded group's
// tile grid, so every tile and its sum are the same. The first band takes the group's entry, the others the entries
// after the G groups' (BandPlan::slots of them: as many as a group of every row needs; the unused ones get problems
// of no rows). FP8EXT_GROUPED_BANDS=0 in the environment (read once) turns bands off.
constexpr int64_t kBandBytes = int64_t(8) << 20;
constexpr int64_t kBandMinBytes = 4 * kBandBytes;

struct BandPlan {
  int64_t rows = 0;   // rows of a band
  int64_t slots = 0;  // table entries after the G groups'; 0: no bands
};

inline bool bands_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FP8EXT_GROUPED_BANDS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The host's part, for a grouped kernel G: a 2d x 3d call on an unswapped tile whose rows could hold such a group (a
// split call's large-tile GEMM, whose tables the split's prologue writes, runs none).
template <class G>
BandPlan band_plan(const GroupedParams& p) {
  if (G::kSwapAB || p.form != GroupedForm::k2d3d || p.tables_written || p.K <= 0 || p.M * p.K <= kBandMinBytes ||
      !bands_enabled()) {
    return {};
  }
  constexpr int64_t tile = G::kTileM;
  const int64_t rows = kBandBytes / p.K / tile * tile;
  const int64_t band_rows = rows < tile ? tile : rows;
  return {band_rows, (p.M + band_rows - 1) / band_rows - 1};
}

// The bands of a group of `rows` rows and depth `depth` among `total` rows: 1 for a group that runs whole.
__device__ inline int64_t band_count(const BandPlan& plan, int64_t rows, int64_t depth, int64_t total) {
  if (plan.slots == 0 || 2 * rows <= total || rows * depth <= kBandMinBytes) return 1;
  return (rows + plan.rows - 1) / plan.rows;  // at most slots + 1: rows <= M
}

// Band b of group `grp`: its rows from b * plan.rows on.
template <class GV>
__device__ GV band_of(GV grp, int64_t b, const BandPlan& plan, const GroupedParams& p) {
  const int64_t r0 = b * plan.rows;
  grp.start += r0;
  grp.rows = grp.rows - r0 < plan.rows ? grp.rows - r0 : plan.rows;
  grp.a += r0 * p.lda;
  grp.scale_a += r0 * p.sa_stride_m;
  grp.out += r0 * p.N;
  return grp;
}

}  // namespace fp8ext::sm90
