// The cluster split-K decode kernel (cluster_splitk_decode.cuh) with 128-row weight tiles, bf16 output, e4m3
// activations, fast accumulation: one compiled kernel per token tile (16, 32, 64, 128), registered once per
// cluster size S (the number of K slices); the dispatch table carries the measured best per shape.
#include "sm90/cluster_splitk_decode.cuh"

namespace {
using fp8ext::sm90::cluster_splitk::register_variant;
const bool kRegistered = register_variant<128, 1, 2>("gemv_csk_m128_r128_s2_fast_bf16") &&
                         register_variant<128, 1, 4>("gemv_csk_m128_r128_s4_fast_bf16") &&
                         register_variant<128, 1, 8>("gemv_csk_m128_r128_s8_fast_bf16") &&
                         register_variant<128, 2, 1>("gemv_csk_m128_r128_o2_s1_fast_bf16") &&
                         register_variant<128, 2, 2>("gemv_csk_m128_r128_o2_s2_fast_bf16") &&
                         register_variant<128, 2, 4>("gemv_csk_m128_r128_o2_s4_fast_bf16");
}  // namespace
