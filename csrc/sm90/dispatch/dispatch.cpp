#include "sm90/dispatch/dispatch.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "sm90/dispatch/selection_memo.h"

namespace fp8ext::sm90 {
namespace {

// The forced choice: a pointer and its options, read on every call, so guarded by a mutex (uncontended: a few
// tens of nanoseconds) rather than split over two atomics that a reader could see half-updated.
std::mutex g_forced_mutex;
KernelChoice g_forced;

// Stream-K kernels need a workspace for their partial tiles; inside CUDA-graph capture they are passed over.
bool usable(const KernelEntry& k, bool allow_workspace) {
  return allow_workspace || k.traits.schedule != Schedule::kStreamK;
}

int out_bytes(OutType o) { return o == OutType::kFP32 ? 4 : 2; }

// The torch backstop's switch: on unless set_torch_backstop turns it off (python/fp8ext applies FP8EXT_BACKENDS
// through it at import, with set_backends' parser and its errors).
std::atomic<bool> g_torch_backstop{true};

}  // namespace

bool kernel_matches(const KernelEntry& kernel, const ProblemKey& key) {
  const KernelTraits& t = kernel.traits;
  // A precise kernel may serve a fast-accumulation call: it is at least as accurate as what was asked for.
  const bool accum_ok = t.accum == key.accum || t.accum == Accum::kPrecise;
  return key.in_b == InType::kE4M3 && t.out == key.out && accum_ok && (t.any_in_a || t.in_a == key.in_a) &&
         (t.max_m == 0 || key.M <= t.max_m);
}

std::vector<RankedKernel> rank_kernels(const ProblemKey& key, int sm_count, bool allow_workspace) {
  // An empty problem runs no kernel (the entry returns its result before dispatch), and the cost terms of a grid
  // with no tiles divide by zero.
  if (key.M <= 0 || key.N <= 0 || key.K <= 0) return {};
  const CostProblem p{key.M, key.N, key.K, out_bytes(key.out), sm_count};
  std::vector<RankedKernel> ranked;
  for (const auto& k : all_kernels()) {
    if (!kernel_matches(k, key) || !usable(k, allow_workspace)) continue;
    const Estimate e = estimate(k, p);
    ranked.push_back({{&k, e.sched}, e});
  }
  // Padded-heavy kernels last; then by predicted time; ties by name, so the order is the same in every process.
  std::stable_sort(ranked.begin(), ranked.end(), [](const RankedKernel& x, const RankedKernel& y) {
    const bool xp = x.estimate.tile_ratio() > kMaxTileRatio, yp = y.estimate.tile_ratio() > kMaxTileRatio;
    if (xp != yp) return yp;
    if (x.estimate.us != y.estimate.us) return x.estimate.us < y.estimate.us;
    return std::strcmp(x.choice.kernel->name, y.choice.kernel->name) < 0;
  });
  return ranked;
}

namespace {

Selection select_uncached(const ProblemKey& key, int sm_count, bool allow_workspace, bool torch_can_run,
                          bool backstop) {
  Selection s;
  const std::vector<RankedKernel> ranked = rank_kernels(key, sm_count, allow_workspace);
  if (!ranked.empty()) {
    s.choice = ranked.front().choice;
    s.predicted_us = ranked.front().estimate.us;
  }
  if (torch_can_run && backstop) {
    s.torch_predicted_us =
        torch_rowwise_estimate({key.M, key.N, key.K, out_bytes(key.out), sm_count}, key.accum);
    if (s.torch_predicted_us > 0 &&
        (!s.choice || s.predicted_us > s.torch_predicted_us * (1.0 - kKernelAdvantage))) {
      s.torch_rowwise = true;
      s.choice = {};
    }
  }
  return s;
}

// The selection is memoized per problem (selection_memo.h). Everything the selection reads is in the key: the
// problem, the SM count, the capture state, whether torch can take the call and the backstop switch.
struct SelectionKey {
  int64_t M, N, K;
  int out, accum, in_a, in_b, sm_count;
  bool allow_workspace, torch_can_run, backstop;
  bool operator==(const SelectionKey&) const = default;
};

struct SelectionKeyHash {
  size_t operator()(const SelectionKey& k) const {
    return hash_fields({uint64_t(k.M), uint64_t(k.N), uint64_t(k.K), uint64_t(k.out), uint64_t(k.accum),
                        uint64_t(k.in_a), uint64_t(k.in_b), uint64_t(k.sm_count), uint64_t(k.allow_workspace),
                        uint64_t(k.torch_can_run), uint64_t(k.backstop)});
  }
};

SelectionMemo<SelectionKey, Selection, SelectionKeyHash> g_selections;

}  // namespace

Selection select_kernel(const ProblemKey& key, int sm_count, bool allow_workspace, bool torch_can_run) {
  const bool backstop = torch_can_run && torch_backstop_enabled();
  const SelectionKey k{key.M, key.N, key.K, int(key.out), int(key.accum), int(key.in_a), int(key.in_b),
                       sm_count, allow_workspace, torch_can_run, backstop};
  return g_selections.get(k, [&] { return select_uncached(key, sm_count, allow_workspace, torch_can_run, backstop); });
}

void set_torch_backstop(bool enabled) { g_torch_backstop.store(enabled); }

bool torch_backstop_enabled() { return g_torch_backstop.load(); }

bool needs_workspace(const KernelEntry& kernel) { return !usable(kernel, /*allow_workspace=*/false); }

void set_forced_kernel(const KernelChoice& choice) {
  std::lock_guard<std::mutex> lock(g_forced_mutex);
  g_forced = choice;
}

KernelChoice forced_kernel() {
  std::lock_guard<std::mutex> lock(g_forced_mutex);
  return g_forced;
}

KernelChoice parse_choice(const std::string& text, std::string* error) {
  const size_t at = text.find('@');
  const std::string name = text.substr(0, at);
  const KernelEntry* kernel = find_kernel(name);
  if (kernel == nullptr) {
    *error = "no kernel named '" + name + "' in this build";
    return {};
  }
  KernelChoice choice{kernel, {}};
  if (at == std::string::npos) return choice;
  const std::string opts = text.substr(at + 1);
  const bool raster_ok = opts.size() == 2 && (opts[0] == 'H' || opts[0] == 'M' || opts[0] == 'N');
  const bool band_ok = opts.size() == 2 && (opts[1] == '1' || opts[1] == '2' || opts[1] == '4' || opts[1] == '8');
  if (!raster_ok || !band_ok) {
    *error = "scheduler options '@" + opts + "' are not a raster (H, M or N) followed by a band width (1, 2, 4 or 8)";
    return {};
  }
  if (kernel->traits.schedule == Schedule::kGemv) {
    *error = "'" + name + "' has no tile scheduler to take '@" + opts + "'";
    return {};
  }
  choice.sched.raster = opts[0] == 'M' ? Raster::kAlongM : opts[0] == 'N' ? Raster::kAlongN : Raster::kHeuristic;
  choice.sched.max_swizzle = opts[1] - '0';
  return choice;
}

std::string choice_name(const KernelChoice& choice) {
  if (!choice) return {};
  std::string s = choice.kernel->name;
  if (choice.sched == SchedulerOptions{}) return s;
  const char raster = choice.sched.raster == Raster::kAlongM ? 'M' : choice.sched.raster == Raster::kAlongN ? 'N' : 'H';
  return s + '@' + raster + static_cast<char>('0' + choice.sched.max_swizzle);
}

std::string describe(const ProblemKey& key) {
  std::ostringstream os;
  os << "M=" << key.M << " N=" << key.N << " K=" << key.K << " out=" << to_string(key.out)
     << " accum=" << to_string(key.accum) << " a=" << to_string(key.in_a) << " b=" << to_string(key.in_b);
  return os.str();
}

}  // namespace fp8ext::sm90
