"""host: host time per eager call, fp8ext.scaled_mm next to torch._scaled_mm, and a layer's forward.

Per shape and grad mode (grad mode on, torch.no_grad(), torch.inference_mode()), fp8ext.scaled_mm, the op
torch.ops.fp8ext.scaled_mm called directly, torch._scaled_mm and the same aten op called as an extension's op is
(torch.ops.aten._scaled_mm: the dispatcher's boxed entry from Python, which any op of an extension pays) run the
row-wise problem on the same tensors, and a
layer's forward on a [1, M, K] bf16 input: fp8ext.nn.Float8Linear (one fp8ext.linear call) and bf16 nn.Linear; the
output's allocation alone is timed for scale. One shape is one that fp8ext hands to torch._scaled_mm (the
backstop: fp8ext.selected_kernel names torch there); the others are run by fp8ext's own kernels. Each call is timed on the
host, from before the call to its return: what an eager caller's Python thread spends on it (the op's checks and
dispatch, the output's allocation, the launch). The GPU work is small and a synchronize every 50 calls keeps the
launch queue short, so no call waits for the GPU. The functions take turns of `calls` calls each, five rounds, the
order rotated every round, and each keeps the median of all its calls. In a CUDA graph none of this is paid per
replay.
"""
from __future__ import annotations

import statistics
import time

import torch

from ... import kernels, ops
from ...nn import Float8Linear
from ...testing import random_operands
from ..registry import register_suite

# (what the shape is, M, N, K): the backstop's shape is the one an eager user found 2-8x slower than torch's own
# call; the kernel's is a decode-sized layer, and the one-row call a batch-1 decode step's projection.
SHAPES = [("backstop", 1525, 896, 512), ("kernel", 16, 512, 512), ("one row", 1, 4096, 4096)]
GRAD_MODES = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
SYNC_EVERY = 50


def per_call_us(fns: dict, calls: int, rounds: int = 5) -> dict:
    """For each named function, the median host time of one call in microseconds, over `rounds` turns of `calls`
    calls, the functions taking turns (the order rotated by one every round) so that a host clock that drifts
    lands on all of them alike."""
    names = list(fns)
    # One untimed turn of every function first: the first thousands of calls in a fresh process ran up to 6 us
    # slower than the rest (whichever function came first), more than 200 warm-up calls each took away.
    for fn in fns.values():
        for i in range(calls):
            fn()
            if i % SYNC_EVERY == SYNC_EVERY - 1:
                torch.cuda.synchronize()
    torch.cuda.synchronize()
    samples = {name: [] for name in names}
    clock = time.perf_counter_ns
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, out = fns[name], samples[name]
            for i in range(calls):
                t0 = clock()
                fn()
                out.append(clock() - t0)
                if i % SYNC_EVERY == SYNC_EVERY - 1:
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
    return {name: statistics.median(s) / 1e3 for name, s in samples.items()}


def shape_calls(M: int, N: int, K: int) -> dict:
    """The calls timed at one shape, on the same operands."""
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    x = torch.randn(1, M, K, device="cuda", dtype=torch.bfloat16)
    layer = torch.nn.Linear(K, N, bias=False, device="cuda", dtype=torch.bfloat16)
    f8 = Float8Linear.from_linear(layer)
    op, aten = torch.ops.fp8ext.scaled_mm.default, torch.ops.aten._scaled_mm.default
    kw = dict(out_dtype=torch.bfloat16, use_fast_accum=True)
    return {"fp8ext_us": lambda: ops.scaled_mm(a, b, sa, sb, **kw),
            "fp8ext_op_us": lambda: op(a, b, sa, sb, None, torch.bfloat16, True),
            "torch_rowwise_us": lambda: torch._scaled_mm(a, b, sa, sb, **kw),
            "torch_op_us": lambda: aten(a, b, sa, sb, None, None, torch.bfloat16, True),
            "empty_output_us": lambda: torch.empty((M, N), device="cuda", dtype=torch.bfloat16),
            "float8_linear_us": lambda: f8(x), "bf16_linear_us": lambda: layer(x)}


def summarize_host(rows: list[dict]) -> dict:
    """Per shape and grad mode, fp8ext.scaled_mm's and the op's host time over torch._scaled_mm's (at most 1.0 is
    the target), torch's own op through the dispatcher's boxed entry over its Python binding, and Float8Linear's
    over bf16 nn.Linear's."""
    out = {}
    for r in rows:
        tag = f"{r['shape']} {r['M']}x{r['N']}x{r['K']} {r['grad_mode']}"
        out[tag] = {"fp8ext.scaled_mm / torch._scaled_mm": round(r["fp8ext_us"] / r["torch_rowwise_us"], 3),
                    "torch.ops.fp8ext.scaled_mm / torch._scaled_mm": round(r["fp8ext_op_us"] / r["torch_rowwise_us"],
                                                                           3),
                    "torch.ops.aten._scaled_mm / torch._scaled_mm": round(r["torch_op_us"] / r["torch_rowwise_us"], 3),
                    "Float8Linear / nn.Linear": round(r["float8_linear_us"] / r["bf16_linear_us"], 3)}
    out["fp8ext.scaled_mm / torch._scaled_mm, worst"] = max(v["fp8ext.scaled_mm / torch._scaled_mm"]
                                                            for v in out.values())
    return out


@register_suite("host", help="host time per eager call in each grad mode: fp8ext.scaled_mm, the op, torch._scaled_mm",
                options={"--calls": dict(type=int, default=2000, help="host suite: calls per function and turn")})
def host(args) -> dict:
    rows = []
    for what, M, N, K in SHAPES:
        chosen = kernels.selected_kernel(M, N, K, torch.bfloat16, True)
        fns = shape_calls(M, N, K)
        for mode, ctx in GRAD_MODES.items():
            with ctx():
                times = per_call_us(fns, args.calls)
            rows.append({"shape": what, "M": M, "N": N, "K": K, "grad_mode": mode, "selected": chosen, **times})
            r = rows[-1]
            print(f"{what} {M}x{N}x{K} ({chosen}), {mode}: fp8ext.scaled_mm {r['fp8ext_us']:.1f} us, the op "
                  f"{r['fp8ext_op_us']:.1f}, torch._scaled_mm {r['torch_rowwise_us']:.1f} (through torch.ops "
                  f"{r['torch_op_us']:.1f}), the output alone {r['empty_output_us']:.1f}; Float8Linear "
                  f"{r['float8_linear_us']:.1f}, bf16 nn.Linear {r['bf16_linear_us']:.1f}")
    return {"method": __doc__.split("\n\n")[1], "calls_per_turn": args.calls, "summary": summarize_host(rows),
            "rows": rows}
