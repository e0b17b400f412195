// Which kernel of the family runs a given problem. Plain C++: no CUTLASS, no libtorch.
//
// Order of precedence: a kernel forced by name (tests, debugging) > the opt-in autotuner's cached choice
// (autotune.h) > the cost model's ranking of the built kernels (cost_model.h), with torch._scaled_mm's row-wise
// path as a backstop where the model predicts it faster.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sm90/dispatch/cost_model.h"
#include "sm90/common/kernel_config.h"
#include "sm90/rowwise/kernel_registry.h"

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
// of 4 tiles (raster M, N or H for CUTLASS's heuristic; band 1, 2, 4 or 8). The bare name means "@H8". Dispatch
// chooses the band per call (cost_model.h: the widest that adds no padded tile).
struct KernelChoice {
  const KernelEntry* kernel = nullptr;
  SchedulerOptions sched;
  explicit operator bool() const { return kernel != nullptr; }
};

// Parses the written form against the registry. On failure returns an empty choice and says why in *error.
KernelChoice parse_choice(const std::string& text, std::string* error);
// The written form: the bare name when the options are the defaults (@H8), else name@<raster><band>.
std::string choice_name(const KernelChoice& choice);

// True when the kernel computes this problem's dtypes and accumulation mode (any shape is fine).
bool kernel_matches(const KernelEntry& kernel, const ProblemKey& key);

// One kernel with the scheduler options the cost model chose for this call, and the model's estimate.
struct RankedKernel {
  KernelChoice choice;
  Estimate estimate;
};

// Every built kernel that computes the key (dtypes, accumulation, max M; with allow_workspace false, i.e. in
// CUDA-graph capture, no stream-K kernel), fastest predicted first. Kernels that would compute more than
// kMaxTileRatio times the tiles the problem needs (a cluster on an odd tile count) come after all others.
constexpr double kMaxTileRatio = 1.10;
std::vector<RankedKernel> rank_kernels(const ProblemKey& key, int sm_count, bool allow_workspace);

// What the default dispatch runs: the model's best kernel where the model predicts it at least kKernelAdvantage
// faster than torch._scaled_mm's row-wise path, else torch's (only where the caller says torch can take the call:
// bf16 output, e4m3 operands, per-row and per-column scales, no bias; and only while the torch backend is on).
// The margin covers the model's own error: in leave-one-weight-out on the tuning shapes its pick is 3-8% slower
// than the fastest measured kernel (geomean). Scored there (tools/tune.py --fit --report, "backstop"), a 6%
// advantage gave the fewest calls below 0.97x of torch without lowering the geomeans; handing torch only the calls
// where it is predicted faster left two to three times as many below 0.97x.
constexpr double kKernelAdvantage = 0.06;
struct Selection {
  KernelChoice choice;         // empty when torch runs the call or no built kernel computes it
  bool torch_rowwise = false;  // run torch._scaled_mm row-wise instead
  double predicted_us = -1.0;  // the model's time for `choice`
  double torch_predicted_us = -1.0;
};
Selection select_kernel(const ProblemKey& key, int sm_count, bool allow_workspace, bool torch_can_run);

// The backends the default dispatch may use: fp8ext's kernels always; torch._scaled_mm row-wise as the backstop
// unless turned off (set_torch_backstop: fp8ext.set_backends, and FP8EXT_BACKENDS through it at import).
void set_torch_backstop(bool enabled);
bool torch_backstop_enabled();

// True for the kernels that need a workspace (the stream-K ones).
bool needs_workspace(const KernelEntry& kernel);

// Process-wide override used by tests, tuning and debugging; an empty choice clears it.
void set_forced_kernel(const KernelChoice& choice);
KernelChoice forced_kernel();

std::string describe(const ProblemKey& key);

}  // namespace fp8ext::sm90
