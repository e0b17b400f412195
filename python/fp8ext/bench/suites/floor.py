"""floor: what decode (M <= 128) cannot go below, timed the way the bench times (L2 flushed before every call,
medians, interleaved turns), on the 12 weights of the llama suite:

  - empty:  a one-element kernel, the fixed cost of one timed launch after the flush;
  - read:   torch's max over the weight's bytes viewed as int32, a single pass that reads every weight byte
            once with vectorized loads, next to no arithmetic: an upper bound on "fixed cost + weight read";
  - fp8ext and torch._scaled_mm row-wise / tensor-wise at M = 1, 16, 32, 64, 128 (fast accumulation).

Each decode row stands next to its floor: the time over `empty` is what the weight read costs each method, and
`read` says what a plain streaming kernel gets for the same bytes.
"""
from __future__ import annotations

import torch

from ... import ops
from ...testing import random_operands
from ...zoo import LLAMA_NK
from ..registry import register_suite
from ..timing import TIMER_METHOD, Timer

MS = (1, 16, 32, 64, 128)


def decode_peers(a, b, sa, sb) -> dict:
    """fp8ext, torch row-wise and torch tensor-wise at every M of MS, on the first M rows of a."""
    st = torch.ones((), device="cuda")  # tensor-wise scales, as the peer suites' tensor-wise peer takes them
    kw = dict(out_dtype=torch.bfloat16, use_fast_accum=True)
    fns = {}
    for M in MS:
        am, sam = a[:M], sa[:M]
        fns[f"fp8ext M={M}"] = lambda am=am, sam=sam: ops.scaled_mm(am, b, sam, sb, **kw)
        fns[f"rowwise M={M}"] = lambda am=am, sam=sam: torch._scaled_mm(am, b, sam, sb, **kw)
        fns[f"tensorwise M={M}"] = lambda am=am: torch._scaled_mm(am, b, st, st, **kw)
    return fns


@register_suite("floor", help="decode against an empty kernel and a plain read of the weight (llama weights)",
                defaults={"rep_ms": 60})
def floor(args) -> dict:
    timer = Timer(rep_ms=args.rep_ms)
    one = torch.ones(1, device="cuda")
    rows = []
    for N, K in sorted(LLAMA_NK):
        a, b, sa, sb = random_operands(max(MS), N, K, device="cuda")
        w32 = b.t().view(torch.int32)  # b is the [N, K] weight transposed: its bytes, contiguous
        fns = {"empty": lambda: one.add_(1), "read": lambda: torch.amax(w32), **decode_peers(a, b, sa, sb)}
        times = timer.interleaved(fns, args.rounds)
        rows.append({"N": N, "K": K, "weight_mb": N * K / 1e6, **{k: round(v, 2) for k, v in times.items()}})
        print(f"{N}x{K}: empty {times['empty']:.1f} us, read {times['read']:.1f} us "
              f"({N * K / (times['read'] - times['empty']) / 1e3:.0f} GB/s over empty); fp8ext "
              + " ".join(f"M={M} {times[f'fp8ext M={M}']:.1f}" for M in MS), flush=True)
        del a, b, sa, sb, w32
    empties = [r["empty"] for r in rows]
    summary = {"empty us (min..max)": f"{min(empties):.1f}..{max(empties):.1f}",
               "fp8ext M=1 TB/s over empty": {f"{r['N']}x{r['K']}": round(r["N"] * r["K"] / (r["fp8ext M=1"] - r["empty"])
                                                                         / 1e6, 2) for r in rows},
               "weights where fp8ext M=1 beats read": sum(r["fp8ext M=1"] < r["read"] for r in rows)}
    return {"method": f"{TIMER_METHOD}, {args.rounds} interleaved turns, "
                      f"{args.rep_ms:g} ms per choice; fast accumulation, bf16 out",
            "summary": summary, "rows": rows}
