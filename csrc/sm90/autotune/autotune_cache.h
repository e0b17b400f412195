// The autotuner's cache file: the one reader and the one writer of its JSON format
//
//   {"format": "fp8ext-autotune-1", "entries": {"<bucket>": "<kernel name>", ...}}
//
// The writer (called by the tuner after each new choice) and the reader (python/fp8ext/autotune.py, through the
// _autotune_cache_read op) are the same code in every build, CPU-only included, so tests exercise on any machine
// the file I/O that the tuner uses on the GPU. Plain C++ and POSIX, no CUDA, no libtorch.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fp8ext::sm90 {

using CacheEntries = std::map<std::string, std::string>;  // bucket -> kernel name (ordered: written sorted)

struct CacheRead {
  bool exists = false;  // false: no file at the path (not an error: nothing was tuned yet)
  std::string error;    // why the file is not a usable cache, e.g. "is empty"; "" when it is one
  CacheEntries entries;
};

// Reads a cache file. Never throws: whatever the file holds (truncated, NUL bytes, binary, a directory, another
// JSON document) comes back as `error`, for the caller to report.
CacheRead read_cache(const std::string& path);

// Merges `choices` into the file's current entries (a choice replaces the file's for the same bucket) and
// replaces the file. Concurrent writers, in this process or others, keep each other's buckets: the merge runs
// under an exclusive flock on "<path>.lock" (a sidecar, left in place: removing it would let two writers lock
// different files). The new content goes to a uniquely named temporary file in the same directory (pid, thread,
// counter and a random number: processes in containers often share a pid), is fsynced, then renamed over the
// file, so a reader sees the old file or the new one, never part of one. A file that is not a readable cache is
// replaced (its loader has already warned about it). Returns "" or what failed.
std::string write_cache(const std::string& path, const CacheEntries& choices);

// (bucket, kernel) pairs as the introspection ops hand them to Python, one str[]: [bucket0, kernel0, bucket1, ...].
template <typename Pairs>
std::vector<std::string> flatten_entries(const Pairs& entries) {
  std::vector<std::string> flat;
  for (const auto& [bucket, kernel] : entries) {
    flat.push_back(bucket);
    flat.push_back(kernel);
  }
  return flat;
}

}  // namespace fp8ext::sm90
