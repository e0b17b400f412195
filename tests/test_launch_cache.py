"""The row-wise kernels' kept launch parameters (csrc/sm90/common/launch_cache.cuh): a call whose addresses, sizes
and scale pointers repeat an earlier call's launches with that call's parameters, so it must compute from what is
at those addresses now. Each case runs a kernel (forced) on a call, changes the data behind the same addresses
(and lets the output take the freed output's address), and checks the result against the same kernel on copies at
fresh addresses, bit for bit; and a call that differs only in its sizes at the same addresses."""
import pytest
import torch

import fp8ext
from fp8ext.testing import random_operands

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or not fp8ext.kernel_names(),
                                 reason="needs an sm_90 GPU (H100/H200) and a CUDA build of fp8ext")]
BF16 = torch.bfloat16
KERNELS = ["swap_pp_64x32x128_c1x1_fast_bf16", "pp_64x128x128_c1x1_precise_bf16", "coop_128x128x128_c1x2_precise_bf16",
           "swap_pp_64x128x128_c2x1_ov_precise_bf16"]


def run(a, b, sa, sb, fast):
    with torch.no_grad():
        return torch.ops.fp8ext.scaled_mm(a, b, sa, sb, None, BF16, fast)


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_repeated_call_reads_the_data_now_at_its_addresses(kernel):
    if kernel not in fp8ext.kernel_names():
        pytest.skip(f"{kernel} is not in this build")
    fast = "_fast_" in kernel
    M, N, K = 96, 1024, 512
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    with fp8ext.force_kernel(kernel):
        first = run(a, b, sa, sb, fast)
        first_values, first_address = first.clone(), first.data_ptr()
        del first  # the next output of this size takes its address
        fresh = random_operands(M, N, K, device="cuda")
        for old, new in zip((a, b, sa, sb), fresh):
            old.copy_(new)
        again = run(a, b, sa, sb, fast)
        assert again.data_ptr() == first_address  # every address as the first call's: its parameters are reused
        elsewhere = run(*(t.clone() for t in (a, b, sa, sb)), fast)  # new addresses: parameters made afresh
        assert torch.equal(again, elsewhere) and not torch.equal(again, first_values)
        # fewer rows of the same a (same address), the same b and scales: sizes differ, parameters made afresh
        rows = run(a[:40], b, sa[:40], sb, fast)
        assert torch.equal(rows, elsewhere[:40])
