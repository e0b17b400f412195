"""host: host time per eager call, fp8ext.scaled_mm next to torch._scaled_mm, and a layer's forward.

fp8ext.scaled_mm, the bare op and torch._scaled_mm run the row-wise problem on the same tensors, in loops of
back-to-back calls with one synchronize at the end. The shapes are tiny, so the GPU finishes each kernel before
the next launch arrives and the loop's time per call is the host's: Python, the op's checks and dispatch, the
output allocation and the launch. In a CUDA graph none of this is paid per replay. A fourth loop allocates the
output alone, for scale. Under torch.inference_mode(), as a model's forward runs, a layer on a [1, M, K] bf16
input: fp8ext.nn.Float8Linear (one fp8ext.linear call), the same layer as the two ops with the views between them
(its forward before fp8ext.linear), and bf16 nn.Linear. The loops take turns, five rounds, and the best loop of
each is kept.
"""
from __future__ import annotations

import time

import torch

from ... import ops
from ...nn import Float8Linear
from ...testing import random_operands
from ..registry import register_suite

SHAPES = [(1, 256, 256), (16, 512, 512)]


def per_call_us(loops: dict, calls: int, rounds: int = 5) -> dict:
    """For each named function, the best of `rounds` loops of `calls` back-to-back calls, per call. The loops of the
    different functions take turns, so that a host clock that drifts during the run lands on all of them alike;
    the best loop is kept because other work on the host only adds time."""
    for fn in loops.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    best = {name: float("inf") for name in loops}
    for _ in range(rounds):
        for name, fn in loops.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    return best


def layer_loops(M: int, N: int, K: int) -> dict:
    """A layer's forward on a [1, M, K] bf16 input: Float8Linear, the same as two ops, and bf16 nn.Linear."""
    x = torch.randn(1, M, K, device="cuda", dtype=torch.bfloat16)
    layer = torch.nn.Linear(K, N, bias=False, device="cuda", dtype=torch.bfloat16)
    f8 = Float8Linear.from_linear(layer)
    quantize, scaled_mm = torch.ops.fp8ext.quantize_rowwise.default, torch.ops.fp8ext.scaled_mm.default

    def two_ops():
        q, s = quantize(x, torch.float8_e4m3fn, None)
        out = scaled_mm(q.view(-1, K), f8.weight.t(), s.view(-1, 1), f8.weight_scale, None, x.dtype, True)
        return out.view(1, M, N)

    return {"float8_linear_us": lambda: f8(x), "float8_linear_two_ops_us": two_ops, "bf16_linear_us": lambda: layer(x)}


@register_suite("host", help="host time per eager call: fp8ext.scaled_mm, the bare op, torch._scaled_mm",
                options={"--calls": dict(type=int, default=5000, help="host suite: calls per timed loop")})
def host(args) -> dict:
    rows = []
    for M, N, K in SHAPES:
        a, b, sa, sb = random_operands(M, N, K, device="cuda")
        kw = dict(out_dtype=torch.bfloat16, use_fast_accum=True)
        loops = {"fp8ext_us": lambda: ops.scaled_mm(a, b, sa, sb, **kw),
                 "fp8ext_op_us": lambda: torch.ops.fp8ext.scaled_mm(a, b, sa, sb, None, torch.bfloat16, True),
                 "torch_rowwise_us": lambda: torch._scaled_mm(a, b, sa, sb, **kw),
                 "empty_output_us": lambda: torch.empty((M, N), device="cuda", dtype=torch.bfloat16)}
        row = {"M": M, "N": N, "K": K, **per_call_us(loops, args.calls)}
        with torch.inference_mode():
            row.update(per_call_us(layer_loops(M, N, K), args.calls))
        rows.append(row)
        print(f"{M}x{N}x{K}: fp8ext.scaled_mm {row['fp8ext_us']:.1f} us/call, torch.ops.fp8ext.scaled_mm "
              f"{row['fp8ext_op_us']:.1f}, torch._scaled_mm {row['torch_rowwise_us']:.1f}, "
              f"allocating the output alone {row['empty_output_us']:.1f}; layers: Float8Linear "
              f"{row['float8_linear_us']:.1f}, as two ops {row['float8_linear_two_ops_us']:.1f}, bf16 nn.Linear "
              f"{row['bf16_linear_us']:.1f}")
    summary = {f"{k} (min..max)": f"{min(r[k] for r in rows):.1f}..{max(r[k] for r in rows):.1f}"
               for k in ("fp8ext_us", "fp8ext_op_us", "torch_rowwise_us", "empty_output_us", "float8_linear_us",
                         "float8_linear_two_ops_us", "bf16_linear_us")}
    return {"method": __doc__.split("\n\n")[1], "calls_per_loop": args.calls, "summary": summary, "rows": rows}
