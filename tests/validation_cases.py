"""Every rejected input of fp8ext.scaled_mm, as data: the case, how to build it, and its exact message.

Used by tests/test_validation.py (each case must raise exactly this message before anything runs) and by
tools/gen_error_table.py, which writes docs/errors.md from this table. Builders take a device so the same
cases run on CPU (CI) and on the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
M, N, K = 32, 48, 64


def fp8(rows, cols, dtype=E4M3, device="cpu"):
    return (torch.randn(rows, cols, device=device) * 2).to(dtype)


def good(device):
    """A valid call: (args, kwargs). Each case breaks exactly one thing of it."""
    a = fp8(M, K, device=device)
    b = fp8(N, K, device=device).t()
    sa = torch.rand(M, 1, device=device) + 0.5
    sb = torch.rand(1, N, device=device) + 0.5
    return [a, b, sa, sb], {}


@dataclass(frozen=True)
class Case:
    id: str
    what: str  # the bad input, in words, for docs/errors.md
    build: Callable  # device -> (args, kwargs)
    message: str  # the exact first line of the error
    gpu_only: bool = False


def _with(_base=None, **changes):
    """A builder that takes good() (or the valid call _base(device) builds) and replaces positional (a, b, scale_a,
    scale_b) or keyword arguments; each change is (device, the valid call's args) -> the new value."""
    positions = {"a": 0, "b": 1, "scale_a": 2, "scale_b": 3}

    def build(device):
        args, kwargs = (_base or good)(device)
        for name, make in changes.items():
            value = make(device, args)
            if name in positions:
                args[positions[name]] = value
            else:
                kwargs[name] = value
        return args, kwargs

    return build


def _requires_grad(name):
    def build(device):
        args, kwargs = good(device)
        if name == "bias":
            kwargs["bias"] = torch.randn(N, device=device, dtype=torch.bfloat16, requires_grad=True)
        else:
            i = {"scale_a": 2, "scale_b": 3}[name]
            args[i] = args[i].clone().requires_grad_(True)
        return args, kwargs
    return build


P = "fp8ext.scaled_mm: "
CASES = [
    Case("out_dtype_int", "out_dtype is not a floating output type", _with(out_dtype=lambda d, a: torch.int32),
         P + "out_dtype: expected torch.bfloat16, torch.float16 or torch.float32, got torch.int32"),
    Case("out_dtype_fp64", "out_dtype is float64", _with(out_dtype=lambda d, a: torch.float64),
         P + "out_dtype: expected torch.bfloat16, torch.float16 or torch.float32, got torch.float64"),
    Case("out_dtype_fp8", "out_dtype is an fp8 type", _with(out_dtype=lambda d, a: E4M3),
         P + "out_dtype: expected torch.bfloat16, torch.float16 or torch.float32, got torch.float8_e4m3fn"),
    Case("a_3d", "a has 3 dimensions", _with(a=lambda d, a: fp8(2 * M, K, device=d).view(2, M, K)),
         P + "a: expected a 2-D tensor [M, K], got a 3-D tensor of shape [2, 32, 64]"),
    Case("a_1d", "a has 1 dimension", _with(a=lambda d, a: fp8(1, K, device=d).view(K)),
         P + "a: expected a 2-D tensor [M, K], got a 1-D tensor of shape [64]"),
    Case("b_1d", "b has 1 dimension", _with(b=lambda d, a: fp8(1, K, device=d).view(K)),
         P + "b: expected a 2-D tensor [K, N], got a 1-D tensor of shape [64]"),
    Case("a_bf16", "a is bfloat16, not fp8", _with(a=lambda d, a: torch.randn(M, K, device=d).bfloat16()),
         P + "a: expected dtype torch.float8_e4m3fn or torch.float8_e5m2, got torch.bfloat16"),
    Case("a_fp32", "a is float32", _with(a=lambda d, a: torch.randn(M, K, device=d)),
         P + "a: expected dtype torch.float8_e4m3fn or torch.float8_e5m2, got torch.float32"),
    Case("a_complex", "a is complex64", _with(a=lambda d, a: torch.zeros(M, K, device=d, dtype=torch.complex64)),
         P + "a: expected dtype torch.float8_e4m3fn or torch.float8_e5m2, got torch.complex64"),
    Case("b_fp16", "b is float16", _with(b=lambda d, a: torch.randn(N, K, device=d).half().t()),
         P + "b: expected dtype torch.float8_e4m3fn or torch.float8_e5m2, got torch.float16"),
    Case("b_int8", "b is int8", _with(b=lambda d, a: torch.zeros(N, K, device=d, dtype=torch.int8).t()),
         P + "b: expected dtype torch.float8_e4m3fn or torch.float8_e5m2, got torch.int8"),
    Case("e5m2_x_e5m2", "both operands are e5m2",
         _with(a=lambda d, a: fp8(M, K, E5M2, d), b=lambda d, a: fp8(N, K, E5M2, d).t()),
         P + "a, b: both are torch.float8_e5m2; at least one must be torch.float8_e4m3fn "
             "(there is no e5m2 x e5m2 FP8 matrix multiply)"),
    Case("k_mismatch", "b's K differs from a's K", _with(b=lambda d, a: fp8(N, 2 * K, device=d).t()),
         P + "b: expected shape [K, N] with K = 64 (a is [32, 64]), got [128, 48]"),
    Case("b_not_transposed", "b passed as the [N, K] weight instead of w.t()",
         _with(b=lambda d, a: fp8(N, K, device=d)),
         P + "b: expected shape [K, N] with K = 64 (a is [32, 64]), got [48, 64]"),
    Case("k_not_16", "K is not a multiple of 16",
         _with(a=lambda d, a: fp8(M, 40, device=d), b=lambda d, a: fp8(N, 40, device=d).t()),
         P + "a: K = 40 must be a multiple of 16 (a is [32, 40])"),
    Case("n_not_16", "N is not a multiple of 16", _with(b=lambda d, a: fp8(40, K, device=d).t(),
                                                        scale_b=lambda d, a: torch.ones(1, 40, device=d)),
         P + "b: N = 40 must be a multiple of 16 (b is [64, 40])"),
    Case("m_too_large", "M does not fit in 32 bits",
         _with(a=lambda d, a: fp8(1, 16, device=d).expand(2**31, 16), b=lambda d, a: fp8(N, 16, device=d).t(),
               scale_a=lambda d, a: torch.ones(1, device=d)),
         P + "a: M = 2147483648 is larger than the supported 2^31 - 1"),
    Case("n_too_large", "N does not fit in 32 bits",
         _with(b=lambda d, a: fp8(1, 1, device=d).expand(K, 2**31), scale_b=lambda d, a: torch.ones(1, device=d)),
         P + "b: N = 2147483648 is larger than the supported 2^31 - 1"),
    Case("k_too_large", "K does not fit in 32 bits",
         _with(a=lambda d, a: fp8(1, 1, device=d).expand(M, 2**31), b=lambda d, a: fp8(1, 1, device=d).expand(2**31, N)),
         P + "a: K = 2147483648 is larger than the supported 2^31 - 1"),
    Case("a_column_major", "a is column-major", _with(a=lambda d, a: fp8(K, M, device=d).t()),
         P + "a: expected row-major [M, K] (stride(1) == 1, stride(0) >= K), got shape [32, 64] with strides "
             "[1, 32]; pass a.contiguous()"),
    Case("a_overlapping_rows", "a's rows overlap (stride(0) < K)",
         _with(a=lambda d, a: fp8(1, 2 * K, device=d).as_strided((M, K), (1, 1))),
         P + "a: expected row-major [M, K] (stride(1) == 1, stride(0) >= K), got shape [32, 64] with strides "
             "[1, 1]; pass a.contiguous()"),
    Case("b_row_major", "b is row-major (a contiguous [K, N] tensor)",
         _with(b=lambda d, a: fp8(K, N, device=d)),
         P + "b: expected column-major [K, N], i.e. w.t() of a row-major weight w [N, K] (stride(0) == 1, "
             "stride(1) >= K), got shape [64, 48] with strides [48, 1]"),
    Case("a_ld_not_16", "a's leading dimension is not a multiple of 16 bytes",
         _with(a=lambda d, a: fp8(M, K + 8, device=d)[:, :K]),
         P + "a: the leading dimension (72 elements) must be a multiple of 16 elements (16 bytes) for TMA; "
             "pad the buffer it views"),
    Case("b_ld_not_16", "b's leading dimension is not a multiple of 16 bytes",
         _with(b=lambda d, a: fp8(N, K + 8, device=d)[:, :K].t()),
         P + "b: the leading dimension (72 elements) must be a multiple of 16 elements (16 bytes) for TMA; "
             "pad the buffer it views"),
    Case("a_misaligned", "a's data pointer is not 16-byte aligned",
         _with(a=lambda d, a: fp8(M, K + 32, device=d)[:, 8:8 + K]),
         P + "a: the data pointer must be 16-byte aligned, got an address 8 bytes past a 16-byte boundary "
             "(storage_offset 8)"),
    Case("b_misaligned", "b's data pointer is not 16-byte aligned",
         _with(b=lambda d, a: fp8(N, K + 32, device=d)[:, 4:4 + K].t()),
         P + "b: the data pointer must be 16-byte aligned, got an address 4 bytes past a 16-byte boundary "
             "(storage_offset 4)"),
    Case("scale_a_bf16", "scale_a is bfloat16", _with(scale_a=lambda d, a: torch.ones(M, 1, device=d).bfloat16()),
         P + "scale_a: expected dtype torch.float32, got torch.bfloat16"),
    Case("scale_b_fp64", "scale_b is float64", _with(scale_b=lambda d, a: torch.ones(1, N, device=d).double()),
         P + "scale_b: expected dtype torch.float32, got torch.float64"),
    Case("scale_a_wrong_len", "scale_a has the wrong number of rows",
         _with(scale_a=lambda d, a: torch.ones(M + 1, 1, device=d)),
         P + "scale_a: expected one value (tensor-wise), shape (M, 1) or (M,) with M = 32 (row-wise), or "
             "(M, ceil(K / 128)) = (32, 1) (block-wise, 1 x 128 groups), "
             "got shape [33, 1]"),
    Case("scale_a_transposed", "scale_a given as (1, M)", _with(scale_a=lambda d, a: torch.ones(1, M, device=d)),
         P + "scale_a: expected one value (tensor-wise), shape (M, 1) or (M,) with M = 32 (row-wise), or "
             "(M, ceil(K / 128)) = (32, 1) (block-wise, 1 x 128 groups), "
             "got shape [1, 32]"),
    Case("scale_b_transposed", "scale_b given as (N, 1)", _with(scale_b=lambda d, a: torch.ones(N, 1, device=d)),
         P + "scale_b: expected one value (tensor-wise), shape (1, N) or (N,) with N = 48 (row-wise), or "
             "(ceil(K / 128), ceil(N / 128)) = (1, 1) (block-wise, 128 x 128 blocks), "
             "got shape [48, 1]"),
    Case("scale_b_2d_full", "scale_b given as a full (M, N) matrix",
         _with(scale_b=lambda d, a: torch.ones(M, N, device=d)),
         P + "scale_b: expected one value (tensor-wise), shape (1, N) or (N,) with N = 48 (row-wise), or "
             "(ceil(K / 128), ceil(N / 128)) = (1, 1) (block-wise, 128 x 128 blocks), "
             "got shape [32, 48]"),
    Case("blockwise_a_rowwise_b", "block-wise scale_a with a row-wise scale_b (K = 256)",
         _with(a=lambda d, a: fp8(M, 4 * K, device=d), b=lambda d, a: fp8(N, 4 * K, device=d).t(),
               scale_a=lambda d, a: torch.ones(2, M, device=d).t()),
         P + "scale_a, scale_b: block-wise scaling needs both scales block-wise: scale_a of shape "
             "(M, ceil(K / 128)) = (32, 2) and scale_b of shape (ceil(K / 128), ceil(N / 128)) = (2, 1), "
             "got [32, 2] and [1, 48]"),
    Case("blockwise_b_tensorwise_a", "block-wise scale_b with a tensor-wise scale_a (K = 256)",
         _with(a=lambda d, a: fp8(M, 4 * K, device=d), b=lambda d, a: fp8(N, 4 * K, device=d).t(),
               scale_a=lambda d, a: torch.ones(1, device=d), scale_b=lambda d, a: torch.ones(1, 2, device=d).t()),
         P + "scale_a, scale_b: block-wise scaling needs both scales block-wise: scale_a of shape "
             "(M, ceil(K / 128)) = (32, 2) and scale_b of shape (ceil(K / 128), ceil(N / 128)) = (2, 1), "
             "got [1] and [2, 1]"),
    Case("blockwise_e5m2", "block-wise scales with an e5m2 a (K = 256)",
         _with(a=lambda d, a: fp8(M, 4 * K, E5M2, device=d), b=lambda d, a: fp8(N, 4 * K, device=d).t(),
               scale_a=lambda d, a: torch.ones(2, M, device=d).t(),
               scale_b=lambda d, a: torch.ones(1, 2, device=d).t()),
         P + "a, b: block-wise scaling takes torch.float8_e4m3fn operands only, got a torch.float8_e5m2 and b "
             "torch.float8_e4m3fn"),
    Case("blockwise_a_wrong_groups", "scale_a with 3 groups where K = 256 has 2",
         _with(a=lambda d, a: fp8(M, 4 * K, device=d), b=lambda d, a: fp8(N, 4 * K, device=d).t(),
               scale_a=lambda d, a: torch.ones(3, M, device=d).t(),
               scale_b=lambda d, a: torch.ones(1, 2, device=d).t()),
         P + "scale_a: expected one value (tensor-wise), shape (M, 1) or (M,) with M = 32 (row-wise), or "
             "(M, ceil(K / 128)) = (32, 2) (block-wise, 1 x 128 groups), got shape [32, 3]"),
    Case("blockwise_b_untransposed", "a weight's [N/128, K/128] block scales s passed as scale_b=s, not s.t() (K = N = 256)",
         _with(a=lambda d, a: fp8(M, 4 * K, device=d), b=lambda d, a: fp8(256, 4 * K, device=d).t(),
               scale_a=lambda d, a: torch.ones(2, M, device=d).t(),
               scale_b=lambda d, a: torch.ones(2, 2, device=d)),
         P + "scale_b: block-wise 128 x 128 scales are taken as s.t() of the weight's [ceil(N / 128), ceil(K / 128)] "
             "= [2, 2] scales s (strides (1, >= 2), as torch._scaled_mm takes them), got strides [2, 1]; pass "
             "scale_b=s.t() for the weight's scales s (a contiguous (2, 2) tensor reads as s.t() only by accident "
             "when the grid is square)"),
    Case("scale_a_strided", "scale_a is a strided view",
         _with(scale_a=lambda d, a: torch.ones(M, 2, device=d)[:, :1]),
         P + "scale_a: row-wise scales must be contiguous (stride 1 along M), got strides [2, 1]; expanded or "
             "strided views are not accepted, pass .contiguous()"),
    Case("scale_a_expanded", "scale_a is a stride-0 expanded view",
         _with(scale_a=lambda d, a: torch.ones(1, 1, device=d).expand(M, 1)),
         P + "scale_a: row-wise scales must be contiguous (stride 1 along M), got strides [0, 1]; expanded or "
             "strided views are not accepted, pass .contiguous()"),
    Case("scale_b_expanded", "scale_b is a stride-0 expanded view",
         _with(scale_b=lambda d, a: torch.ones(1, device=d).expand(N)),
         P + "scale_b: row-wise scales must be contiguous (stride 1 along N), got strides [0]; expanded or "
             "strided views are not accepted, pass .contiguous()"),
    Case("bias_wrong_len", "bias has the wrong length",
         _with(bias=lambda d, a: torch.zeros(N + 16, device=d, dtype=torch.bfloat16)),
         P + "bias: expected a 1-D tensor of N = 48 values, got shape [64]"),
    Case("bias_2d", "bias is (1, N)", _with(bias=lambda d, a: torch.zeros(1, N, device=d, dtype=torch.bfloat16)),
         P + "bias: expected a 1-D tensor of N = 48 values, got shape [1, 48]"),
    Case("bias_dtype", "bias dtype differs from out_dtype", _with(bias=lambda d, a: torch.zeros(N, device=d)),
         P + "bias: expected dtype torch.bfloat16 (the out_dtype), got torch.float32; pass bias.to(torch.bfloat16)"),
    Case("bias_dtype_fp16_out", "bf16 bias with fp16 output",
         _with(bias=lambda d, a: torch.zeros(N, device=d, dtype=torch.bfloat16),
               out_dtype=lambda d, a: torch.float16),
         P + "bias: expected dtype torch.float16 (the out_dtype), got torch.bfloat16; pass bias.to(torch.float16)"),
    Case("bias_strided", "bias is a strided view",
         _with(bias=lambda d, a: torch.zeros(2 * N, device=d, dtype=torch.bfloat16)[::2]),
         P + "bias: expected a contiguous tensor, got stride 2"),
    Case("bias_misaligned", "bias's data pointer is not 16-byte aligned",
         _with(bias=lambda d, a: torch.zeros(N + 8, device=d, dtype=torch.bfloat16)[1:N + 1]),
         P + "bias: the data pointer must be 16-byte aligned, got an address 2 bytes past a 16-byte boundary "
             "(storage_offset 1)"),
    Case("scale_a_requires_grad", "scale_a requires grad (grad mode on)", _requires_grad("scale_a"),
         P + "scale_a: requires grad, but fp8ext.scaled_mm is not differentiable (it has no backward). Call it "
             "under torch.no_grad() or torch.inference_mode(), or pass scale_a.detach()"),
    Case("scale_b_requires_grad", "scale_b requires grad (grad mode on)", _requires_grad("scale_b"),
         P + "scale_b: requires grad, but fp8ext.scaled_mm is not differentiable (it has no backward). Call it "
             "under torch.no_grad() or torch.inference_mode(), or pass scale_b.detach()"),
    Case("bias_requires_grad", "bias requires grad (grad mode on)", _requires_grad("bias"),
         P + "bias: requires grad, but fp8ext.scaled_mm is not differentiable (it has no backward). Call it "
             "under torch.no_grad() or torch.inference_mode(), or pass bias.detach()"),
    Case("a_none", "a is None (outside inference_mode)", _with(a=lambda d, a: None), P + "a: expected a tensor, got None"),
    Case("scale_b_none", "scale_b is None (outside inference_mode)", _with(scale_b=lambda d, a: None),
         P + "scale_b: expected a tensor, got None"),
    # Device mismatches need a GPU.
    Case("b_on_cpu", "b on the CPU while a is on the GPU", _with(b=lambda d, a: fp8(N, K).t()),
         P + "b: expected a tensor on cuda:0 (the device of a), got one on cpu", gpu_only=True),
    Case("scale_a_on_cpu", "scale_a on the CPU while a is on the GPU",
         _with(scale_a=lambda d, a: torch.ones(M, 1)),
         P + "scale_a: expected a tensor on cuda:0 (the device of a), got one on cpu", gpu_only=True),
    Case("scale_b_on_cpu", "scale_b (tensor-wise) on the CPU while a is on the GPU",
         _with(scale_b=lambda d, a: torch.ones(())),
         P + "scale_b: expected a tensor on cuda:0 (the device of a), got one on cpu", gpu_only=True),
    Case("bias_on_cpu", "bias on the CPU while a is on the GPU",
         _with(bias=lambda d, a: torch.zeros(N, dtype=torch.bfloat16)),
         P + "bias: expected a tensor on cuda:0 (the device of a), got one on cpu", gpu_only=True),
    Case("a_on_cpu", "a on the CPU while the rest is on the GPU", _with(a=lambda d, a: fp8(M, K)),
         P + "b: expected a tensor on cpu (the device of a), got one on cuda:0", gpu_only=True),
]
