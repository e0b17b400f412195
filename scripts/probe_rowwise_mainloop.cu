// Variants of the row-wise overlapped (precise) kernels' mainloop, built outside the library and called through
// ctypes by scripts/probe_rowwise_mainloop.py, which times them in one process, in the same turns, next to the
// library's kernels (forced) and torch._scaled_mm with use_fast_accum=False (cuBLASLt). Nothing here includes
// libtorch; each variant is sm90/rowwise/rowwise_gemm.cuh's kernel for one KernelConfig with its mainloop swapped.
//
// Each variant is one translation unit: compile this file once per PROBE_VARIANT (0..kVariants-1) with
// -DPROBE_VARIANT=i -DPROBE_PART, and once without PROBE_PART for the table of entry points:
//
//   for i in $(seq 0 5); do nvcc <the library's NVCC_FLAGS> -Icsrc -I<cutlass>/include -Xcompiler -fPIC \
//       -DPROBE_PART -DPROBE_VARIANT=$i -c scripts/probe_rowwise_mainloop.cu -o v$i.o & done; wait
//   nvcc <flags> -Icsrc ... -Xcompiler -fPIC -c scripts/probe_rowwise_mainloop.cu -o table.o
//   nvcc -shared v*.o table.o -o probe_rowwise_mainloop.so
//
// The mainloops:
//   lib     the library's (sm90/rowwise/overlap_promotion_mainloop.cuh): tile t+1's four wgmmas, the wait, tile t's adds
//   halves  two of tile t+1's wgmmas, the wait, tile t's adds, the other two: the block-scaled loop's order
//           (sm90/blockwise/overlap_blockwise_mainloop.cuh), which ran 2-7% faster than four-then-fold there
#include <cstdint>
#include <cstdio>

#include "sm90/common/gemm_params.h"

namespace probe {
struct Call {
  const void* a;
  const void* b;
  const float* sa;
  const float* sb;
  void* out;
  int64_t M, N, K;
  void* workspace;
  size_t workspace_bytes;
  int sm_count;
  void* stream;
};
using RunFn = int (*)(const Call&, char* err, int err_len);
}  // namespace probe

// index, name, tile M, N, cluster M, N, schedule, swap_ab, mainloop (a template of CUTLASS's collective, below).
// The names are the library's kernel of the same configuration, then the mainloop.
#define PROBE_VARIANTS(X)                                                                          \
  X(0, coop_128x128x128_c1x2_ov_precise_bf16.lib, 128, 128, 1, 2, kCooperative, false, Library)     \
  X(1, coop_128x128x128_c1x2_ov_precise_bf16.halves, 128, 128, 1, 2, kCooperative, false, Halves)   \
  X(2, pp_64x128x128_c1x1_ov_precise_bf16.lib, 64, 128, 1, 1, kPingpong, false, Library)            \
  X(3, pp_64x128x128_c1x1_ov_precise_bf16.halves, 64, 128, 1, 1, kPingpong, false, Halves)          \
  X(4, swap_pp_64x64x128_c1x1_ov_precise_bf16.lib, 64, 64, 1, 1, kPingpong, true, Library)          \
  X(5, swap_pp_64x64x128_c1x1_ov_precise_bf16.halves, 64, 64, 1, 1, kPingpong, true, Halves)
#define PROBE_CAT_(a, b) a##b
#define PROBE_CAT(a, b) PROBE_CAT_(a, b)

#ifdef PROBE_PART
#include "sm90/rowwise/rowwise_gemm.cuh"

namespace probe {
using namespace fp8ext::sm90;

// The library's loop with each tile's wgmmas in two halves around the previous tile's adds: the block-scaled
// loop's schedule (overlap::HalfTiles) with the row-wise Promotion.
template <class Base> using Halves = overlap::OverlappedMainloop<Base, overlap::HalfTiles, overlap::AddPartial>;
template <class Base> using Library = OverlapPromotionMainloop<Base>;

// The library's RowwiseGemm<Config> with the mainloop Wrap<CUTLASS's collective>.
template <class Config, template <class> class Wrap>
struct ProbeGemm {
  using G = RowwiseGemm<Config>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                      Wrap<typename G::CutlassMainloop>, typename G::CollectiveEpilogue,
                                                      typename G::TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static int run(const Call& c, char* err, int err_len) {
    GemmParams p;
    p.M = c.M, p.N = c.N, p.K = c.K;
    p.a = c.a, p.lda = c.K, p.b = c.b, p.ldb = c.K, p.out = c.out, p.ldo = c.N;
    p.scale_a = c.sa, p.scale_b = c.sb;
    p.sm_count = c.sm_count;
    cudaGetDevice(&p.device_id);
    const auto a = G::arguments(p);
    const typename Gemm::Arguments args{a.mode, a.problem_shape, a.mainloop, a.epilogue, a.hw_info, a.scheduler};
    const LaunchResult r = run_gemm<Gemm>(args, c.workspace, c.workspace_bytes, static_cast<cudaStream_t>(c.stream));
    if (!r.ok) snprintf(err, err_len, "%s: %s", r.stage, r.detail);
    return r.ok ? 0 : 1;
  }
};

template <int I> struct Selected;
#define PROBE_SELECT(I, NAME, TM, TN, CM, CN, SCHED, SWAP, WRAP)                                                  \
  template <> struct Selected<I> {                                                                                \
    using Gemm = ProbeGemm<KernelConfig<TM, TN, 128, CM, CN, Schedule::SCHED, Accum::kPrecise, OutType::kBF16,     \
                                        SWAP, InType::kE4M3, 4, true>,                                            \
                           WRAP>;                                                                                 \
  };
PROBE_VARIANTS(PROBE_SELECT)
}  // namespace probe
extern "C" int PROBE_CAT(probe_run_, PROBE_VARIANT)(const probe::Call& c, char* e, int n) {
  return probe::Selected<PROBE_VARIANT>::Gemm::run(c, e, n);
}

#else  // the table of entry points

#include "probe_table.h"

// The call's fields in Call's order, so that ctypes passes plain arguments.
extern "C" int probe_run(int i, const void* a, const void* b, const float* sa, const float* sb, void* out, int64_t M,
                         int64_t N, int64_t K, void* workspace, size_t workspace_bytes, int sm_count, void* stream,
                         char* err, int err_len) {
  const probe::Call c{a, b, sa, sb, out, M, N, K, workspace, workspace_bytes, sm_count, stream};
  return kVariants[i].run(c, err, err_len);
}
#endif
