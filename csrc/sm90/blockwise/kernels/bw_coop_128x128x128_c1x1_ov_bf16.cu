// One block-scaled kernel per translation unit (each takes minutes to compile); see blockwise_gemm.cuh.
#include "sm90/blockwise/blockwise_gemm.cuh"

namespace {
using Config = ::fp8ext::sm90::BlockwiseConfig<128, 128, 128, 1, 1, ::fp8ext::sm90::Schedule::kCooperative,
                                               ::fp8ext::sm90::OutType::kBF16, false, true>;
}

FP8EXT_SM90_BLOCKWISE_KERNEL("bw_coop_128x128x128_c1x1_ov_bf16", Config)
