"""edge: what fp8ext.scaled_mm and torch._scaled_mm (cuBLASLt) return at the numerical edges, side by side.

Cases, row-wise scales, 64 x 1040 x 1040, fast and precise accumulation, each output dtype:
  overflow   even rows get a huge scale, so about a quarter of their results pass the type's largest value
  inf_scale  scale_a[3] = inf, scale_b[11] = inf
  zero_scale scale_a[7] = 0
  nan_row    one NaN in row 5 of a
For each, the elements are split by the float64 reference (finite and clearly inside the range, clearly past
it, or NaN) and the suite counts what each library returned there: finite, +-inf, NaN, or the type's largest
finite value (saturation). docs/accuracy.md quotes the result.
"""
from __future__ import annotations

import json

import torch

from ... import ops
from ...testing import error_bound, random_operands, reference
from ..registry import register_suite

CASES = ["overflow", "inf_scale", "zero_scale", "nan_row"]
HUGE = {torch.float16: 1e5, torch.bfloat16: 3e38, torch.float32: 3e38}


def operands(case, out_dtype):
    a, b, sa, sb = random_operands(64, 1040, 1040, device="cuda")
    if case == "overflow":
        sa[::2] = HUGE[out_dtype]
        if out_dtype == torch.float32:
            sb *= 1e3  # fp32 output: the product itself must pass fp32's range
    elif case == "inf_scale":
        sa[3, 0], sb[0, 11] = float("inf"), float("inf")
    elif case == "zero_scale":
        sa[7, 0] = 0.0
    elif case == "nan_row":
        bits = a.view(torch.uint8).clone()
        bits[5, 7] = 0x7F  # e4m3 NaN
        a = bits.view(torch.float8_e4m3fn)
    return a, b, sa, sb


def describe(out, where):
    v = out.float()[where]
    top = torch.finfo(out.dtype).max
    return {"n": int(where.sum()), "finite": int(v.isfinite().sum()), "inf": int(v.isinf().sum()),
            "nan": int(v.isnan().sum()), "saturated": int((v.abs() == top).sum())}


def classes(ref, bound, top) -> dict:
    """The reference's elements by class; those within the bound of the type's largest value are in none."""
    margin = 2 * bound + 0.01 * top
    return {"ref_nan": ref.isnan(),
            "ref_past_range": (ref.abs() > top + margin) & ~ref.isnan(),
            "ref_in_range": (ref.abs() < top - margin) & ~ref.isnan()}


@register_suite("edge", help="NaN, inf and zero scales and overflow: what fp8ext and cuBLASLt return, side by side")
def edge(args) -> dict:
    torch.manual_seed(0)
    rows = []
    for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
        for case in CASES:
            a, b, sa, sb = operands(case, out_dtype)
            ref = reference(a, b, sa, sb)
            for fast in (True, False):
                bound = error_bound(a, b, sa, sb, out_dtype, fast, ref=ref).nan_to_num(0.0)
                ours = ops.scaled_mm(a, b, sa, sb, out_dtype=out_dtype, use_fast_accum=fast)
                theirs = torch._scaled_mm(a, b, sa, sb, out_dtype=out_dtype, use_fast_accum=fast)
                for group, where in classes(ref, bound, torch.finfo(out_dtype).max).items():
                    if not bool(where.any()):
                        continue
                    row = {"out_dtype": str(out_dtype).replace("torch.", ""), "case": case, "fast": fast,
                           "ref": group, "fp8ext": describe(ours, where), "torch": describe(theirs, where)}
                    rows.append(row)
                    print(json.dumps(row))
    differ = [r for r in rows if r["fp8ext"] != r["torch"]]
    summary = {"classes compared": len(rows), "where fp8ext and torch differ": len(differ),
               **{f"differs: {r['out_dtype']} {r['case']} {'fast' if r['fast'] else 'precise'} {r['ref']}":
                  f"fp8ext {r['fp8ext']}, torch {r['torch']}" for r in differ}}
    return {"method": __doc__.split("\n\n")[1], "summary": summary, "rows": rows}
