// The standalone block-wise self-test's problems (blockwise_selftest.cu): host conversions of the elements, and one
// problem's operands, scales and float64 reference on the host, in torch's layouts. Included by that file alone.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "sm90/blockwise/blockwise_gemm.h"

namespace {

using namespace fp8ext::sm90;

constexpr int kG = kBlockwiseGroupK;
constexpr int kBN = kBlockwiseBlockN;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- host element conversions -------------------------------------------------------------------------------

uint8_t to_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }

double e4m3_value(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xF, man = v & 0x7;
  double mag;
  if (exp == 0xF && man == 0x7) return std::nan("");  // e4m3fn has no inf; S.1111.111 is NaN
  if (exp == 0) {
    mag = std::ldexp(man / 8.0, -6);
  } else {
    mag = std::ldexp(1.0 + man / 8.0, exp - 7);
  }
  return sign ? -mag : mag;
}

size_t out_bytes(OutType o) { return o == OutType::kFP32 ? 4 : 2; }

// The value stored for `x` in the output type (round to nearest even), as raw bits.
uint32_t out_bits(OutType o, float x) {
  if (o == OutType::kFP32) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  }
  if (o == OutType::kBF16) {
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
  }
  __half h = __float2half_rn(x);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

double out_value(OutType o, const void* base, size_t idx) {
  if (o == OutType::kFP32) return static_cast<const float*>(base)[idx];
  uint16_t u;
  std::memcpy(&u, static_cast<const uint8_t*>(base) + 2 * idx, 2);
  if (o == OutType::kBF16) {
    __nv_bfloat16 h;
    std::memcpy(&h, &u, 2);
    return __bfloat162float(h);
  }
  __half h;
  std::memcpy(&h, &u, 2);
  return __half2float(h);
}

float round_to_out(OutType o, float x) {
  if (o == OutType::kFP32) return x;
  if (o == OutType::kBF16) return __bfloat162float(__float2bfloat16_rn(x));
  return __half2float(__float2half_rn(x));
}

// ---- one problem: operands and scales on the host, in torch's layouts ---------------------------------------

struct Problem {
  int64_t M = 0, N = 0, K = 0;
  std::vector<uint8_t> a;  // [M, K] row-major, lda = K
  std::vector<uint8_t> b;  // b(k, j) at j * K + k, ldb = K
  std::vector<float> sa, sb;
  int64_t sa_stride_m = 1, sa_stride_g = 0, sb_stride_g = 1, sb_stride_n = 0;
  std::vector<float> bias;  // N values, before rounding to the output type
  std::vector<double> ref;  // [M, N], without bias

  int64_t groups() const { return ceil_div(K, kG); }
  int64_t nblocks() const { return ceil_div(N, kBN); }
  float scale_a(int64_t i, int64_t g) const { return sa[i * sa_stride_m + g * sa_stride_g]; }
  float scale_b(int64_t g, int64_t h) const { return sb[g * sb_stride_g + h * sb_stride_n]; }
};

// torch's layouts (column-major scale tensors) unless transposed_scales: then scale_a [M, G] with strides (G, 1)
// and scale_b [G, NB] with strides (NB, 1), so both stride directions are exercised.
void set_scale_layout(Problem& p, bool transposed_scales) {
  const int64_t G = p.groups(), NB = p.nblocks();
  if (!transposed_scales) {
    p.sa_stride_m = 1, p.sa_stride_g = p.M;
    p.sb_stride_g = 1, p.sb_stride_n = G;
  } else {
    p.sa_stride_m = G, p.sa_stride_g = 1;
    p.sb_stride_g = NB, p.sb_stride_n = 1;
  }
  p.sa.assign(static_cast<size_t>(p.M * G), 0.0f);
  p.sb.assign(static_cast<size_t>(G * NB), 0.0f);
}

Problem random_problem(int64_t M, int64_t N, int64_t K, uint64_t seed, bool transposed_scales) {
  Problem p;
  p.M = M, p.N = N, p.K = K;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::uniform_real_distribution<float> log2_scale(-4.0f, 2.0f);
  p.a.resize(static_cast<size_t>(M * K));
  p.b.resize(static_cast<size_t>(N * K));
  for (auto& v : p.a) v = to_e4m3(normal(rng));
  for (auto& v : p.b) v = to_e4m3(normal(rng));
  set_scale_layout(p, transposed_scales);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t g = 0; g < p.groups(); ++g) p.sa[i * p.sa_stride_m + g * p.sa_stride_g] = std::exp2(log2_scale(rng));
  for (int64_t g = 0; g < p.groups(); ++g)
    for (int64_t h = 0; h < p.nblocks(); ++h) p.sb[g * p.sb_stride_g + h * p.sb_stride_n] = std::exp2(log2_scale(rng));
  p.bias.resize(static_cast<size_t>(N));
  for (auto& v : p.bias) v = normal(rng) * 4.0f;
  return p;
}

// Small integers and powers of two: every product, partial sum and scaled sum is exact in fp32.
Problem integer_problem(int64_t M, int64_t N, int64_t K, uint64_t seed) {
  Problem p;
  p.M = M, p.N = N, p.K = K;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> val(-4, 4), exp2i(-2, 2), bias(-8, 8);
  p.a.resize(static_cast<size_t>(M * K));
  p.b.resize(static_cast<size_t>(N * K));
  for (auto& v : p.a) v = to_e4m3(static_cast<float>(val(rng)));
  for (auto& v : p.b) v = to_e4m3(static_cast<float>(val(rng)));
  set_scale_layout(p, false);
  for (auto& v : p.sa) v = std::ldexp(1.0f, exp2i(rng));
  for (auto& v : p.sb) v = std::ldexp(1.0f, exp2i(rng));
  p.bias.resize(static_cast<size_t>(N));
  for (auto& v : p.bias) v = static_cast<float>(bias(rng));
  return p;
}

// The float64 reference of blockwise_gemm.h, without bias:
//   ref[i, j] = sum_g scale_a(i, g) * scale_b(g, j / 128) * sum_{k in group g} a[i, k] * b[k, j]
void compute_reference(Problem& p) {
  const int64_t M = p.M, N = p.N, K = p.K, G = p.groups();
  std::vector<double> lut(256);
  for (int v = 0; v < 256; ++v) lut[v] = e4m3_value(static_cast<uint8_t>(v));
  std::vector<double> ad(static_cast<size_t>(M * K)), bd(static_cast<size_t>(N * K));
  for (size_t i = 0; i < ad.size(); ++i) ad[i] = lut[p.a[i]];
  for (size_t i = 0; i < bd.size(); ++i) bd[i] = lut[p.b[i]];
  p.ref.assign(static_cast<size_t>(M * N), 0.0);

  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const double* ai = &ad[i * K];
      for (int64_t j = 0; j < N; ++j) {
        const double* bj = &bd[j * K];
        double acc = 0.0;
        for (int64_t g = 0; g < G; ++g) {
          const int64_t k0 = g * kG, k1 = std::min(K, k0 + kG);
          double s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // four chains, so the adds pipeline
          int64_t k = k0;
          for (; k + 4 <= k1; k += 4) {
            s0 += ai[k] * bj[k];
            s1 += ai[k + 1] * bj[k + 1];
            s2 += ai[k + 2] * bj[k + 2];
            s3 += ai[k + 3] * bj[k + 3];
          }
          for (; k < k1; ++k) s0 += ai[k] * bj[k];
          acc += static_cast<double>(p.scale_a(i, g)) * static_cast<double>(p.scale_b(g, j / kBN)) *
                 ((s0 + s1) + (s2 + s3));
        }
        p.ref[i * N + j] = acc;
      }
    }
  };
  const int64_t nthreads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), M));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < nthreads; ++t) {
    pool.emplace_back(rows, M * t / nthreads, M * (t + 1) / nthreads);
  }
  for (auto& th : pool) th.join();
}

}  // namespace
