// Introspection and control of the CUDA build, used by python/fp8ext (kernel_names, force_kernel, selected_kernel,
// the autotuner's and the dispatch's scripts): internal ops without tensors, which need no GPU. The schemas are in
// schemas.cpp.
#include <iomanip>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/stable/library.h>

#include "ops/autotune_timing.h"
#include "ops/cuda_device.h"
#include "ops/scaled_mm_cuda.h"
#include "ops/sm90_launch.h"
#include "ops/torch_backstop.h"
#include "sm90/autotune/autotune.h"
#include "sm90/autotune/autotune_cache.h"
#include "sm90/dispatch/blockwise_dispatch.h"
#include "sm90/dispatch/cost_model.h"
#include "sm90/dispatch/dispatch.h"
#include "sm90/rowwise/kernel_registry.h"

namespace fp8ext {
namespace {

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const auto& k : sm90::all_kernels()) names.emplace_back(k.name);
  return names;
}

// The forced kernel's written form ("" when none), so that fp8ext.force_kernel can restore an outer block's.
std::string current_forced_kernel() {
  if (const sm90::BlockwiseKernelEntry* blockwise = sm90::forced_blockwise_kernel()) return blockwise->name;
  return sm90::choice_name(sm90::forced_kernel());
}

std::vector<std::string> blockwise_kernel_names() {
  std::vector<std::string> names;
  for (const auto& k : sm90::all_blockwise_kernels()) names.emplace_back(k.name);
  return names;
}

// The block-scaled kernel the dispatch runs for (M, N, K, out_dtype) with sm_count SMs ("" if none), or inside
// capture. `fits` and `residuals`: trial fits for tools/fit_blockwise_dispatch.py; fits are [a0, b0, a1, b1, ...]
// for the kernels of _blockwise_kernel_names in order, residuals [kernel index, log2 M, log2 N, log2 K, ln ratio,
// ...] (blockwise_dispatch.h); both empty for the compiled-in ones. Needs no GPU.
// torch_ok: the call is in torch's layouts with no bias (as the blockwise bench suite makes it), so that the
// backstop may take it where torch computes the shape and the output is bf16; "torch._scaled_mm" names that
// choice.
// Trial fits: the kernels', then torch's (two more numbers; its residuals have the index after the last kernel's),
// the margin (kernel_advantage) and the M above which the backstop is considered (negative: the compiled-in ones).
std::string selected_blockwise_kernel(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, int64_t sm_count,
                                      bool capturing, std::vector<double> fits, std::vector<double> residuals,
                                      bool torch_ok, double kernel_advantage, int64_t backstop_above_m) {
  if (const sm90::BlockwiseKernelEntry* forced = sm90::forced_blockwise_kernel()) return forced->name;
  const size_t kernels = sm90::all_blockwise_kernels().size();
  std::vector<std::vector<sm90::BlockwiseResidual>> trial_residuals(kernels + 1);  // the last: torch's
  FP8EXT_CHECK(residuals.size() % 5 == 0 && (residuals.empty() || !fits.empty()),
               "fp8ext._selected_blockwise_kernel: residuals come in fives, with trial fits");
  for (size_t i = 0; i < residuals.size(); i += 5) {
    const double at = residuals[i];
    FP8EXT_CHECK(at >= 0 && at <= double(kernels), "fp8ext._selected_blockwise_kernel: no kernel index ", at);
    trial_residuals[size_t(at)].push_back({float(residuals[i + 1]), float(residuals[i + 2]), float(residuals[i + 3]),
                                           float(residuals[i + 4])});
  }
  sm90::BlockwiseTrial trial{{}, sm90::torch_blockwise_fit()};
  if (!fits.empty()) {
    FP8EXT_CHECK(fits.size() == 2 * kernels || fits.size() == 2 * kernels + 2,
                 "fp8ext._selected_blockwise_kernel: expected two numbers per block-scaled kernel (", 2 * kernels,
                 "), and optionally two for torch, got ", fits.size());
    for (size_t i = 0; i < kernels; ++i) trial.kernels.push_back({fits[2 * i], fits[2 * i + 1], trial_residuals[i]});
    if (fits.size() == 2 * kernels + 2) {
      trial.torch = {fits[2 * kernels], fits[2 * kernels + 1], trial_residuals[kernels]};
    }
  }
  if (kernel_advantage >= 0) trial.kernel_advantage = kernel_advantage;
  if (backstop_above_m >= 0) trial.backstop_above_m = backstop_above_m;
  // Without trial fits, trial.kernels stays empty and the dispatch uses the compiled-in ones.
  const bool use_trial = !fits.empty() || kernel_advantage >= 0 || backstop_above_m >= 0;
  // Trial fits score the backstop on any torch (the fit runs anywhere); the compiled-in dispatch as calls meet it.
  const bool torch_can_run = torch_ok && (use_trial || torch_blockwise_backstop_usable());
  const sm90::BlockwiseSelection s =
      sm90::select_blockwise_kernel(M, N, K, to_out_type(out_dtype), static_cast<int>(sm_count), !capturing,
                                    torch_can_run, use_trial ? &trial : nullptr);
  if (s.torch_blockwise) return "torch._scaled_mm";
  return s.kernel != nullptr ? s.kernel->name : "";
}

// The serial work per SM, in MACs, that the dispatch's time model gives the named block-scaled kernel (0 for a
// decode kernel) or torch._scaled_mm (the backstop), and its compiled-in fit: [W, a, b]. For
// tools/fit_blockwise_dispatch.py.
std::vector<double> blockwise_work_and_fit(std::string name, int64_t M, int64_t N, int64_t K, int64_t sm_count) {
  if (name == "torch._scaled_mm") {  // the backstop, as the dispatch models it
    const sm90::BlockwiseFit f = sm90::torch_blockwise_fit();
    return {sm90::blockwise_work(sm90::torch_blockwise_traits(), M, N, K, static_cast<int>(sm_count)), f.a_us,
            f.b_us_per_mac};
  }
  const sm90::BlockwiseKernelEntry* k = sm90::find_blockwise_kernel(name);
  FP8EXT_CHECK(k != nullptr, "fp8ext._blockwise_work: no block-scaled kernel '", name, "' in this build");
  const sm90::BlockwiseFit f = sm90::blockwise_fit(*k);
  return {sm90::blockwise_work(k->traits, M, N, K, static_cast<int>(sm_count)), f.a_us, f.b_us_per_mac};
}

// `name` is a kernel's name, optionally with scheduler options ("...@N4", dispatch.h); "" clears it.
// Process-wide: every thread's calls see it (python/fp8ext/ops.py, force_kernel).
void force_kernel(std::string name) {
  sm90::set_forced_kernel({});
  sm90::set_forced_blockwise_kernel(nullptr);
  if (name.empty()) return;
  if (const sm90::BlockwiseKernelEntry* blockwise = sm90::find_blockwise_kernel(name)) {
    sm90::set_forced_blockwise_kernel(blockwise);
    return;
  }
  std::string error;
  const sm90::KernelChoice choice = sm90::parse_choice(name, &error);
  FP8EXT_CHECK(choice, "fp8ext.force_kernel: ", error, "; fp8ext.kernel_names() lists the kernels");
  sm90::set_forced_kernel(choice);
}

// A number for the introspection ops' text lines, with every digit a double holds.
std::string num(double x) {
  std::ostringstream os;
  os << std::setprecision(17) << x;
  return os.str();
}

// The written form of what the default dispatch runs; "torch._scaled_mm" for the backstop. torch_ok says whether
// torch could take the call (the Python side decides it from the arguments it was given).
std::string selection_name(const sm90::Selection& s) {
  return s.torch_rowwise ? "torch._scaled_mm" : sm90::choice_name(s.choice);
}

std::string selected_kernel(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, bool use_fast_accum,
                            ScalarType a_dtype, bool capturing, bool torch_ok) {
  const sm90::ProblemKey key = problem_key(M, N, K, out_dtype, use_fast_accum, a_dtype, ScalarType::Float8_e4m3fn);
  // As torch_can_run: torch's row-wise path takes bf16 output and e4m3 operands only.
  torch_ok = torch_ok && out_dtype == ScalarType::BFloat16 && a_dtype == ScalarType::Float8_e4m3fn;
  if (!cuda_available()) {  // a CUDA build on a machine without a GPU: what an H200 would run
    if (const sm90::KernelChoice c = sm90::forced_kernel()) return sm90::choice_name(c);
    return selection_name(sm90::select_kernel(key, 132, /*allow_workspace=*/!capturing, torch_ok));
  }
  return selection_name(chosen_kernel(key, device_properties(current_device()), capturing, torch_ok));
}

// The SM count of the current device, or an H200's 132 without a GPU.
int sm_count() { return cuda_available() ? device_properties(current_device()).multiProcessorCount : 132; }

// The cost model's ranking of every built kernel that computes the call, fastest predicted first, as
// "name@options predicted_us tile_ratio calibrated" lines; the last line is torch's row-wise estimate.
std::vector<std::string> rank_kernels(int64_t M, int64_t N, int64_t K, ScalarType out_dtype, bool use_fast_accum,
                                      ScalarType a_dtype, bool capturing) {
  const sm90::ProblemKey key = problem_key(M, N, K, out_dtype, use_fast_accum, a_dtype, ScalarType::Float8_e4m3fn);
  const int sms = sm_count();
  std::vector<std::string> lines;
  for (const sm90::RankedKernel& r : sm90::rank_kernels(key, sms, /*allow_workspace=*/!capturing)) {
    lines.push_back(sm90::choice_name(r.choice) + " " + num(r.estimate.us) + " " + num(r.estimate.tile_ratio()) +
                    " " + (r.estimate.calibrated ? "1" : "0"));
  }
  const double torch_us =
      sm90::torch_rowwise_estimate({M, N, K, out_dtype == ScalarType::Float ? 4 : 2, sms}, key.accum);
  lines.push_back("torch._scaled_mm " + num(torch_us) + " 1 " + (torch_us > 0 ? "1" : "0"));
  return lines;
}

// Every registered kernel's traits, one "name schedule tm tn tk cm cn accum out in_a swap promotion overlap max_m
// workspace" line each, so that a test can hold them against python/fp8ext/kernel_manifest.json.
std::vector<std::string> kernel_traits() {
  std::vector<std::string> lines;
  for (const auto& k : sm90::all_kernels()) {
    const sm90::KernelTraits& t = k.traits;
    std::string line = std::string(k.name) + " " + sm90::to_string(t.schedule);
    for (int v : {t.tile_m, t.tile_n, t.tile_k, t.cluster_m, t.cluster_n}) line += " " + std::to_string(v);
    line += std::string(" ") + sm90::to_string(t.accum) + " " + sm90::to_string(t.out) + " " +
            (t.any_in_a ? "any" : sm90::to_string(t.in_a)) + " " + (t.swap_ab ? "1" : "0") + " " +
            std::to_string(t.accum == sm90::Accum::kPrecise && t.schedule != sm90::Schedule::kGemv
                               ? t.promotion_interval : 0) +
            " " + (t.overlap ? "1" : "0") + " " + std::to_string(t.max_m) + " " +
            (sm90::needs_workspace(k) ? "1" : "0");
    lines.push_back(line);
  }
  return lines;
}

// The cost model's terms (f1, f2, f3, tiles needed, tiles computed, rounds, K iterations) for a kernel in its
// written form (with its scheduler options), or for "torch._scaled_mm", on this device's SM count (132 without a
// GPU). tools/tune.py records them beside each measurement and fits the coefficients on them.
std::vector<double> cost_terms(std::string choice, int64_t M, int64_t N, int64_t K, ScalarType out_dtype) {
  const sm90::CostProblem p{M, N, K, out_dtype == ScalarType::Float ? 4 : 2, sm_count()};
  sm90::CostTerms f;
  if (choice == "torch._scaled_mm") {
    f = sm90::cost_terms(sm90::torch_rowwise_traits(), p, sm90::SchedulerOptions{sm90::Raster::kHeuristic, 1});
  } else {
    std::string error;
    const sm90::KernelChoice c = sm90::parse_choice(choice, &error);
    FP8EXT_CHECK(c, "fp8ext: ", error);
    f = sm90::cost_terms(c.kernel->traits, p, c.sched);
  }
  return {f.f1, f.f2, f.f3, double(f.tiles_needed), double(f.tiles_computed), double(f.rounds), double(f.kiters)};
}

// The fitted coefficient rows compiled in: "name c0 c1 c2 c3" each.
std::vector<std::string> cost_coefficients() {
  std::vector<std::string> lines;
  for (const auto& r : sm90::coefficient_rows()) {
    lines.push_back(std::string(r.name) + " " + num(r.c.c0) + " " + num(r.c.c1) + " " + num(r.c.c2) + " " +
                    num(r.c.c3));
  }
  return lines;
}

void set_backends(std::string backends) {
  FP8EXT_CHECK(backends == "fp8ext" || backends == "fp8ext,torch", "fp8ext: backends must be 'fp8ext' or "
              "'fp8ext,torch', got '", backends, "'");
  sm90::set_torch_backstop(backends == "fp8ext,torch");
}

std::string backends() { return sm90::torch_backstop_enabled() ? "fp8ext,torch" : "fp8ext"; }

void set_software_key(std::string key) {
  store_software_key(key);
  set_torch_blockwise_measured(key.find("/torch2.11.") != std::string::npos);
}

void autotune_configure(bool enabled, std::string cache_file, std::vector<std::string> buckets,
                        std::vector<std::string> kernels) {
  FP8EXT_CHECK(buckets.size() == kernels.size(), "fp8ext.autotune: ", buckets.size(), " buckets but ",
              kernels.size(), " kernel names");
  std::vector<std::pair<std::string, std::string>> entries;
  for (size_t i = 0; i < buckets.size(); ++i) entries.emplace_back(buckets[i], kernels[i]);
  sm90::autotune_configure(enabled, cache_file, entries);
}

// (bucket, kernel) pairs flattened: [bucket0, kernel0, bucket1, kernel1, ...].
std::vector<std::string> autotune_entries() { return sm90::flatten_entries(sm90::autotune_entries()); }

}  // namespace

// They take no tensors: CompositeExplicitAutograd serves every call.
STABLE_TORCH_LIBRARY_IMPL(fp8ext, CompositeExplicitAutograd, m) {
  m.impl("_kernel_names", TORCH_BOX(&kernel_names));
  m.impl("_force_kernel", TORCH_BOX(&force_kernel));
  m.impl("_forced_kernel", TORCH_BOX(&current_forced_kernel));
  m.impl("_selected_kernel", TORCH_BOX(&selected_kernel));
  m.impl("_rank_kernels", TORCH_BOX(&rank_kernels));
  m.impl("_kernel_traits", TORCH_BOX(&kernel_traits));
  m.impl("_cost_terms", TORCH_BOX(&cost_terms));
  m.impl("_cost_coefficients", TORCH_BOX(&cost_coefficients));
  m.impl("_set_backends", TORCH_BOX(&set_backends));
  m.impl("_backends", TORCH_BOX(&backends));
  m.impl("_set_software_key", TORCH_BOX(&set_software_key));
  m.impl("_autotune_configure", TORCH_BOX(&autotune_configure));
  m.impl("_autotune_entries", TORCH_BOX(&autotune_entries));
  m.impl("_blockwise_kernel_names", TORCH_BOX(&blockwise_kernel_names));
  m.impl("_selected_blockwise_kernel", TORCH_BOX(&selected_blockwise_kernel));
  m.impl("_blockwise_work", TORCH_BOX(&blockwise_work_and_fit));
}

}  // namespace fp8ext
