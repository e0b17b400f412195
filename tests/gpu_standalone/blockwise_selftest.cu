// Standalone GPU self-test of the block-scaled kernels (csrc/sm90/blockwise/kernels/ and csrc/sm90/decode/bw_gemv_*.cu):
// no torch, no Python. Built and run by blockwise_selftest.sh beside it (under pytest:
// tests/test_blockwise_selftest.py); exits non-zero on any failure.
//
// For every registered kernel:
//   1. accuracy: fresh random e4m3 operands and positive scales in torch's layouts (scale_a [M, K/128] with strides
//      (1, M), scale_b [K/128, N/128] with strides (1, K/128)), with and without bias, on shapes that cover
//      M, N and K residues, against a float64 host reference of blockwise_gemm.h's formula. Bound per element:
//      |out - ref| <= 0.01 * max|ref| + 1e-6 (bf16 output rounds at 2^-9 relative; the fp8 products are exact
//      and the MMA's partial sums are promoted to fp32 once per 128-deep group).
//      Every element is checked, and a guard region past the output must stay untouched.
//   2. bit-exactness: small-integer fp8 values, power-of-two scales and integer bias, K <= 256; every partial sum
//      is an exactly representable integer, so the output must equal the exact value rounded once to the output
//      type.
//   3. timing: cudaEvent, median of 20 launches after warm-up, on the two model shapes (--no-timing skips it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sm90/blockwise/blockwise_gemm.h"

using namespace fp8ext::sm90;

#define CUDA_CHECK(x)                                                                                  \
  do {                                                                                                 \
    cudaError_t err_ = (x);                                                                            \
    if (err_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
      std::exit(2);                                                                                    \
    }                                                                                                  \
  } while (0)

#include "blockwise_selftest_problem.h"

namespace {

// ---- device side --------------------------------------------------------------------------------------------

struct DeviceBuffers {
  void* a = nullptr;
  void* b = nullptr;
  float* sa = nullptr;
  float* sb = nullptr;
  void* bias = nullptr;
  void* out = nullptr;
  size_t out_capacity = 0;
  void* ws = nullptr;
  size_t ws_capacity = 0;

  static void grow(void** p, size_t* cap, size_t bytes) {
    if (bytes <= *cap) return;
    if (*p) CUDA_CHECK(cudaFree(*p));
    CUDA_CHECK(cudaMalloc(p, bytes));
    *cap = bytes;
  }
  void free_inputs() {
    for (void* p : {a, b, static_cast<void*>(sa), static_cast<void*>(sb), bias}) {
      if (p) CUDA_CHECK(cudaFree(p));
    }
    a = b = bias = nullptr;
    sa = sb = nullptr;
  }
  void upload(const Problem& p) {
    free_inputs();
    CUDA_CHECK(cudaMalloc(&a, p.a.size()));
    CUDA_CHECK(cudaMalloc(&b, p.b.size()));
    CUDA_CHECK(cudaMalloc(&sa, p.sa.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&sb, p.sb.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&bias, static_cast<size_t>(p.N) * 4));
    CUDA_CHECK(cudaMemcpy(a, p.a.data(), p.a.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, p.b.data(), p.b.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(sa, p.sa.data(), p.sa.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(sb, p.sb.data(), p.sb.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
};

int g_sm_count = 0;
int g_device = 0;

BlockwiseParams make_params(const Problem& p, DeviceBuffers& d, bool with_bias) {
  BlockwiseParams prm;
  prm.M = p.M, prm.N = p.N, prm.K = p.K;
  prm.a = d.a, prm.lda = p.K;
  prm.b = d.b, prm.ldb = p.K;
  prm.out = d.out, prm.ldo = p.N;
  prm.scale_a = d.sa, prm.sa_stride_m = p.sa_stride_m, prm.sa_stride_g = p.sa_stride_g;
  prm.scale_b = d.sb, prm.sb_stride_g = p.sb_stride_g, prm.sb_stride_n = p.sb_stride_n;
  prm.bias = with_bias ? d.bias : nullptr;
  prm.device_id = g_device;
  prm.sm_count = g_sm_count;
  prm.stream = nullptr;
  return prm;
}

constexpr size_t kGuardBytes = 4096;

// Runs one kernel on the problem; out is pre-filled with 0xFF (NaN in every output type) so unwritten elements
// show, and a guard region after it must stay 0xFF. Returns false (and says why) on a launch error.
bool run_kernel(const BlockwiseKernelEntry& k, const Problem& p, DeviceBuffers& d, bool with_bias,
                std::vector<uint8_t>& host_out, std::string& why) {
  const OutType o = k.traits.out;
  const size_t bytes = static_cast<size_t>(p.M * p.N) * out_bytes(o);
  DeviceBuffers::grow(&d.out, &d.out_capacity, bytes + kGuardBytes);
  if (with_bias) {
    std::vector<uint8_t> bias(static_cast<size_t>(p.N) * out_bytes(o));
    for (int64_t j = 0; j < p.N; ++j) {
      uint32_t u = out_bits(o, p.bias[j]);
      std::memcpy(&bias[j * out_bytes(o)], &u, out_bytes(o));
    }
    CUDA_CHECK(cudaMemcpy(d.bias, bias.data(), bias.size(), cudaMemcpyHostToDevice));
  }
  CUDA_CHECK(cudaMemset(d.out, 0xFF, bytes + kGuardBytes));
  BlockwiseParams prm = make_params(p, d, with_bias);
  const size_t ws = k.workspace_size(prm);
  DeviceBuffers::grow(&d.ws, &d.ws_capacity, std::max<size_t>(ws, 256));
  prm.workspace = d.ws;
  prm.workspace_bytes = d.ws_capacity;
  LaunchResult r = k.launch(prm);
  if (!r.ok) {
    why = std::string(r.stage) + ": " + r.detail;
    return false;
  }
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "FATAL: %s: %s (the context is unusable; stopping)\n", k.name, cudaGetErrorString(err));
    std::exit(3);
  }
  host_out.resize(bytes + kGuardBytes);
  CUDA_CHECK(cudaMemcpy(host_out.data(), d.out, bytes + kGuardBytes, cudaMemcpyDeviceToHost));
  for (size_t i = bytes; i < bytes + kGuardBytes; ++i) {
    if (host_out[i] != 0xFF) {
      why = "wrote past the end of the output (guard byte " + std::to_string(i - bytes) + ")";
      return false;
    }
  }
  return true;
}

struct Stats {
  int cases = 0, failures = 0;
};

// Whether the kernel computes this M at all (the gemv: M <= 4); other M are not its cases.
bool computes(const BlockwiseKernelEntry& k, int64_t M) { return k.traits.max_m == 0 || M <= k.traits.max_m; }

// A case of the kernel, if it computes this M: runs it into `out` and counts it; false (a failure counted and
// printed, or not a case) when there is nothing to check.
bool run_case(const BlockwiseKernelEntry& k, const Problem& p, DeviceBuffers& d, bool with_bias, const char* tag,
              Stats& st, std::vector<uint8_t>& out) {
  if (!computes(k, p.M)) return false;
  ++st.cases;
  std::string why;
  if (run_kernel(k, p, d, with_bias, out, why)) return true;
  ++st.failures;
  std::printf("FAIL %-36s M=%-5lld N=%-5lld K=%-5lld bias=%d %s: %s\n", k.name, (long long)p.M, (long long)p.N,
              (long long)p.K, with_bias, tag, why.c_str());
  return false;
}

// Accuracy against the reference; prints one line per case.
void check_accuracy(const BlockwiseKernelEntry& k, const Problem& p, DeviceBuffers& d, bool with_bias,
                    const char* tag, Stats& st) {
  std::vector<uint8_t> out;
  if (!run_case(k, p, d, with_bias, tag, st, out)) return;
  const OutType o = k.traits.out;
  double max_ref = 0.0;
  std::vector<double> expect(static_cast<size_t>(p.M * p.N));
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.N; ++j) {
      double e = p.ref[i * p.N + j] + (with_bias ? static_cast<double>(round_to_out(o, p.bias[j])) : 0.0);
      expect[i * p.N + j] = e;
      max_ref = std::max(max_ref, std::fabs(e));
    }
  }
  const double tol = 0.01 * max_ref + 1e-6;
  double worst = 0.0;
  int64_t bad = 0, wi = 0, wj = 0;
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.N; ++j) {
      const double got = out_value(o, out.data(), static_cast<size_t>(i * p.N + j));
      const double err = std::fabs(got - expect[i * p.N + j]);
      if (!(err <= tol)) {  // also catches NaN
        if (bad == 0) wi = i, wj = j;
        ++bad;
      }
      const double rel = std::isnan(err) ? INFINITY : err / (max_ref > 0 ? max_ref : 1.0);
      if (rel > worst) worst = rel;
    }
  }
  if (bad) {
    ++st.failures;
    const double got = out_value(o, out.data(), static_cast<size_t>(wi * p.N + wj));
    std::printf("FAIL %-36s M=%-5lld N=%-5lld K=%-5lld bias=%d %s: %lld of %lld elements off, first (%lld, %lld) "
                "got %.6g want %.6g, tol %.3g, worst err/max|ref| %.3g\n",
                k.name, (long long)p.M, (long long)p.N, (long long)p.K, with_bias, tag, (long long)bad,
                (long long)(p.M * p.N), (long long)wi, (long long)wj, got, expect[wi * p.N + wj], tol, worst);
  } else {
    std::printf("ok   %-36s M=%-5lld N=%-5lld K=%-5lld bias=%d %s: worst err/max|ref| %.3g\n", k.name,
                (long long)p.M, (long long)p.N, (long long)p.K, with_bias, tag, worst);
  }
}

// Bit-exact comparison against the exact value rounded once to the output type.
void check_exact(const BlockwiseKernelEntry& k, const Problem& p, DeviceBuffers& d, bool with_bias, Stats& st) {
  std::vector<uint8_t> out;
  if (!run_case(k, p, d, with_bias, "exact", st, out)) return;
  const OutType o = k.traits.out;
  int64_t bad = 0;
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.N; ++j) {
      const double exact = p.ref[i * p.N + j] + (with_bias ? static_cast<double>(p.bias[j]) : 0.0);
      const float exact_f = static_cast<float>(exact);
      if (static_cast<double>(exact_f) != exact) {
        std::printf("FAIL exact case is not exact in fp32 (test bug)\n");
        std::exit(4);
      }
      const uint32_t want = out_bits(o, exact_f);
      uint32_t got = 0;
      std::memcpy(&got, out.data() + static_cast<size_t>(i * p.N + j) * out_bytes(o), out_bytes(o));
      if (got != want) {
        if (bad < 3) {
          std::printf("  mismatch %s (%lld, %lld): got %.9g want %.9g\n", k.name, (long long)i, (long long)j,
                      out_value(o, out.data(), static_cast<size_t>(i * p.N + j)), static_cast<double>(exact_f));
        }
        ++bad;
      }
    }
  }
  if (bad) {
    ++st.failures;
    std::printf("FAIL %-36s exact M=%lld N=%lld K=%lld bias=%d: %lld elements differ\n", k.name, (long long)p.M,
                (long long)p.N, (long long)p.K, with_bias, (long long)bad);
  } else {
    std::printf("ok   %-36s exact M=%lld N=%lld K=%lld bias=%d: bit-exact\n", k.name, (long long)p.M,
                (long long)p.N, (long long)p.K, with_bias);
  }
}

// ---- timing -------------------------------------------------------------------------------------------------

__global__ void fill_random_e4m3(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    // exponent field 4..9 (values 2^-3 .. 2^2), any mantissa and sign: finite, never NaN
    p[i] = static_cast<uint8_t>((x & 0x87u) | ((4u + (x >> 8) % 6u) << 3));
  }
}
__global__ void fill_const(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

// Holds the GPU for `ns` nanoseconds.
__global__ void gpu_sleep(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

void timing_table(const std::vector<BlockwiseKernelEntry>& kernels) {
  const int64_t Ms[] = {1, 16, 64, 128, 1024, 4096};
  const int64_t NKs[][2] = {{7168, 2048}, {18432, 7168}};
  std::printf("\n%-36s %6s %6s %6s %10s %9s\n", "kernel", "N", "K", "M", "median_us", "TFLOP/s");
  for (auto& nk : NKs) {
    const int64_t N = nk[0], K = nk[1], Mmax = 4096, G = ceil_div(K, kG), NB = ceil_div(N, kBN);
    uint8_t *a, *b;
    float *sa, *sb;
    void *bias, *out, *ws = nullptr;
    size_t ws_cap = 0;
    CUDA_CHECK(cudaMalloc(&a, Mmax * K));
    CUDA_CHECK(cudaMalloc(&b, N * K));
    CUDA_CHECK(cudaMalloc(&sa, Mmax * G * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&sb, G * NB * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&bias, N * 4));
    CUDA_CHECK(cudaMalloc(&out, Mmax * N * 4));
    fill_random_e4m3<<<1024, 256>>>(a, Mmax * K, 1234u);
    fill_random_e4m3<<<1024, 256>>>(b, N * K, 5678u);
    fill_const<<<256, 256>>>(sa, Mmax * G, 0.5f);
    fill_const<<<256, 256>>>(sb, G * NB, 0.25f);
    CUDA_CHECK(cudaMemset(bias, 0, N * 4));
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaEvent_t ev[21];
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
    for (int64_t M : Ms) {
      for (const auto& k : kernels) {
        BlockwiseParams prm;
        prm.M = M, prm.N = N, prm.K = K;
        prm.a = a, prm.lda = K, prm.b = b, prm.ldb = K, prm.out = out, prm.ldo = N;
        prm.scale_a = sa, prm.sa_stride_m = 1, prm.sa_stride_g = M;  // torch's layout for this M
        prm.scale_b = sb, prm.sb_stride_g = 1, prm.sb_stride_n = G;
        prm.bias = nullptr;
        prm.device_id = g_device, prm.sm_count = g_sm_count;
        const size_t need = k.workspace_size(prm);
        if (need > ws_cap) {
          if (ws) CUDA_CHECK(cudaFree(ws));
          CUDA_CHECK(cudaMalloc(&ws, need));
          ws_cap = need;
        }
        prm.workspace = ws, prm.workspace_bytes = ws_cap;
        bool ok = true;
        for (int w = 0; w < 5 && ok; ++w) ok = k.launch(prm).ok;
        // The GPU sleeps while the host queues the 20 timed launches, so each interval between consecutive events
        // is the kernel's GPU time (with its workspace setup), not the host's time to prepare the launch.
        constexpr int kRuns = 20;
        std::vector<float> us;
        if (ok) {
          gpu_sleep<<<1, 1>>>(20ull * 1000 * 1000);
          CUDA_CHECK(cudaEventRecord(ev[0]));
          for (int r = 0; r < kRuns && ok; ++r) {
            ok = k.launch(prm).ok;
            CUDA_CHECK(cudaEventRecord(ev[r + 1]));
          }
          CUDA_CHECK(cudaDeviceSynchronize());
          for (int r = 0; r < kRuns && ok; ++r) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev[r], ev[r + 1]));
            us.push_back(ms * 1000.0f);
          }
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        if (!ok) {
          std::printf("%-36s %6lld %6lld %6lld %10s %9s\n", k.name, (long long)N, (long long)K, (long long)M,
                      "n/a", "-");
          continue;
        }
        std::sort(us.begin(), us.end());
        const double med = 0.5 * (us[9] + us[10]);
        const double tflops = 2.0 * M * N * K / (med * 1e-6) / 1e12;
        std::printf("%-36s %6lld %6lld %6lld %10.1f %9.1f\n", k.name, (long long)N, (long long)K, (long long)M,
                    med, tflops);
      }
    }
    for (auto& e : ev) CUDA_CHECK(cudaEventDestroy(e));
    for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(sa), static_cast<void*>(sb),
                    bias, out}) {
      CUDA_CHECK(cudaFree(p));
    }
    if (ws) CUDA_CHECK(cudaFree(ws));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool skip_timing = argc > 1 && std::strcmp(argv[1], "--no-timing") == 0;
  CUDA_CHECK(cudaGetDevice(&g_device));
  CUDA_CHECK(cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, g_device));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, g_device));
  std::printf("device %d: %s, sm_%d%d, %d SMs\n", g_device, prop.name, prop.major, prop.minor, g_sm_count);
  if (prop.major != 9) {
    std::printf("FAIL: the kernels are compiled for sm_90a only\n");
    return 1;
  }

  const auto& kernels = all_blockwise_kernels();
  std::printf("%zu block-scaled kernels registered:", kernels.size());
  for (const auto& k : kernels) std::printf(" %s", k.name);
  std::printf("\n");
  if (kernels.empty()) {
    std::printf("FAIL: no kernel registered\n");
    return 1;
  }

  Stats st;
  DeviceBuffers d;
  const int64_t Ms[] = {1, 3, 16, 17, 64, 127, 128, 200, 1000};
  const int64_t NKs[][2] = {{256, 256}, {576, 7168}, {7168, 2048}, {4096, 7168 + 64}, {384, 512}};
  uint64_t seed = 20240601;
  for (auto& nk : NKs) {
    for (int64_t M : Ms) {
      Problem p = random_problem(M, nk[0], nk[1], ++seed, /*transposed_scales=*/false);
      compute_reference(p);
      d.upload(p);
      for (const auto& k : kernels) {
        check_accuracy(k, p, d, false, "torch-scales", st);
        check_accuracy(k, p, d, true, "torch-scales", st);
      }
    }
  }
  // Row-major scale tensors: the other stride direction of both scales, with M, N and K residues.
  for (int64_t M : {17, 200}) {
    Problem p = random_problem(M, 576, 2048 + 80, ++seed, /*transposed_scales=*/true);
    compute_reference(p);
    d.upload(p);
    for (const auto& k : kernels) check_accuracy(k, p, d, true, "rowmajor-scales", st);
  }
  // Bit-exact: small integers, power-of-two scales, K <= 256 (one whole and one partial group in the second).
  for (auto shape : {std::array<int64_t, 3>{4, 384, 256}, std::array<int64_t, 3>{5, 384, 256},
                     std::array<int64_t, 3>{130, 256, 144}}) {
    Problem p = integer_problem(shape[0], shape[1], shape[2], ++seed);
    compute_reference(p);
    d.upload(p);
    for (const auto& k : kernels) {
      check_exact(k, p, d, false, st);
      check_exact(k, p, d, true, st);
    }
  }
  d.free_inputs();

  std::printf("\n%d cases, %d failures\n", st.cases, st.failures);
  if (!skip_timing) timing_table(kernels);
  if (st.failures) {
    std::printf("SELFTEST FAILED\n");
    return 1;
  }
  std::printf("SELFTEST PASSED\n");
  return 0;
}
