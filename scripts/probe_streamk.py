"""Probe: where does the swapped stream-K block-wise kernel's slow eager mode come from, the GPU or the host?

Each of --procs fresh processes times, per shape and kernel (the dispatch's pick and a swapped cooperative one,
forced) and for torch._scaled_mm block-wise on the same tensors:
- `eager_do_bench`: samples queued as triton.testing.do_bench queues them (flush, start, call, end);
- `eager_held`: the same with the GPU held until the call is issued (fp8ext.bench.Timer, the bench's method);
- `graph`: a CUDA graph of one forced call, replayed after a flush (no host work in the timed span);
- `host_us`: the host's issue time per call, calls back to back.
The slow mode showed up per process, so one process says little.

    python scripts/probe_streamk.py --procs 6 --json bench/results/<record>.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch

SHAPES = [(64, 576, 7168), (128, 576, 7168), (64, 1536, 7168), (128, 1536, 7168), (32, 24576, 1536),
          (32, 7168, 2048)]
OTHER = "bw_swap_coop_128x64x128_c1x1_bf16"


def stats(xs):
    xs = sorted(xs)
    at = lambda q: round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)  # noqa: E731
    return {"p10": at(0.1), "p50": at(0.5), "p90": at(0.9), "n": len(xs)}


def graph_samples(fn, flush, n=200):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        fn()
        with torch.cuda.graph(g, stream=s):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for start, end in events:
        flush.zero_()
        start.record()
        g.replay()
        end.record()
    torch.cuda.synchronize()
    return [1e3 * start.elapsed_time(end) for start, end in events]


def host_us(fn, n=300):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    t = time.perf_counter() - t
    torch.cuda.synchronize()
    return round(1e6 * t / n, 2)


def child() -> dict:
    from fp8ext import ops
    from fp8ext.bench.timing import Timer
    from fp8ext.testing import random_blockwise_operands

    plain, held = Timer(rep_ms=150, hold=False), Timer(rep_ms=150)
    rows = []
    for M, N, K in SHAPES:
        a, b, sa, sb = random_blockwise_operands(M, N, K, device="cuda")
        pick = ops.selected_blockwise_kernel(M, N, K)
        row = {"shape": [M, N, K], "pick": pick}
        ours = lambda: ops.scaled_mm(a, b, sa, sb)  # noqa: E731
        for k in dict.fromkeys([pick, OTHER]):
            with ops.force_kernel(k):
                row[k] = {"eager_do_bench": stats(plain.samples(ours)), "eager_held": stats(held.samples(ours)),
                          "graph": stats(graph_samples(ours, held._flush)), "host_us": host_us(ours)}
        theirs = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
        row["torch"] = {"eager_do_bench": stats(plain.samples(theirs)), "eager_held": stats(held.samples(theirs)),
                        "host_us": host_us(theirs)}
        rows.append(row)
    return {"rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child()), flush=True)
        return
    from fp8ext.bench.common import suite_record

    procs = []
    for i in range(args.procs):
        out = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, check=True)
        procs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        for r in procs[-1]["rows"]:
            cells = [f"{k[:14]} {v['eager_do_bench']['p50']:.1f}/{v['eager_held']['p50']:.1f}/"
                     f"{v.get('graph', {}).get('p50', float('nan')):.1f}" for k, v in r.items() if isinstance(v, dict)]
            print(i, r["shape"], " ".join(cells), flush=True)
    record = {**suite_record("probe-streamk"), "method": __doc__.split("\n\n")[1], "procs": procs}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
