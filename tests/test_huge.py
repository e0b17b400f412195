"""Shapes past 32-bit element indices: outputs with M*N >= 2^31 elements and activations with M*K >= 2^31 bytes.

Two kinds of check: structured inputs with a closed-form answer, compared on every element (in chunks on the
GPU), and random inputs compared against float64 on sampled rows, the last rows always included.
"""
import pytest
import torch

import fp8ext
from fp8ext.testing import check_against_reference, random_operands

pytestmark = pytest.mark.gpu
DEV = "cuda"


def pow2_scales(n, shape, offset):
    # Exact in fp32, and products with small integers stay exact: the answer is known bit for bit.
    return torch.exp2((torch.arange(n, device=DEV) + offset) % 7 - 3.0).reshape(shape)


@pytest.mark.parametrize("route", ["large", "swap"])
def test_output_beyond_2_31_elements_closed_form(route):
    # out[i, j] = K * sa[i] * sb[j]: a and b all ones, exact in every output dtype used here.
    M, N, K = (65536, 32768, 32) if route == "large" else (64, 2**25 + 16, 16)
    assert M * N >= 2**31
    a = torch.ones(M, K, device=DEV, dtype=torch.float8_e4m3fn)
    b = torch.ones(N, K, device=DEV, dtype=torch.float8_e4m3fn).t()
    sa, sb = pow2_scales(M, (M, 1), 0), pow2_scales(N, (1, N), 3)
    out = fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    rows = max(1, 2**28 // N)
    for i in range(0, M, rows):
        expected = (K * sa[i:i + rows] * sb).to(torch.bfloat16)
        assert torch.equal(out[i:i + rows], expected), f"rows {i}..{i + rows}"
    del out


def check_sampled_rows(M, N, K, what):
    """Random inputs; 48 random rows and the last 16 rows checked against float64, fast and precise."""
    a, b, sa, sb = random_operands(M, N, K, device=DEV)
    for fast in (True, False):
        out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)
        idx = torch.cat([torch.randint(0, M, (48,), device=DEV), torch.arange(M - 16, M, device=DEV)])
        check_against_reference(out[idx], a[idx], b, sa[idx], sb, use_fast_accum=fast, what=f"{what} fast={fast}")
        del out


def test_output_beyond_2_31_elements_random_sampled():
    check_sampled_rows(65536, 32768, 128, "M*N >= 2^31")


def test_activation_beyond_2_31_bytes():
    M, K = 131072, 16384 + 16
    assert M * K >= 2**31
    check_sampled_rows(M, 256, K, "M*K >= 2^31")
