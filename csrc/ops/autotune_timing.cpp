// The autotuner's timing and device key (autotune_timing.h).
#include "ops/autotune_timing.h"

#include <cstdint>
#include <mutex>
#include <optional>

#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>

#include "ops/sm90_launch.h"
#include "ops/torch_calls.h"
#include "sm90/autotune/autotune.h"

namespace fp8ext {
namespace {

namespace st = torch::stable;

// A CUDA event destroyed with its scope, so that a CUDA error thrown mid-measurement does not leak it.
class ScopedEvent {
 public:
  ScopedEvent() { STD_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~ScopedEvent() { cudaEventDestroy(event_); }  // no check: a destructor must not throw
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// The autotuner's stopwatch: one launch on the call's own stream and operands, timed with events, after L2 is
// flushed by zeroing `flush` (when given and defined), so that a weight smaller than L2 is read from HBM as in a
// model's forward pass, not from the previous timing's copy in L2. Returns -1 if the kernel cannot run this
// problem. Writes into the call's output, which the chosen kernel then overwrites. Each candidate runs with the
// scheduler options the cost model chose for it.
double time_candidate_us(const sm90::KernelChoice& choice, sm90::GemmParams p, const Tensor& like,
                         std::optional<Tensor>* flush) {
  if (flush != nullptr && flush->has_value()) st::zero_(**flush);
  p.sched = choice.sched;
  const ScopedEvent start, stop;
  STD_CUDA_CHECK(cudaEventRecord(start.get(), p.stream));
  const bool ok = launch(*choice.kernel, p, like).ok;
  STD_CUDA_CHECK(cudaEventRecord(stop.get(), p.stream));
  STD_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  STD_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ok ? 1000.0 * ms : -1.0;
}

// Twice the L2 size, borrowed from the caching allocator for one tuning (given back to its cache afterwards);
// empty, and the timings unflushed, if it cannot be had (the device has no room for it: the stable ABI reports an
// out-of-memory error as any other, so any failure to allocate counts).
std::optional<Tensor> l2_flush_buffer(const cudaDeviceProp& props, const Tensor& like) {
  try {
    return st::new_empty(like, {2 * static_cast<int64_t>(props.l2CacheSize)}, ScalarType::Byte);
  } catch (const std::exception& e) {
    static std::once_flag once;
    warn_once(once, str("fp8ext.autotune: could not allocate a ", 2 * props.l2CacheSize,
                        "-byte buffer to flush L2 between timings (", e.what(),
                        "); timing candidates without the flush"));
    return std::nullopt;
  }
}

std::mutex g_software_mutex;
std::string g_software_key = "unknown";

}  // namespace

std::string device_key(const cudaDeviceProp& props) {
  std::lock_guard<std::mutex> lock(g_software_mutex);
  return std::string(props.name) + "/" + std::to_string(props.multiProcessorCount) + "sm/" + g_software_key;
}

void store_software_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_software_mutex);
  g_software_key = key;
}

sm90::KernelChoice tune_bucket(const std::string& bucket, const sm90::ProblemKey& key, const cudaDeviceProp& props,
                               const sm90::GemmParams& p, const Tensor& like) {
  std::string file_error;
  // The flush buffer is borrowed on the first timed launch: autotune_tune calls the timer only under its
  // tuning lock and only if no other thread tuned the bucket meanwhile, and the warm-up launches need no flush.
  std::optional<std::optional<Tensor>> flush;
  const auto timer = [&](const sm90::KernelChoice& c, bool warm_up) {
    if (warm_up) return time_candidate_us(c, p, like, nullptr);
    if (!flush) flush = l2_flush_buffer(props, like);
    return time_candidate_us(c, p, like, &*flush);
  };
  const sm90::KernelChoice tuned =
      sm90::autotune_tune(bucket, key, props.multiProcessorCount, timer, &file_error);
  if (!file_error.empty()) warn("fp8ext.autotune: could not save the cache file: " + file_error);
  return tuned;
}

}  // namespace fp8ext
