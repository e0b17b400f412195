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

// A kernel and the order its tile scheduler walks the output (gemm_params.h). Written as the kernel's name,
// optionally followed by "@" + raster + band width: "pp_128x128x128_c1x2_fast_bf16@N4" walks along N in bands
// of 4 tiles (raster M, N or H for CUTLASS's heuristic; band 1, 2, 4 or 8). The bare name means "@H8".
struct KernelChoice {
  const KernelEntry* kernel = nullptr;
  SchedulerOptions sched;
  explicit operator bool() const { return kernel != nullptr; }
};

// Parses the written form against the registry. On failure returns an empty choice and says why in *error.
KernelChoice parse_choice(const std::string& text, std::string* error);
// The written form: the bare name when the options are the defaults.
std::string choice_name(const KernelChoice& choice);

// True when the kernel computes this problem's dtypes and accumulation mode (any shape is fine).
bool kernel_matches(const KernelEntry& kernel, const ProblemKey& key);

// The heuristic's choice among the built kernels, or an empty choice if no built kernel matches the key. With
// allow_workspace false (CUDA-graph capture) kernels that need a global-memory workspace (stream-K) are passed
// over, so that a captured call allocates nothing but its output: a table row then gives its capture column
// (the fastest measured kernel without a workspace), and the rules skip stream-K.
KernelChoice heuristic_kernel(const ProblemKey& key, int sm_count, bool allow_workspace = true);

// True for the kernels that need a workspace (the stream-K ones).
bool needs_workspace(const KernelEntry& kernel);

// Process-wide override used by tests, tuning and debugging; an empty choice clears it.
void set_forced_kernel(const KernelChoice& choice);
KernelChoice forced_kernel();

std::string describe(const ProblemKey& key);

}  // namespace fp8ext::sm90
