"""Property-based fuzzing of the op over shapes, strides, offsets, dtypes and scale modes.

Property: a call either raises RuntimeError with an "fp8ext.scaled_mm: <argument>: ..." message, or returns a
result within the float64 bound. It never crashes, never returns NaN for finite inputs, never writes into its
inputs. On CPU this runs in CI; the `gpu` variant runs a bounded number of examples on the H200.
"""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fp8ext
from fp8ext.testing import check_against_reference

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


@st.composite
def calls(draw, device):
    # Mostly valid choices (so the result check runs often), with every kind of bad input mixed in.
    dim = st.sampled_from([16, 32, 48, 64, 80, 144, 16, 32, 64, 160, 0, 8, 40, 77])
    M, N, K = draw(st.integers(0, 70) | st.sampled_from([1, 17, 255])), draw(dim), draw(dim)
    a_dtype = draw(st.sampled_from([torch.float8_e4m3fn] * 6 + FP8 + [torch.bfloat16]))
    b_dtype = draw(st.sampled_from([torch.float8_e4m3fn] * 6 + [torch.float8_e5m2]))
    pad_a, off_a = draw(st.sampled_from([0, 0, 0, 16, 32, 8])), draw(st.sampled_from([0, 0, 0, 16, 4]))
    pad_b, off_b = draw(st.sampled_from([0, 0, 0, 16, 8])), draw(st.sampled_from([0, 0, 0, 16, 8]))
    layout_a = draw(st.sampled_from(["row"] * 6 + ["col"]))
    layout_b = draw(st.sampled_from(["col"] * 6 + ["row"]))
    # Tensor values come from a generator seeded by Hypothesis, so that a failing example replays with the same
    # numbers (torch's global RNG would give new ones on the replay and Hypothesis would call it flaky).
    gen = torch.Generator(device=device)
    gen.manual_seed(draw(st.integers(0, 2**63 - 1)))

    def operand(rows, cols, dtype, pad, off, layout):
        # A view of a bigger buffer: padded leading dimension and an element offset, row- or column-major.
        if layout == "row":
            buf = (torch.randn(rows * (cols + pad) + off + 1, device=device, generator=gen) * 2).to(dtype)
            return buf[off:off + rows * (cols + pad)].view(rows, cols + pad)[:, :cols]
        buf = (torch.randn(cols * (rows + pad) + off + 1, device=device, generator=gen) * 2).to(dtype)
        return buf[off:off + cols * (rows + pad)].view(cols, rows + pad)[:, :rows].t()

    a = operand(M, K, a_dtype, pad_a, off_a, layout_a)
    b = operand(K, N, b_dtype, pad_b, off_b, "row" if layout_b == "row" else "col")

    def scale(n, rows):
        kind = draw(st.sampled_from(["2d"] * 4 + ["1d", "scalar", "one", "wrong_len", "strided", "bf16"]))
        base = torch.rand(2 * n + 2, device=device, generator=gen) + 0.25
        if kind == "2d":
            return base[:n].reshape(n, 1) if rows else base[:n].reshape(1, n)
        if kind == "1d":
            return base[:n].contiguous()
        if kind == "scalar":
            return base[0].clone()
        if kind == "one":
            return base[:1].reshape(1, 1)
        if kind == "wrong_len":
            return base[:n + 1].reshape(n + 1, 1) if rows else base[:n + 1].reshape(1, n + 1)
        if kind == "strided":
            return base[: 2 * n : 2].reshape(n, 1) if rows else base[: 2 * n : 2].reshape(1, n)
        return base[:n].reshape(n, 1).bfloat16() if rows else base[:n].reshape(1, n).bfloat16()

    sa, sb = scale(M, True), scale(N, False)
    out_dtype = draw(st.sampled_from([None, None, torch.bfloat16, torch.float16, torch.float32] * 2 + [torch.int8]))
    bias_kind = draw(st.sampled_from(["none", "none", "ok", "ok", "wrong_dtype", "wrong_len"]))
    bias = None
    od = out_dtype or torch.bfloat16
    if bias_kind == "ok":
        bias = torch.randn(N, device=device, generator=gen).to(od if od.is_floating_point else torch.float32)
    elif bias_kind == "wrong_dtype":
        bias = torch.randn(N, device=device, generator=gen).to(torch.float32 if od != torch.float32 else torch.bfloat16)
    elif bias_kind == "wrong_len":
        bias = torch.randn(N + 16, device=device, generator=gen).to(od if od.is_floating_point else torch.float32)
    fast = draw(st.booleans())
    return a, b, sa, sb, bias, out_dtype, fast


def _fp8_bits(t):
    return t.view(torch.uint8).clone() if t.dtype in FP8 else t.clone()


def check_property(a, b, sa, sb, bias, out_dtype, fast):
    before = [_fp8_bits(t) for t in (a, b, sa, sb)]
    try:
        out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype, use_fast_accum=fast)
    except RuntimeError as e:
        msg = str(e).splitlines()[0]
        assert msg.startswith("fp8ext.scaled_mm: "), msg
        return
    assert all(torch.equal(x, _fp8_bits(t)) for x, t in zip(before, (a, b, sa, sb))), "an input was modified"
    assert out.shape == (a.shape[0], b.shape[1]) and out.dtype == (out_dtype or torch.bfloat16)
    if out.numel():
        check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=fast, what="fuzz")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(calls(device="cpu"))
def test_fuzz_cpu(call):
    check_property(*call)


@pytest.mark.gpu
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(calls(device="cuda"))
def test_fuzz_gpu(call):
    check_property(*call)
    torch.cuda.synchronize()
