"""decode-chain: one linear layer's decode step as a model's CUDA graph runs it, for each candidate kernel.

A chain is --chain back-to-back steps, each quantize_rowwise(x) then scaled_mm with the kernel forced and its own
weight (so that the weights do not stay in L2), captured as a CUDA graph; its replay time / --chain is the layer's
time with the launch gaps and the decode kernels' programmatic dependent launch (csrc/grid_dependency.cuh)
included, which an eager timing of one call after an L2 flush cannot see. Per (M, N, K): the dispatch's pick under
capture, and the time of each candidate on the same tensors, the graphs replayed in interleaved turns: the pick,
the decode kernels that compute M, and the cost model's three best. The dispatch's cost model is calibrated on
eager calls; these chains are what a calibration of the decode kernels for CUDA graphs would measure.

By default the decode layers of Llama-3 8B and 70B as an unfused model runs them (gate or up, down, q or o, k or
v) at M = 1 and 8; --shapes MxNxK,... times others.
"""
from __future__ import annotations

import torch

from ... import kernels, ops
from ...quantize import quantize_rowwise
from ...testing import kernel_dtypes, kernel_max_m, random_fp8, random_scales
from ...zoo import LLAMA3_LAYERS
from ..common import geomean, parse_shapes, timed_or_failed
from ..llama_models import cuda_graph
from ..registry import register_suite
from ..timing import Timer


def unfused_layers(model: str) -> list[tuple[int, int]]:
    """(N, K) of one decoder layer's projections as an unfused model runs them: gate (or up), down, q (or o), k
    (or v), from the fused shapes of fp8ext.zoo.LLAMA3_LAYERS."""
    layer = LLAMA3_LAYERS[model]
    (qkv_n, k), (o_n, _) = layer["qkv"], layer["o"]
    gate_up_n, _ = layer["gate_up"]
    return [(gate_up_n // 2, k), layer["down"], layer["o"], ((qkv_n - o_n) // 2, k)]


DEFAULT_SHAPES = [(m, n, k) for model in ("8b", "70b") for n, k in unfused_layers(model) for m in (1, 8)]


def candidates(M: int, N: int, K: int) -> tuple[str, list[str]]:
    """The dispatch's pick under capture, and the kernels to time: the cost model's three best and the decode
    kernels that compute M (built ones only: the torch backstop has no kernel to force)."""
    explained = kernels.selected_kernel(M, N, K, capturing=True, explain=True)
    names = [r["kernel"] for r in explained["ranking"][:3]]
    names += [n for n in kernels.kernel_names() if n.startswith("gemv_") and (kernel_max_m(n) or M) >= M
              and kernel_dtypes(n)[0] == torch.bfloat16]
    built = set(kernels.kernel_names())
    return explained["selected"], [n for n in dict.fromkeys(names) if n.split("@")[0] in built]


def chain_graphs(M: int, N: int, K: int, names: list[str], chain: int) -> dict:
    """{kernel: the replay of a captured chain of `chain` steps with that kernel forced}, all on the same tensors."""
    xs = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16) for _ in range(chain)]
    ws = [random_fp8(N, K, device="cuda") for _ in range(chain)]
    sws = [random_scales(N, device="cuda", shape=(1, N)) for _ in range(chain)]

    def capture(kernel: str):
        fast = kernel_dtypes(kernel.split("@")[0])[1]

        def step():
            for x, w, sw in zip(xs, ws, sws):
                xq, sx = quantize_rowwise(x)
                ops.scaled_mm(xq, w.t(), sx, sw, use_fast_accum=fast)

        with kernels.force_kernel(kernel):
            return cuda_graph(step)

    return {k: capture(k) for k in names}


def chain_row(M: int, N: int, K: int, chain: int, timer: Timer, rounds: int) -> dict:
    pick, names = candidates(M, N, K)
    torch.manual_seed(M * 1000003 + N * 7 + K)
    replays = chain_graphs(M, N, K, names, chain)
    us = {k: t / chain if isinstance(t, float) else t for k, t in timed_or_failed(timer, replays, rounds).items()}
    del replays
    torch.cuda.empty_cache()
    return row_of(M, N, K, pick, us)


def row_of(M: int, N: int, K: int, pick: str, us: dict) -> dict:
    """A row from the us per layer of each candidate (a failure string where one could not be captured or timed)."""
    timed = {k: t for k, t in us.items() if isinstance(t, float)}
    best = min(timed, key=timed.get) if timed else None
    return {"M": M, "N": N, "K": K, "pick": pick, "us": us, "best": best,
            "pick_over_best": timed[pick] / timed[best] if pick in timed else None}


def summarize(rows: list[dict], worst: int = 3) -> dict:
    ratios = [r["pick_over_best"] for r in rows if r["pick_over_best"] is not None]
    slowest = sorted((r for r in rows if r["pick_over_best"] is not None), key=lambda r: -r["pick_over_best"])
    return {"rows": len(rows), "geomean pick / fastest": round(geomean(ratios), 3) if ratios else None,
            "picks within 4% of the fastest": sum(x <= 1.04 for x in ratios),
            "pick not timed (backstop or failure)": len(rows) - len(ratios),
            "worst picks": [f"{r['M']}x{r['N']}x{r['K']} {r['pick']}: {r['pick_over_best']:.3f} ({r['best']})"
                            for r in slowest[:worst]]}


@register_suite("decode-chain", help="a decode layer per candidate kernel, as chains replayed in CUDA graphs",
                takes=("shapes",),
                options={"--chain": dict(type=int, default=16,
                                         help="decode-chain suite: quantize + GEMM steps a graph (default 16)"),
                         "--replays": dict(type=int, default=20,
                                           help="decode-chain suite: timed replays per kernel (default 20)")})
def decode_chain(args) -> dict:
    shapes = parse_shapes(args.shapes) if args.shapes else DEFAULT_SHAPES
    timer = Timer.forwards(args.replays)
    rows = []
    for M, N, K in shapes:
        rows.append(chain_row(M, N, K, args.chain, timer, args.rounds))
        if not args.quiet:
            r = rows[-1]
            print(f"{M}x{N}x{K}: pick {r['pick']}, fastest {r['best']}, pick / fastest {r['pick_over_best']}",
                  flush=True)
    return {"method": f"a CUDA graph of {args.chain} quantize_rowwise + scaled_mm steps (bf16 x, each step its own "
                      f"random e4m3 weight), one graph per candidate kernel (forced) on the same tensors; "
                      f"{args.replays} replays per kernel, synchronized, between CUDA events, no L2 flush, in "
                      f"{args.rounds} interleaved turns; median replay time / {args.chain} = us per layer",
            "chain": args.chain, "summary": summarize(rows), "rows": rows}
