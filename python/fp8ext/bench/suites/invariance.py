"""invariance: does row i of fp8ext.scaled_mm depend on how many rows the call has?

For each weight shape and accumulation mode, the first rows of one activation are computed inside calls of
M = 1 ... 16384 rows (the other rows random), through the normal dispatch, and compared bit for bit with the
same rows of the M = 8 call (the first min(M, 8) rows). Within one kernel the rows are identical
(tests/test_robustness_gpu.py checks every kernel); through dispatch, a different M can select a different kernel
and change the last bits. The M list brackets the switch points of the decode kernels (M = 4, 16 or 32).
"""
from __future__ import annotations

import torch

from ... import kernels, ops
from ...testing import random_fp8, random_scales
from ..registry import register_suite

MS = [1, 4, 5, 8, 16, 17, 32, 33, 64, 128, 129, 256, 512, 1024, 2048, 4096, 16384]
# Four Llama-3 8B weights, and one 405B weight whose mid-M buckets have picked a 256-token stream-K tile between
# ping-pong neighbours.
SHAPES = [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (18432, 16384)]


def compare(a, b, sa, sb, fast: bool) -> list[dict]:
    """Per M of MS: the kernel, and how many of the first min(M, 8) rows match the M = 8 call bit for bit."""
    N, K = b.shape[1], b.shape[0]
    first = ops.scaled_mm(a[:8], b, sa[:8], sb, use_fast_accum=fast).float()
    rows = []
    for M in MS:
        ref = first[:min(M, 8)]
        out = ops.scaled_mm(a[:M], b, sa[:M], sb, use_fast_accum=fast)[:len(ref)].float()
        diff = (out - ref).abs()
        rows.append({"N": N, "K": K, "use_fast_accum": fast, "M": M,
                     "kernel": kernels.selected_kernel(M, N, K, use_fast_accum=fast),
                     "identical_fraction": (diff == 0).float().mean().item(),
                     "max_rel_diff": (diff / ref.abs().clamp_min(1e-30)).max().item()})
    return rows


@register_suite("invariance", help="batch invariance through dispatch: rows of M = 1..16384 calls vs the M = 8 call")
def invariance(args) -> dict:
    torch.manual_seed(0)
    rows = []
    for N, K in SHAPES:
        a = random_fp8(max(MS), K, device="cuda")
        b = random_fp8(N, K, device="cuda").t()
        sa = random_scales(max(MS), device="cuda", shape=(max(MS), 1))
        sb = random_scales(N, device="cuda", shape=(1, N))
        for fast in (True, False):
            for row in compare(a, b, sa, sb, fast):
                rows.append(row)
                print(f"N={N:6d} K={K:6d} {'fast   ' if fast else 'precise'} M={row['M']:6d} {row['kernel']:40s} "
                      f"identical {100 * row['identical_fraction']:6.2f}%  max rel {row['max_rel_diff']:.2e}")
    summary = {}
    for fast in (True, False):
        sel = [r for r in rows if r["use_fast_accum"] == fast]
        tag = "fast" if fast else "precise"
        summary[f"{tag}: calls with every row identical"] = f"{sum(r['identical_fraction'] == 1.0 for r in sel)} of {len(sel)}"
        summary[f"{tag}: largest relative difference"] = max(r["max_rel_diff"] for r in sel)
    return {"method": __doc__.split("\n\n")[1], "summary": summary, "rows": rows}
