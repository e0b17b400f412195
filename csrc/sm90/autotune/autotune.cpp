#include "sm90/autotune/autotune.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include "sm90/autotune/autotune_cache.h"

namespace fp8ext::sm90 {
namespace {

struct State {
  std::shared_mutex mu;  // guards everything below
  bool enabled = false;
  std::string cache_file;
  std::map<std::string, std::string> choices;  // bucket -> kernel name (ordered: the file is written sorted)
};

State& state() {
  static State s;
  return s;
}

// One tuning at a time in the process: timings taken while another tuning runs on the same GPU are noise.
std::mutex& tuning_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

int64_t m_boundary(int64_t m) {
  // The tiles of the family cover M (the tokens) in steps of 16 (swapped decode tiles) up to 128, of 64 up to
  // 1024 and of 128 beyond: every M of one bucket has the same tile count, and so the same waves, on each tile
  // that the ranking offers for it.
  const int64_t step = m <= 128 ? 16 : m <= 1024 ? 64 : 128;
  return (m + step - 1) / step * step;
}

std::string autotune_bucket(const ProblemKey& key, const std::string& device_key) {
  std::ostringstream os;
  os << device_key << "|m<=" << m_boundary(key.M) << "|n=" << key.N << "|k=" << key.K << "|" << to_string(key.out)
     << "|" << to_string(key.accum) << "|a=" << to_string(key.in_a) << "|b=" << to_string(key.in_b);
  return os.str();
}

void autotune_configure(bool enabled, const std::string& cache_file,
                        const std::vector<std::pair<std::string, std::string>>& entries) {
  State& s = state();
  const std::unique_lock lock(s.mu);
  s.enabled = enabled;
  s.cache_file = cache_file;
  for (const auto& [bucket, kernel] : entries) s.choices[bucket] = kernel;
}

bool autotune_enabled() {
  State& s = state();
  const std::shared_lock lock(s.mu);
  return s.enabled;
}

KernelChoice autotune_lookup(const std::string& bucket, const ProblemKey& key) {
  State& s = state();
  const std::shared_lock lock(s.mu);
  const auto it = s.choices.find(bucket);
  if (it == s.choices.end()) return {};
  // A cache written by another build may name a kernel this one lacks: then the bucket is tuned again.
  std::string ignored;
  const KernelChoice c = parse_choice(it->second, &ignored);
  return (c && kernel_matches(*c.kernel, key)) ? c : KernelChoice{};
}

KernelChoice autotune_tune(const std::string& bucket, const ProblemKey& key, int sm_count,
                           const CandidateTimer& time_us, std::string* file_error) {
  const std::lock_guard tuning(tuning_mutex());
  // Another thread may have tuned this bucket while this one waited.
  if (const KernelChoice done = autotune_lookup(bucket, key)) return done;

  // The cost model's top kAutotuneCandidates, each with the scheduler options the model chose for this call; one
  // untimed call per candidate: the warm-up, and the check that it can run this problem at all.
  std::vector<KernelChoice> candidates;
  for (const RankedKernel& r : rank_kernels(key, sm_count, /*allow_workspace=*/true)) {
    if (candidates.size() == static_cast<size_t>(kAutotuneCandidates)) break;
    if (time_us(r.choice, /*warm_up=*/true) >= 0.0) candidates.push_back(r.choice);
  }
  if (candidates.empty()) return {};
  // Then kTurns turns of kSamplesPerTurn timings each, the candidates' order rotated by one every turn, and the
  // median per candidate: under the H200's power cap the clock wanders, and timing the candidates one after
  // another hands each its own stretch of that wander (fp8ext.bench.Timer.interleaved does the same).
  constexpr int kTurns = 3, kSamplesPerTurn = 3;
  std::vector<std::vector<double>> samples(candidates.size());
  const size_t n = candidates.size();
  for (int turn = 0; turn < kTurns; ++turn) {
    for (size_t j = 0; j < n; ++j) {
      const size_t i = (j + static_cast<size_t>(turn)) % n;
      for (int s = 0; s < kSamplesPerTurn; ++s) samples[i].push_back(time_us(candidates[i], /*warm_up=*/false));
    }
  }
  KernelChoice best;
  double best_us = 0.0;
  for (size_t i = 0; i < n; ++i) {
    std::vector<double>& t = samples[i];
    if (*std::min_element(t.begin(), t.end()) < 0.0) continue;  // failed on a later launch: not a choice
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    const double us = t[t.size() / 2];
    if (!best || us < best_us) {
      best = candidates[i];
      best_us = us;
    }
  }
  if (!best) return {};

  State& s = state();
  {
    const std::unique_lock lock(s.mu);
    s.choices[bucket] = choice_name(best);
  }
  const std::shared_lock lock(s.mu);
  if (!s.cache_file.empty()) {
    const std::string err = write_cache(s.cache_file, s.choices);
    if (!err.empty() && file_error != nullptr) *file_error = err;
  }
  return best;
}

std::vector<std::pair<std::string, std::string>> autotune_entries() {
  State& s = state();
  const std::shared_lock lock(s.mu);
  return {s.choices.begin(), s.choices.end()};
}

}  // namespace fp8ext::sm90
