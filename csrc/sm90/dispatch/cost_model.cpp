// The cost model of cost_model.h: its formula and features are described there.
#include "sm90/dispatch/cost_model.h"

#include <algorithm>
#include <map>
#include <vector>
#include <string>

namespace fp8ext::sm90 {
namespace {

int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
int64_t round_up(int64_t x, int64_t y) { return ceil_div(x, y) * y; }

// Fitted by tools/tune.py --fit from H200 measurements of the tuning shapes (bench/tuning/), never the
// held-out ones. {name, c0, c1, c2, c3}; torch_rowwise_fast / torch_rowwise_precise model torch._scaled_mm.
const CoefficientRow kFitted[] = {
#include "sm90/dispatch/cost_model_coeffs.inc"
    {nullptr, {0, 0, 0, 0}},  // end marker: keeps the array non-empty
};

const std::map<std::string, Coefficients>& fitted() {
  static const std::map<std::string, Coefficients> m = [] {
    std::map<std::string, Coefficients> out;
    for (const auto& r : kFitted) {
      if (r.name != nullptr) out.emplace(r.name, r.c);
    }
    return out;
  }();
  return m;
}

// CUTLASS's persistent tile scheduler (tile_scheduler_params.h, get_log_swizzle_size): the band it really uses
// for a requested maximum, given the cluster-rounded grid's shorter side.
int effective_band(int64_t blocks_m, int64_t blocks_n, int max_swizzle) {
  const int64_t shorter = std::min(blocks_m, blocks_n);
  if (max_swizzle >= 8 && shorter >= 6) return 8;
  if (max_swizzle >= 4 && shorter >= 3) return 4;
  if (max_swizzle >= 2 && shorter >= 2) return 2;
  return 1;
}

struct Grid {
  int64_t bm, bn;  // tiles needed along the MMA's M and N
  int cm, cn;      // cluster
};

Grid grid_of(const KernelTraits& t, const CostProblem& p) {
  const int64_t mma_m = t.swap_ab ? p.N : p.M;
  const int64_t mma_n = t.swap_ab ? p.M : p.N;
  return {ceil_div(mma_m, t.tile_m), ceil_div(mma_n, t.tile_n), t.cluster_m, t.cluster_n};
}

// The tile grid CUTLASS computes for a requested band: first rounded to the cluster, then (both sides) to the
// band it really uses x cluster.
struct Padded {
  int64_t m, n;
  int band;
};

Padded padded_grid(const Grid& g, int max_swizzle) {
  const int64_t cm = round_up(g.bm, g.cm), cn = round_up(g.bn, g.cn);
  const int band = effective_band(cm, cn, max_swizzle);
  return {round_up(cm, int64_t(band) * g.cm), round_up(cn, int64_t(band) * g.cn), band};
}

int64_t computed_for_band(const Grid& g, int max_swizzle) {
  const Padded pg = padded_grid(g, max_swizzle);
  return pg.m * pg.n;
}

// Physical defaults for a kernel the fit has not seen: the H200's measured rates, not fitted. c1 is one K
// iteration of the tile at 1300 TFLOP/s over 132 SMs (precise: 15% slower), c2 reads 1 MB at 3.3 TB/s.
Coefficients default_coefficients(const KernelTraits& t) {
  if (t.schedule == Schedule::kGemv) return {6.0, 0.0, 0.32, 0.0};
  const double flops = 2.0 * t.tile_m * t.tile_n * t.tile_k;
  const double per_sm = 1300e12 / 132.0;
  const double c1 = flops / per_sm * 1e6 * (t.accum == Accum::kPrecise ? 1.15 : 1.0);
  return {6.0, c1, 0.30, 1.0};
}

bool same_tile_family(const KernelTraits& o, const KernelTraits& t) {
  return o.schedule == t.schedule && o.tile_m == t.tile_m && o.tile_n == t.tile_n && o.tile_k == t.tile_k &&
         o.cluster_m == t.cluster_m && o.cluster_n == t.cluster_n && o.accum == t.accum && o.swap_ab == t.swap_ab &&
         o.promotion_interval == t.promotion_interval && o.overlap == t.overlap;
}

// The kernel's own fitted coefficients, else its twin's (the bf16 kernel with e4m3 activations of the same tile,
// cluster, schedule and accumulation: the manifest's `twin`), else none. Resolved once per registered kernel
// (the registry is complete before the first call), so a call costs an index, not a name search.
const Coefficients* calibration(const KernelEntry& kernel) {
  static const std::vector<const Coefficients*> resolved = [] {
    const auto& m = fitted();
    const auto& kernels = all_kernels();
    std::vector<const Coefficients*> out(kernels.size(), nullptr);
    for (size_t i = 0; i < kernels.size(); ++i) {
      if (auto it = m.find(kernels[i].name); it != m.end()) {
        out[i] = &it->second;
        continue;
      }
      for (const auto& other : kernels) {
        const KernelTraits& o = other.traits;
        if (o.out != OutType::kBF16 || o.in_a != InType::kE4M3 || o.any_in_a) continue;
        if (!same_tile_family(o, kernels[i].traits)) continue;
        if (auto it = m.find(other.name); it != m.end()) {
          out[i] = &it->second;
          break;
        }
      }
    }
    return out;
  }();
  const auto& kernels = all_kernels();
  const size_t i = static_cast<size_t>(&kernel - kernels.data());
  return i < resolved.size() ? resolved[i] : nullptr;
}

double predict(const Coefficients& c, const CostTerms& f) { return c.c0 + c.c1 * f.f1 + c.c2 * f.f2 + c.c3 * f.f3; }

// Bytes an operand costs from HBM: once when it fits in (half of) L2, which a later wave then finds there;
// otherwise what each wave's CTAs touch of it, wave after wave (the band walk decides how many of its tiles a
// wave spans), and never less than once.
constexpr double kL2Bytes = 30e6;  // the H200's 60 MB L2 is two partitions that each keep their own copy
double operand_traffic(double total, double rounds, double tiles_per_wave, double tile_bytes) {
  return total <= kL2Bytes ? total : std::max(total, rounds * tiles_per_wave * tile_bytes);
}

double megabytes(const CostProblem& p) {
  return (double(p.N) * p.K + double(p.M) * p.K + double(p.M) * p.N * p.out_bytes) / 1e6;
}

// CUTLASS's raster order for the padded grid with the heuristic option: along M when there are more tiles along N.
bool raster_along_m(int64_t padded_m, int64_t padded_n) { return padded_n > padded_m; }

}  // namespace

SchedulerOptions scheduler_options(const KernelTraits& t, const CostProblem& p) {
  SchedulerOptions o;
  if (t.schedule == Schedule::kGemv) return o;
  const Grid g = grid_of(t, p);
  const int64_t minimum = computed_for_band(g, 1);
  o.max_swizzle = 1;
  for (int band : {8, 4, 2}) {
    if (computed_for_band(g, band) == minimum) {
      o.max_swizzle = band;
      break;
    }
  }
  return o;
}

CostTerms cost_terms(const KernelTraits& t, const CostProblem& p, const SchedulerOptions& sched) {
  CostTerms f;
  const int64_t sms = p.sm_count > 0 ? p.sm_count : 132;
  f.f2 = megabytes(p);
  if (t.schedule == Schedule::kGemv) {
    f.tiles_needed = f.tiles_computed = f.rounds = 1;
    f.f1 = double(ceil_div(p.M, 8)) * double(p.N) * double(p.K) / double(sms) / double(1 << 20);
    return f;
  }
  const Grid g = grid_of(t, p);
  const int cluster = t.cluster_m * t.cluster_n;
  const int64_t slots = std::max<int64_t>(1, sms / cluster);  // clusters resident at once, one CTA per SM
  const Padded pg = padded_grid(g, sched.max_swizzle);
  const int64_t pm = pg.m, pn = pg.n;
  const int band = pg.band;
  f.tiles_needed = g.bm * g.bn;
  f.tiles_computed = pm * pn;
  f.kiters = ceil_div(p.K, t.tile_k);
  f.rounds = ceil_div(f.tiles_computed / cluster, slots);
  f.f3 = double(f.rounds);
  f.f1 = t.schedule == Schedule::kStreamK
             ? std::max(double(f.tiles_computed) * double(f.kiters) / double(slots * cluster), 1.0)
             : double(f.rounds * f.kiters);
  // One wave of W CTAs walks bands of `band` tiles across the raster direction: it spans `band` tiles (or, once a
  // band is used up, W / tiles-along-the-raster of them) across it, and W / band tiles along it.
  const int64_t wave = std::min<int64_t>(slots * cluster, f.tiles_computed);
  const bool along_m = raster_along_m(pm, pn);
  const int64_t along = along_m ? pm : pn, across = along_m ? pn : pm;
  const double across_tiles = double(std::min(across, std::max(std::min<int64_t>(band, wave), ceil_div(wave, along))));
  const double along_tiles = double(std::min(along, ceil_div(wave, band)));
  const double mma_m = double(t.swap_ab ? p.N : p.M), mma_n = double(t.swap_ab ? p.M : p.N);
  const double a_tiles = along_m ? along_tiles : across_tiles, b_tiles = along_m ? across_tiles : along_tiles;
  const double k = double(p.K);
  f.f2 = (operand_traffic(mma_m * k, double(f.rounds), a_tiles, double(t.tile_m) * k) +
          operand_traffic(mma_n * k, double(f.rounds), b_tiles, double(t.tile_n) * k) +
          double(p.M) * double(p.N) * p.out_bytes) / 1e6;
  return f;
}

Estimate estimate(const KernelEntry& kernel, const CostProblem& p) {
  const KernelTraits& t = kernel.traits;
  Estimate e;
  const Coefficients* fit = calibration(kernel);
  e.calibrated = fit != nullptr;
  e.sched = scheduler_options(t, p);
  const CostTerms f = cost_terms(t, p, e.sched);
  e.tiles_needed = f.tiles_needed;
  e.tiles_computed = f.tiles_computed;
  e.us = predict(fit != nullptr ? *fit : default_coefficients(t), f);
  return e;
}

double torch_rowwise_estimate(const CostProblem& p, Accum accum) {
  if (p.M <= 0 || p.N <= 0 || p.K <= 0) return -1.0;  // an empty problem runs nothing (and has no tile grid)
  const auto& m = fitted();
  const auto it = m.find(accum == Accum::kFast ? "torch_rowwise_fast" : "torch_rowwise_precise");
  if (it == m.end()) return -1.0;
  return predict(it->second, cost_terms(torch_rowwise_traits(), p, SchedulerOptions{Raster::kHeuristic, 1}));
}

KernelTraits torch_rowwise_traits() {
  // cuBLASLt's row-wise kernels are modelled as one 128x128x128 cooperative tile, no cluster, band 1.
  KernelTraits t{};
  t.tile_m = t.tile_n = t.tile_k = 128;
  t.cluster_m = t.cluster_n = 1;
  t.schedule = Schedule::kCooperative;
  return t;
}

const std::vector<CoefficientRow>& coefficient_rows() {
  static const std::vector<CoefficientRow> rows = [] {
    std::vector<CoefficientRow> out;
    for (const auto& r : kFitted) {
      if (r.name != nullptr) out.push_back(r);
    }
    return out;
  }();
  return rows;
}

}  // namespace fp8ext::sm90
