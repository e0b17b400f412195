#!/usr/bin/env python3
"""What decode (M <= 128) cannot go below, measured the way the bench measures (fp8ext.bench.Timer: L2 flushed
before every call, medians), on the 12 weights of the llama suite:

  - empty:  a one-element kernel, the fixed cost of one timed launch after the flush;
  - read:   torch's max over the weight's bytes viewed as int32, a single pass that reads every weight byte
            once with vectorized loads, next to no arithmetic: an upper bound on "fixed cost + weight read";
  - fp8ext and torch._scaled_mm row-wise / tensor-wise at M = 1, 16, 32, 64, 128 (fast accumulation), in the same
    interleaved turns.

It puts each decode row next to its floor: the time over `empty` is what the weight read costs each method, and
`read` says what a plain streaming kernel gets for the same bytes.

    python scripts/decode_floor.py [--json out.json] [--rep-ms 60]
"""
import argparse
import json

import torch

import fp8ext
from fp8ext.bench import Timer, run_record, suite_shapes
from fp8ext.testing import random_operands

MS = (1, 16, 32, 64, 128)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--rep-ms", type=float, default=60)
    args = ap.parse_args()
    timer = Timer(rep_ms=args.rep_ms)
    weights = sorted({(N, K) for _, N, K in suite_shapes("llama", None)})
    one = torch.ones(1, device="cuda")
    rows = []
    for N, K in weights:
        a, b, sa, sb = random_operands(max(MS), N, K, device="cuda")
        w32 = b.t().view(torch.int32)  # b is the [N, K] weight transposed: its bytes, contiguous
        st = torch.ones((), device="cuda")  # tensor-wise scales, as the bench's peer takes them
        fns = {"empty": lambda: one.add_(1), "read": lambda: torch.amax(w32)}
        for M in MS:
            am, sam = a[:M], sa[:M]
            fns[f"fp8ext M={M}"] = lambda am=am, sam=sam: fp8ext.scaled_mm(am, b, sam, sb, out_dtype=torch.bfloat16,
                                                                         use_fast_accum=True)
            fns[f"rowwise M={M}"] = lambda am=am, sam=sam: torch._scaled_mm(am, b, sam, sb, out_dtype=torch.bfloat16,
                                                                          use_fast_accum=True)
            fns[f"tensorwise M={M}"] = lambda am=am: torch._scaled_mm(am, b, st, st, out_dtype=torch.bfloat16,
                                                                     use_fast_accum=True)
        times = timer.interleaved(fns)
        row = {"N": N, "K": K, "weight_mb": N * K / 1e6, **{k: round(v, 2) for k, v in times.items()}}
        rows.append(row)
        print(f"{N}x{K}: empty {times['empty']:.1f} us, read {times['read']:.1f} us "
              f"({N * K / (times['read'] - times['empty']) / 1e3:.0f} GB/s over empty); fp8ext "
              + " ".join(f"M={M} {times[f'fp8ext M={M}']:.1f}" for M in MS), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**run_record(),
                       "method": f"fp8ext.bench.Timer (L2 flushed before each call, medians), interleaved turns, "
                                 f"{args.rep_ms} ms per choice; fast accumulation, bf16 out",
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
