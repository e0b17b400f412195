// The autotune cache file's reader and writer as internal ops (PyTorch's stable ABI), in every build (a CPU-only
// one included) so that python/fp8ext/autotune.py reads the file and the tests exercise the tuner's own writer
// without a GPU. The schemas are in schemas.cpp.
#include <string>
#include <tuple>
#include <vector>

#include <torch/csrc/stable/library.h>

#include "ops/op_errors.h"
#include "sm90/autotune/autotune_cache.h"

namespace fp8ext {
namespace {

// Returns (why the file is unusable or "", [bucket0, kernel0, bucket1, kernel1, ...]); a missing file is no error
// and has no entries.
std::tuple<std::string, std::vector<std::string>> autotune_cache_read(std::string path) {
  const sm90::CacheRead r = sm90::read_cache(path);
  return {r.error, sm90::flatten_entries(r.entries)};
}

// Merges the entries into the file as the tuner does after a new choice; returns "" or what failed.
std::string autotune_cache_write(std::string path, std::vector<std::string> buckets,
                                 std::vector<std::string> kernels) {
  FP8EXT_CHECK(buckets.size() == kernels.size(), "fp8ext.autotune: ", buckets.size(), " buckets but ",
               kernels.size(), " kernel names");
  sm90::CacheEntries entries;
  for (size_t i = 0; i < buckets.size(); ++i) entries[buckets[i]] = kernels[i];
  return sm90::write_cache(path, entries);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CompositeExplicitAutograd, m) {
  m.impl("_autotune_cache_read", TORCH_BOX(&autotune_cache_read));
  m.impl("_autotune_cache_write", TORCH_BOX(&autotune_cache_write));
}

}  // namespace fp8ext
