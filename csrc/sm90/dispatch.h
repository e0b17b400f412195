// Which kernel of the family runs a given problem. Plain C++: no CUTLASS, no libtorch.
//
// Order of precedence: a kernel forced by name (tests, debugging) > the opt-in autotuner's cached choice
// (autotune.h) > the measured table (heuristic_table.inc, produced by scripts/tune.py on the H200) > shape rules
// that only need the tile counts.
#pragma once

#include <cstdint>
#include <string>

#include "sm90/kernel_config.h"
#include "sm90/kernel_registry.h"

namespace fp8ext::sm90 {

struct ProblemKey {
  int64_t M, N, K;  // user's frame
  OutType out;
  Accum accum;
  InType in_a;
  InType in_b;  // every kernel of the family reads e4m3 weights; an e5m2 `b` matches none
};

// True when the kernel computes this problem's dtypes and accumulation mode (any shape is fine).
bool kernel_matches(const KernelEntry& kernel, const ProblemKey& key);

// The heuristic's choice among the built kernels, or nullptr if no built kernel matches the key. With
// allow_workspace false (CUDA-graph capture) kernels that need a global-memory workspace (stream-K) are passed
// over, so that a captured call allocates nothing but its output: a table row then gives its capture column
// (the fastest measured kernel without a workspace), and the rules skip stream-K.
const KernelEntry* heuristic_kernel(const ProblemKey& key, int sm_count, bool allow_workspace = true);

// True for the kernels that need a workspace (the stream-K ones).
bool needs_workspace(const KernelEntry& kernel);

// Process-wide override used by tests and for debugging; nullptr clears it.
void set_forced_kernel(const KernelEntry* kernel);
const KernelEntry* forced_kernel();

std::string describe(const ProblemKey& key);

}  // namespace fp8ext::sm90
