"""Decode-step time of one linear layer per candidate kernel, as a model's decode step runs it: a CUDA graph of
CHAIN back-to-back steps, each quantize_rowwise(x) then scaled_mm with the kernel forced, every step with its
own weight (so the weights do not stay in L2). The graph's replay time / CHAIN is the layer's time with the
launch gaps and the programmatic dependent launch of the decode kernels (csrc/grid_dependency.cuh) included,
which an eager timing of one call after an L2 flush cannot see.

    python scripts/decode_chain.py --shapes 14336x4096,4096x14336 --m 1,8 --json out.json

Per (M, N, K): the dispatch's pick (capturing=True) and the us per layer of each candidate: the pick, the decode
kernels that compute M, and the cost model's three best.
"""
import argparse
import json
import sys

import torch

import fp8ext
from fp8ext.bench.common import suite_record
from fp8ext.bench.suites.model import time_ms
from fp8ext.ops import selected_kernel
from fp8ext.testing import kernel_dtypes, kernel_max_m, random_fp8, random_scales


def chain_us(M, N, K, kernel, chain, replays=20):
    xs = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(chain)]
    ws = [random_fp8(N, K, device="cuda") for _ in range(chain)]
    sws = [random_scales(N, device="cuda", shape=(1, N)) for _ in range(chain)]
    _, fast, _ = kernel_dtypes(kernel.split("@")[0])

    def step():
        for x, w, sw in zip(xs, ws, sws):
            xq, xs_ = fp8ext.quantize_rowwise(x)
            fp8ext.scaled_mm(xq, w.t(), xs_, sw, use_fast_accum=fast)

    with fp8ext.force_kernel(kernel):
        step()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
    ms = time_ms({"chain": graph.replay}, iters=replays, rounds=1, warmup=3)["chain"]  # median of CUDA events
    if isinstance(ms, str):  # time_ms records a failure as its message
        raise RuntimeError(ms)
    del graph
    return ms * 1e3 / chain


def candidates(M, N, K):
    """The dispatch's pick under capture, and the kernels to time: the cost model's three best and the decode
    kernels that compute M."""
    explained = selected_kernel(M, N, K, capturing=True, explain=True)
    names = [r["kernel"] for r in explained["ranking"][:3]]
    names += [n for n in fp8ext.kernel_names() if n.startswith("gemv_") and (kernel_max_m(n) or M) >= M
              and kernel_dtypes(n)[0] == torch.bfloat16]
    built = set(fp8ext.kernel_names())
    return explained["selected"], [n for n in dict.fromkeys(names) if n.split("@")[0] in built]  # no torch backstop


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="14336x4096,4096x14336,4096x4096,1024x4096,"
                                       "28672x8192,8192x28672,8192x8192,1024x8192")
    p.add_argument("--m", default="1,8")
    p.add_argument("--chain", type=int, default=16)
    p.add_argument("--json")
    args = p.parse_args(argv)
    rows = []
    for shape in args.shapes.split(","):
        N, K = (int(v) for v in shape.split("x"))
        for M in (int(m) for m in args.m.split(",")):
            pick, names = candidates(M, N, K)
            torch.manual_seed(M * 1000003 + N * 7 + K)
            us = {k: chain_us(M, N, K, k, args.chain) for k in names}
            best = min(us, key=us.get)
            row = {"M": M, "N": N, "K": K, "pick": pick, "us": us, "best": best,
                   "pick_over_best": us[pick] / us[best] if pick in us else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**suite_record("decode_chain"), "chain": args.chain, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
