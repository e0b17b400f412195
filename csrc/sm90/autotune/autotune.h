// The opt-in autotuner's memory and policy: one kernel choice per shape bucket, kept in a process-wide map and,
// when a cache file is set, in a JSON file that later processes load (python/fp8ext/autotune.py reads it).
//
// A bucket is (device key: GPU name, SM count, CUDA, torch and fp8ext versions; M rounded up to the family's next
// tile boundary; the exact N and K; out dtype, accumulation, input dtypes). The first call of a bucket times the
// cost model's top kAutotuneCandidates kernels, each with the scheduler options the model chose for the call, on
// the call's own operands, and keeps the fastest: the median of 9 timings per candidate, taken in 3 interleaved
// turns after one untimed call.
// Timing is the caller's job (ops/autotune_timing.cpp owns streams and events); this file is plain C++, no CUDA, no
// libtorch. Thread-safe: lookups share a lock, and tuning is serialised so that concurrent tunings neither
// disturb each other's timings nor tune one bucket twice.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sm90/dispatch/dispatch.h"
#include "sm90/rowwise/kernel_registry.h"

namespace fp8ext::sm90 {

constexpr int kAutotuneCandidates = 6;

std::string autotune_bucket(const ProblemKey& key, const std::string& device_key);

// Turns tuning on or off, sets the cache file ("" for memory only) and merges `entries` (bucket, kernel name)
// into the in-memory choices. Choices already made stay when the autotuner is turned off and on again.
void autotune_configure(bool enabled, const std::string& cache_file,
                        const std::vector<std::pair<std::string, std::string>>& entries);
bool autotune_enabled();

// The remembered choice (a kernel and its scheduler options) of this bucket if it is built and computes the key,
// else an empty choice.
KernelChoice autotune_lookup(const std::string& bucket, const ProblemKey& key);

// Times each candidate with time_us (one timing in microseconds per call; negative when the candidate cannot
// run this problem), remembers the fastest, and writes the cache file if one is set. Returns an empty choice when
// no candidate ran. A failure to write the file leaves a message in *file_error (the choice is still kept in memory).
// time_us is called only once the tuning lock is held and the bucket is still untuned, so a timer may set up what
// it needs (the L2 flush buffer) on its first call. `warm_up` is true for the untimed first call per candidate,
// which needs no L2 flush before it.
using CandidateTimer = std::function<double(const KernelChoice&, bool warm_up)>;
KernelChoice autotune_tune(const std::string& bucket, const ProblemKey& key, int sm_count,
                           const CandidateTimer& time_us, std::string* file_error);

// Every remembered (bucket, kernel name), sorted by bucket.
std::vector<std::pair<std::string, std::string>> autotune_entries();

}  // namespace fp8ext::sm90
