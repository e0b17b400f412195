"""Shared by the block-wise tests: operands with an exact float64 answer, opcheck's samples, activations that
exercise every group case of the quantize, the quantize comparison and the kernels built."""
import torch

import fp8ext
from fp8ext.testing import random_blockwise_operands

E4M3 = torch.float8_e4m3fn
OPCHECK_UTILS = ("test_faketensor", "test_aot_dispatch_dynamic")


def exact_blockwise_operands(M, N, K, device="cpu"):
    """Small integers (|v| <= 4, exact in e4m3) and power-of-two scales: every product and partial sum is exact
    in fp32, so an fp32 result must equal the float64 reference bit for bit."""
    G, H = -(-K // 128), -(-N // 128)
    a = torch.randint(-4, 5, (M, K), device=device).float().to(E4M3)
    b = torch.randint(-4, 5, (N, K), device=device).float().to(E4M3).t()
    sa = torch.exp2(torch.randint(-3, 3, (G, M), device=device).float()).t()
    sb = torch.exp2(torch.randint(-3, 3, (H, G), device=device).float()).t()
    return a, b, sa, sb


OPCHECK_SAMPLES = {
    "bf16": (lambda: random_blockwise_operands(16, 256, 384), {}),
    "bias_fp16": (lambda: random_blockwise_operands(8, 144, 256),
                  {"bias": torch.randn(144).half(), "out_dtype": torch.float16}),
    "m1_fp32": (lambda: random_blockwise_operands(1, 128, 208), {"out_dtype": torch.float32}),
}


def activations(M, K, dtype, device="cpu"):
    """Fresh activations whose groups span many binades, with a NaN, an all-zero group and an infinity planted where
    the shape has room (each is its own group's case)."""
    x = torch.randn(M, K, device=device) * torch.exp2(torch.randint(-10, 10, (M, 1), device=device).float())
    if M >= 3 and K >= 256:
        x[0, 3] = float("nan")
        x[1, 128:256] = 0.0
        x[2, 200] = float("inf")
    return x.to(dtype)


def same_quantization(got, want):
    """q equal byte for byte but for NaN's sign bit (a NaN's sign is the platform's: the GPU's arithmetic returns
    +NaN, the CPU's keeps an operand's), the scales equal with NaN in the same places, and torch's (M, G) layout,
    strides (1, M)."""
    (q, s), (q2, s2) = got, want
    assert q.dtype == q2.dtype and q.shape == q2.shape and q.is_contiguous()
    nan, nan2 = q.float().isnan().cpu(), q2.float().isnan().cpu()
    assert torch.equal(nan, nan2)
    assert torch.equal(q.view(torch.uint8).cpu()[~nan], q2.view(torch.uint8).cpu()[~nan2])
    assert s.shape == s2.shape and torch.equal(s.isnan().cpu(), s2.isnan().cpu())
    assert torch.equal(s.nan_to_num(0.0).cpu(), s2.nan_to_num(0.0).cpu())
    M, G = s.shape
    assert M <= 1 or (s.stride(0) == 1 and (G == 1 or s.stride(1) == M))


QUANT_SHAPES = [(1, 128), (3, 4096), (5, 4112), (7, 208), (33, 7168), (0, 256)]


def built_kernels():
    try:
        return fp8ext.blockwise_kernel_names()
    except Exception:  # noqa: BLE001 - a CPU-only build has none; the GPU tests are skipped there anyway
        return []


def padded_weight_scales(sb):
    """scale_b as s.t() of weight scales s [H, G] stored with padded rows (strides (1, G + 3)): not torch's exact
    layout, which fp8ext reads through its strides."""
    G, H = sb.shape
    wide = torch.zeros(H, G + 3, device=sb.device)
    wide[:, :G] = sb.t()
    return wide[:, :G].t()
