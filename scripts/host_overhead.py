#!/usr/bin/env python3
"""Host time per call, eager: what fp8ext.scaled_mm costs the CPU next to torch._scaled_mm.

Both run the row-wise problem on the same tensors, in a loop of back-to-back calls with one synchronize at the
end. The shapes are tiny, so the GPU finishes each kernel before the next launch arrives and the loop's time per
call is the host's: Python, the op's checks and dispatch, the output allocation and the launch. In a CUDA graph
none of this is paid per replay. A third loop allocates the output alone, for scale.

    python scripts/host_overhead.py [--json out.json]
"""
import argparse
import json
import time

import torch

import fp8ext
from fp8ext.bench import run_record
from fp8ext.testing import random_operands

SHAPES = [(1, 256, 256), (16, 512, 512)]
CALLS = 5000


def per_call_us(fn, calls: int = CALLS) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):  # the best of three loops: other work on the host only adds time
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for M, N, K in SHAPES:
        a, b, sa, sb = random_operands(M, N, K, device="cuda")
        kw = dict(out_dtype=torch.bfloat16, use_fast_accum=True)
        row = {"M": M, "N": N, "K": K,
               "fp8ext_us": per_call_us(lambda: fp8ext.scaled_mm(a, b, sa, sb, **kw)),
               "fp8ext_op_us": per_call_us(lambda: torch.ops.fp8ext.scaled_mm(a, b, sa, sb, None, torch.bfloat16,
                                                                               True)),
               "torch_rowwise_us": per_call_us(lambda: torch._scaled_mm(a, b, sa, sb, **kw)),
               "empty_output_us": per_call_us(lambda: torch.empty((M, N), device="cuda", dtype=torch.bfloat16))}
        rows.append(row)
        print(f"{M}x{N}x{K}: fp8ext.scaled_mm {row['fp8ext_us']:.1f} us/call, torch.ops.fp8ext.scaled_mm "
              f"{row['fp8ext_op_us']:.1f}, torch._scaled_mm {row['torch_rowwise_us']:.1f}, "
              f"allocating the output alone {row['empty_output_us']:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**run_record(), "method": __doc__.split("\n\n")[1],
                       "calls_per_loop": CALLS, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
