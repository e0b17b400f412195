"""fp8ext.silu_mul_quantize_rowwise: quantize_rowwise(silu(gate) * up) of x [M, 2I] in one op. On CPU it is those
three torch ops; its errors, opcheck and torch.compile; on an sm_90 GPU, the fused kernel against the three ops run
by torch on the GPU, bit for bit (aligned, strided, unaligned and over-64-KiB rows, NaN and inf)."""
import pytest
import torch

import fp8ext

E4M3 = torch.float8_e4m3fn
IN_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def three_ops(x):
    gate, up = x.chunk(2, dim=-1)
    return fp8ext.quantize_rowwise(torch.nn.functional.silu(gate) * up)


def same_bits(got, want):
    (q, s), (wq, ws) = got, want
    assert q.dtype == E4M3 and s.dtype == torch.float32 and q.shape == wq.shape and s.shape == ws.shape
    assert torch.equal(q.view(torch.uint8), wq.view(torch.uint8))
    assert torch.equal(s.view(torch.int32), ws.view(torch.int32))


def gated_input(M, two_i, dtype, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(M, two_i, generator=gen) * 3).to(dtype).to(device)


@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", [(1, 32), (7, 96), (64, 1536), (0, 64)])
def test_cpu_is_torch_silu_mul_then_quantize_rowwise(shape, dtype):
    x = gated_input(*shape, dtype)
    got = fp8ext.silu_mul_quantize_rowwise(x)
    same_bits(got, three_ops(x))
    assert got[0].shape == (shape[0], shape[1] // 2) and got[1].shape == (shape[0], 1)


@pytest.mark.parametrize("x, message", [
    (torch.randn(2, 3, 64), "expected a 2-D [M, 2I] tensor"),
    (torch.randn(4, 48), "2I = 48 must be a positive multiple of 32"),
    (torch.randn(64, 4).t(), "must be contiguous"),
    (torch.randn(4, 64, dtype=torch.float64), "expected dtype torch.bfloat16, torch.float16 or torch.float32"),
])
def test_bad_inputs_raise_one_clear_error_naming_x(x, message):
    with pytest.raises(RuntimeError) as info:
        fp8ext.silu_mul_quantize_rowwise(x)
    assert str(info.value).startswith("fp8ext.silu_mul_quantize_rowwise: x: ") and message in str(info.value)


def test_requires_grad_is_refused():
    with pytest.raises(RuntimeError, match="fp8ext.silu_mul_quantize_rowwise"):
        fp8ext.silu_mul_quantize_rowwise(torch.randn(4, 64, requires_grad=True))


def test_opcheck_and_compile():
    x = gated_input(5, 64, torch.bfloat16)
    result = torch.library.opcheck(torch.ops.fp8ext.silu_mul_quantize_rowwise.default, (x,), test_utils=OPCHECK_UTILS)
    assert all(v == "SUCCESS" for v in result.values()), result
    compiled = torch.compile(fp8ext.silu_mul_quantize_rowwise, backend="aot_eager", fullgraph=True)
    same_bits(compiled(x), fp8ext.silu_mul_quantize_rowwise(x))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", [(1, 32), (3, 96), (16, 1536), (129, 4096), (1000, 1536), (2, 40000)])
def test_cuda_equals_torch_s_ops_on_the_gpu_bit_for_bit(shape, dtype):
    # (2, 40000): rows over 64 KiB in bf16/fp16 and fp32, the two-pass kernel; 129 rows: past the few-rows width
    x = gated_input(*shape, dtype, "cuda", seed=shape[0])
    same_bits(fp8ext.silu_mul_quantize_rowwise(x), three_ops(x))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", IN_DTYPES)
def test_cuda_strided_and_unaligned_rows(dtype):
    base = gated_input(9, 160, dtype, "cuda")
    for x in (base[:, :128],  # rows of 128 in a row stride of 160 (aligned)
              base.view(-1)[1:1 + 8 * 128].view(8, 128)):  # starting one element in: the unaligned kernel
        same_bits(fp8ext.silu_mul_quantize_rowwise(x), three_ops(x))


@pytest.mark.gpu
def test_cuda_nan_inf_and_saturating_rows():
    x = gated_input(4, 64, torch.bfloat16, "cuda")
    x[0, 3] = float("nan")        # a NaN gate: the row is NaN
    x[1, 40] = float("inf")       # an inf up: inf in y, the row's amax is inf
    x[2, :32] = 80.0              # silu saturates to the gate itself
    x[3, :32] = -80.0             # silu underflows to -0
    same_bits(fp8ext.silu_mul_quantize_rowwise(x), three_ops(x))


@pytest.mark.gpu
def test_cuda_opcheck():
    x = gated_input(5, 64, torch.bfloat16, "cuda")
    result = torch.library.opcheck(torch.ops.fp8ext.silu_mul_quantize_rowwise.default, (x,), test_utils=OPCHECK_UTILS)
    assert all(v == "SUCCESS" for v in result.values()), result
