// The table of a ctypes probe's entry points (probe_count, probe_name, and kVariants for its probe_run), shared by
// probe_blockwise_mainloop.cu and probe_rowwise_mainloop.cu. Include it in the probe's table translation unit,
// after PROBE_VARIANTS(X) (each X(index, name, ...)), probe::Call and probe::RunFn are defined; each variant's
// translation unit defines probe_run_<index>.
#pragma once

#define PROBE_DECLARE(I, NAME, ...) extern "C" int probe_run_##I(const probe::Call&, char*, int);
PROBE_VARIANTS(PROBE_DECLARE)

namespace {
struct Variant {
  const char* name;
  probe::RunFn run;
};
#define PROBE_ENTRY(I, NAME, ...) {#NAME, probe_run_##I},
const Variant kVariants[] = {PROBE_VARIANTS(PROBE_ENTRY)};
}  // namespace

extern "C" int probe_count() { return sizeof(kVariants) / sizeof(kVariants[0]); }
extern "C" const char* probe_name(int i) { return kVariants[i].name; }
