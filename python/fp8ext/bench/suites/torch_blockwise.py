"""torch-blockwise: for which K does this torch's block-wise torch._scaled_mm compute correctly?

The block-wise backstop (csrc/sm90/dispatch/blockwise_dispatch.h) hands torch only the shapes measured right on torch
2.11 (M % 4 == 0 and ceil(K / 128) % 4 == 0: sm90::torch_blockwise_computes) and is off on every other torch release.
Before turning it on for another release, run this suite there: for each K it calls torch._scaled_mm with block-wise
scales in torch's layouts on fresh random operands, M x N = 256 x 512, and compares the result with the float64
reference under the block-wise bound (fp8ext.testing): right, wrong (no error raised) or refused.
"""
from __future__ import annotations

import torch

from ...testing import check_against_reference, random_blockwise_operands, reference
from ..registry import register_suite

# K / 128 = 1..8, partial last groups (976, 1008, 3008, 7104), and large K of both kinds.
KS = [128, 256, 384, 512, 640, 768, 896, 1024, 976, 1008, 2880, 3008, 4096, 4288, 7104, 7168, 29568]
M, N = 256, 512


def check_k(K: int, m: int = M, n: int = N, device: str = "cuda") -> dict:
    """One K: torch's block-wise result against the float64 bound."""
    a, b, sa, sb = random_blockwise_operands(m, n, K, device=device)
    groups = -(-K // 128)
    row = {"K": K, "k_groups": groups, "k_groups_multiple_of_4": groups % 4 == 0}
    try:
        out = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        if device == "cuda":
            torch.cuda.synchronize()
    except (RuntimeError, NotImplementedError, ValueError) as e:  # ValueError: "Invalid scaling configuration"
        return {**row, "torch": "refused: " + str(e).splitlines()[0]}
    ref = reference(a, b, sa, sb)
    row["rel_err"] = float((out.double() - ref).norm() / ref.norm())
    try:
        check_against_reference(out, a, b, sa, sb, use_fast_accum=False)
        row["torch"] = "right"
    except AssertionError as e:
        row["torch"] = "wrong: " + str(e)[:160]
    return row


@register_suite("torch-blockwise", help="which K torch's block-wise _scaled_mm computes correctly (the backstop's "
                "premise; rerun on a new torch)")
def torch_blockwise(args) -> dict:
    rows = []
    for K in KS:
        r = check_k(K)
        rows.append(r)
        if not args.quiet:
            print(f"K={K:6d} groups={r['k_groups']:4d} %4={r['k_groups'] % 4} "
                  f"rel_err={r.get('rel_err', float('nan')):.3g} {r['torch'][:60]}", flush=True)
    premise = [r for r in rows if r["k_groups_multiple_of_4"] and r["torch"] != "right"]
    summary = {"K checked": len(rows), "right": sum(r["torch"] == "right" for r in rows),
               "wrong without an error": [r["K"] for r in rows if r["torch"].startswith("wrong")],
               "refused": [r["K"] for r in rows if r["torch"].startswith("refused")],
               "K / 128 a multiple of 4 but not right (the backstop's rule fails)": [r["K"] for r in premise]}
    return {"method": __doc__.split("\n\n")[1].replace("\n", " "), "M": M, "N": N, "summary": summary, "rows": rows}
