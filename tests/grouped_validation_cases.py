"""Every rejected input of fp8ext.scaled_grouped_mm, as data: the case, how to build it, and its exact message.

Used by tests/test_grouped_cpu.py (eager and traced, each case raises exactly this message) and by
tools/gen_error_table.py (the scaled_grouped_mm part of docs/errors.md). The valid call each case breaks: a MoE
forward, 2d x 3d, of G = 6 groups of 5, 0, 1, 37, 16 and 3 rows (T = 62), N = 64, K = 96, row-wise scales; the
3d x 3d and 2d x 2d cases start from their own valid calls (G = 3, M = 17; M = 24 with K slices 32, 0, 96, 16).
"""
from __future__ import annotations

import torch

from validation_cases import Case, _with

E4M3 = torch.float8_e4m3fn
SIZES, N, K = (5, 0, 1, 37, 16, 3), 64, 96
G, T = len(SIZES), sum(SIZES)


def fp8(*shape, device="cpu"):
    return (torch.randn(*shape, device=device) * 2).to(E4M3)


def ends(sizes, device="cpu"):
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).to(device)


def moe(device):
    """2d x 3d: (a, b, scale_a, scale_b), {offs}."""
    args = [fp8(T, K, device=device), fp8(G, N, K, device=device).transpose(-2, -1),
            torch.rand(T, device=device) + 0.5, torch.rand(G, N, device=device) + 0.5]
    return args, {"offs": ends(SIZES, device)}


def moe_long_k(device):
    """The MoE call at K = 160: two K groups of 128."""
    return [fp8(T, 160, device=device), fp8(G, N, 160, device=device).transpose(-2, -1),
            torch.rand(T, device=device) + 0.5, torch.rand(G, N, device=device) + 0.5], {"offs": ends(SIZES, device)}


def batched(device):
    """3d x 3d, G = 3, M = 17."""
    return [fp8(3, 17, K, device=device), fp8(3, N, K, device=device).transpose(-2, -1),
            torch.rand(3, 17, device=device) + 0.5, torch.rand(3, N, device=device) + 0.5], {}


def weight_grad(device):
    """2d x 2d, M = 24, K slices of 32, 0, 96 and 16."""
    return [fp8(24, 144, device=device), fp8(N, 144, device=device).t(), torch.rand(4 * 24, device=device) + 0.5,
            torch.rand(4 * N, device=device) + 0.5], {"offs": ends((32, 0, 96, 16), device)}


def masked(device):
    """scaled_grouped_mm_masked: a [3, 17, K], b [3, K, N], row-wise scales, masked_m = (17, 0, 5)."""
    args, _ = batched(device)
    return args + [torch.tensor([17, 0, 5], dtype=torch.int32, device=device)], {}


def _block_scales(device):
    """Block-wise scales of the MoE call: scale_a [T, 1], scale_b [G, 1, 1] (K = 96, N = 64: one block each)."""
    return torch.rand(T, 1, device=device) + 0.5, torch.rand(G, 1, 1, device=device) + 0.5


P = "fp8ext.scaled_grouped_mm: "
CASES = [
    Case("g_out_dtype", "out_dtype is an fp8 type", _with(moe, out_dtype=lambda d, a: E4M3),
         P + "out_dtype: expected torch.bfloat16, torch.float16 or torch.float32, got torch.float8_e4m3fn"),
    Case("g_a_e5m2", "a is torch.float8_e5m2", _with(moe, a=lambda d, a: a[0].to(torch.float8_e5m2)),
         P + "a: expected dtype torch.float8_e4m3fn, got torch.float8_e5m2"),
    Case("g_b_bf16", "b is bfloat16", _with(moe, b=lambda d, a: a[1].to(torch.bfloat16)),
         P + "b: expected dtype torch.float8_e4m3fn, got torch.bfloat16"),
    Case("g_3d_2d", "a 3-D a with a 2-D b", _with(batched, b=lambda d, a: a[1][0]),
         P + "a, b: expected a 2-D a with a 3-D b (offs along M), a 3-D a with a 3-D b, or a 2-D a with a 2-D b "
         "(offs along K), got a of shape [3, 17, 96] and b of shape [96, 64]"),
    Case("g_k_mismatch", "b's K differs from a's", _with(moe, a=lambda d, a: fp8(T, 64, device=d)),
         P + "b: expected [G, K, N] with K = 64 (a is [62, 64]), got [6, 96, 64]"),
    Case("g_groups_mismatch", "a and b (3-D) hold different numbers of groups",
         _with(batched, b=lambda d, a: a[1][:2]),
         P + "a, b: expected the same number of groups, got a of shape [3, 17, 96] and b of shape [2, 96, 64]"),
    Case("g_k_16", "K is not a multiple of 16",
         _with(batched, a=lambda d, a: fp8(3, 17, 40, device=d), b=lambda d, a: fp8(3, N, 40, device=d)
               .transpose(-2, -1)),
         P + "a: K = 40 must be a multiple of 16 (a is [3, 17, 40])"),
    Case("g_b_row_major", "b is row-major (the weights, not w.transpose(-2, -1))",
         _with(moe, b=lambda d, a: a[1].contiguous()),
         P + "b: expected column-major in the last two dimensions, i.e. w.transpose(-2, -1) of row-major weights w "
         "(stride(-2) == 1, stride(-1) >= K), got shape [6, 96, 64] with strides [6144, 64, 1]"),
    Case("g_a_column_major", "a is column-major", _with(moe, a=lambda d, a: a[0].t().contiguous().t()),
         P + "a: expected row-major in the last two dimensions (stride(-1) == 1, stride(-2) >= K), got shape "
         "[62, 96] with strides [1, 62]; pass a.contiguous()"),
    Case("g_offs_missing", "offs is None in a 2d x 3d call", _with(moe, offs=lambda d, a: None),
         P + "offs: expected the groups' int32 end offsets along a's rows for a 2d x 3d call, got None"),
    Case("g_offs_3d3d", "offs is given in a 3d x 3d call",
         _with(batched, offs=lambda d, a: ends((17, 17, 17), d)),
         P + "offs: expected None with a 3-D a and a 3-D b (every group has a's M = 17 rows), got a tensor"),
    Case("g_offs_int64", "offs is int64", _with(moe, offs=lambda d, a: ends(SIZES, d).long()),
         P + "offs: expected dtype torch.int32, got torch.int64"),
    Case("g_offs_2d", "offs is 2-D", _with(moe, offs=lambda d, a: ends(SIZES, d).view(2, 3)),
         P + "offs: expected a contiguous 1-D tensor of G end offsets, got shape [2, 3] with strides [3, 1]"),
    Case("g_offs_count", "offs has fewer entries than b has groups", _with(moe, offs=lambda d, a: ends(SIZES[:-1], d)),
         P + "offs: expected G = 6 offsets (b is [6, 96, 64]), got 5"),
    Case("g_offs_device", "offs is on another device than a (GPU)",
         _with(moe, offs=lambda d, a: ends(SIZES)),
         P + "offs: expected a tensor on cuda:0 (the device of a), got one on cpu", gpu_only=True),
    Case("g_too_many_groups", "1024 groups",
         _with(weight_grad, offs=lambda d, a: torch.zeros(1024, dtype=torch.int32, device=d),
               scale_a=lambda d, a: torch.ones(1024 * 24, device=d),
               scale_b=lambda d, a: torch.ones(1024 * N, device=d)),
         P + "offs: expected 1 to 1023 groups, got 1024"),
    Case("g_scale_a_neither", "scale_a [T, 2], neither form",
         _with(moe, scale_a=lambda d, a: a[2].view(T, 1).expand(T, 2)),
         P + "scale_a: expected shape [T] = [62] (row-wise) or [T, ceil(K / 128)] = [62, 1] (block-wise) for layout "
         "2d x 3d, got [62, 2]"),
    Case("g_scale_b_shape", "scale_b of the wrong shape (row-wise)", _with(moe, scale_b=lambda d, a: a[3][:, :32]),
         P + "scale_b: expected shape [G, N] = [6, 64] (row-wise, layout 2d x 3d, as scale_a's shape says), got "
         "[6, 32]"),
    Case("g_scale_b_rowwise_with_block_a", "scale_a [T, 1] (quantize_rowwise's) with a row-wise scale_b, K <= 128",
         _with(moe, scale_a=lambda d, a: _block_scales(d)[0]),
         P + "scale_a: got [62, 1], the block-wise shape [T, ceil(K / 128)], beside a row-wise scale_b [6, 64]: for "
         "row-wise scales pass scale_a.squeeze(-1) ([T] = [62]); for block-wise ones, scale_b [G, ceil(K / 128), "
         "ceil(N / 128)] = [6, 1, 1]"),
    Case("g_scale_a_trailing_one", "scale_a [T, 1] (quantize_rowwise's), K > 128",
         _with(moe_long_k, scale_a=lambda d, a: a[2].view(-1, 1)),
         P + "scale_a: expected shape [T] = [62] (row-wise) or [T, ceil(K / 128)] = [62, 2] (block-wise) for layout "
         "2d x 3d, got [62, 1]; for a row-wise scale with a trailing 1 (as quantize_rowwise returns it), pass "
         "scale_a.squeeze(-1)"),
    Case("g_scale_dtype", "scale_a is float16", _with(moe, scale_a=lambda d, a: a[2].half()),
         P + "scale_a: expected dtype torch.float32, got torch.float16"),
    Case("g_scale_strided", "a row-wise scale_b with a strided last dimension",
         _with(moe, scale_b=lambda d, a: torch.rand(G, 2 * N, device=d)[:, ::2]),
         P + "scale_b: row-wise scales must be contiguous in their last dimension, got strides [128, 2]; pass "
         ".contiguous()"),
    Case("g_block_2d2d", "block-wise scales in a 2d x 2d call",
         _with(weight_grad, scale_a=lambda d, a: torch.ones(24, 2, device=d)),
         P + "scale_a: expected shape [G * M] = [96] (row-wise; block-wise scales take the 2d x 3d and 3d x 3d "
         "layouts only, as a 2d x 2d call's K slices need not fall on 128-element blocks), got [24, 2]"),
    Case("g_bias_shape", "bias of shape [N], not [G, N]",
         _with(moe, bias=lambda d, a: torch.zeros(N, dtype=torch.bfloat16, device=d)),
         P + "bias: expected one bias per group, shape [G, N] = [6, 64], got [64]"),
    Case("g_bias_dtype", "bias is float32 with bfloat16 output",
         _with(moe, bias=lambda d, a: torch.zeros(G, N, device=d)),
         P + "bias: expected dtype torch.bfloat16 (the out_dtype), got torch.float32; pass bias.to(torch.bfloat16)"),
]

# Values of offs: checked where they are read on the host (the CPU backend), so CPU only.
VALUE_CASES = [
    Case("g_offs_decreasing", "offs decreases",
         _with(moe, offs=lambda d, a: torch.tensor([5, 4, 9, 12, 20, 62], dtype=torch.int32, device=d)),
         P + "offs: expected non-decreasing end offsets within [0, a's rows T = 62], got offs[1] = 4 after "
         "offs[0] = 5"),
    Case("g_offs_past_rows", "offs past a's rows",
         _with(moe, offs=lambda d, a: torch.tensor([5, 5, 6, 43, 59, 63], dtype=torch.int32, device=d)),
         P + "offs: expected non-decreasing end offsets within [0, a's rows T = 62], got offs[5] = 63 after "
         "offs[4] = 59"),
    Case("g_offs_negative", "a negative offset",
         _with(moe, offs=lambda d, a: torch.tensor([-1, 5, 6, 43, 59, 62], dtype=torch.int32, device=d)),
         P + "offs: expected non-decreasing end offsets within [0, a's rows T = 62], got offs[0] = -1"),
    Case("g_offs_k_16", "an offset along K that is not a multiple of 16",
         _with(weight_grad, offs=lambda d, a: torch.tensor([32, 40, 128, 144], dtype=torch.int32, device=d)),
         P + "offs: offsets along K must be multiples of 16 (TMA reads each group's K slice in 16-byte units), got "
         "offs[1] = 40"),
]

# scaled_grouped_mm_masked (a 3d x 3d call with masked_m, its fifth argument); the last is checked where the counts
# are read on the host (CPU).
PM = "fp8ext.scaled_grouped_mm_masked: "
MASKED_CASES = [
    Case("m_2d", "a 2-D a", _with(masked, a=lambda d, a: fp8(T, K, device=d)),
         PM + "a, b: expected a 3-D a [G, M_max, K] and a 3-D b [G, K, N], got a of shape [62, 96] and b of shape "
         "[3, 96, 64]"),
    Case("m_dtype", "masked_m is int64", lambda d: (lambda c: (c[0][:4] + [c[0][4].long()], c[1]))(masked(d)),
         PM + "masked_m: expected dtype torch.int32, got torch.int64"),
    Case("m_shape", "masked_m holds fewer counts than groups",
         lambda d: (lambda c: (c[0][:4] + [c[0][4][:2]], c[1]))(masked(d)),
         PM + "masked_m: expected a contiguous 1-D tensor of G = 3 row counts, got shape [2] with strides [1]"),
    Case("m_scale", "scale_a of the 2d x 3d shape", _with(masked, scale_a=lambda d, a: torch.rand(51, device=d)),
         PM + "scale_a: expected shape [G, M] = [3, 17] (row-wise) or [G, M, ceil(K / 128)] = [3, 17, 1] "
         "(block-wise) for layout 3d x 3d, got [51]"),
    Case("m_expected_m", "a negative expected_m", lambda d: (lambda c: (c[0], {"expected_m": -1}))(masked(d)),
         PM + "expected_m: expected a hint of rows per group within [0, M_max = 17], got -1"),
]
MASKED_VALUE_CASES = [
    Case("m_count", "a count past M_max",
         lambda d: (lambda c: (c[0][:4] + [torch.tensor([17, 18, 0], dtype=torch.int32, device=d)], c[1]))(masked(d)),
         PM + "masked_m: expected row counts within [0, M = 17], got masked_m[1] = 18"),
]
