"""linear: one layer's forward, fp8ext.nn.Float8Linear (activation quantize included) against bf16 nn.Linear (same
weights, bf16 input) and the torch row-wise peer TorchRowwiseLinear (Float8Linear's FP8 weights, eager torch
quantize, torch._scaled_mm), on the Llama-3 8B and 70B layer shapes (qkv, o, gate_up, down) and M from decode to
prefill; timed the way the bench times (L2 flushed before every call, medians, interleaved turns), on fresh random
inputs."""
from __future__ import annotations

import torch
from torch import nn

from ...nn import Float8Linear
from ...zoo import LLAMA3_LAYERS
from ..common import TorchRowwiseLinear, acceptance, geomean, guarded, ratio, rel_err, timed_or_failed
from ..registry import register_suite
from ..timing import TIMER_METHOD, Timer

# (in_features, out_features) of one decoder layer's projections, by name: qkv, o, gate_up (fused), down.
LAYERS = {model: {name: (k, n) for name, (n, k) in LLAMA3_LAYERS[model].items()} for model in ("8b", "70b")}
MS = (1, 4, 16, 128, 2048, 4096, 8192)
PREFILL_M, DECODE_M = 2048, 16  # summary groups: M >= PREFILL_M, M <= DECODE_M
ACCEPT_PREFILL, ACCEPT_DECODE_70B = 1.3, 1.6  # acceptance: geomean bf16 time / fp8ext time


def row_of(model: str, layer: str, K: int, N: int, M: int, times: dict, err=None) -> dict:
    """A row from the times in us ({"bf16_us", "fp8ext_us", "torch_rowwise_us"}, any a failure string)."""
    return {"model": model, "layer": layer, "M": M, "K": K, "N": N, **times,
            "bf16_over_fp8ext": ratio(times.get("bf16_us"), times.get("fp8ext_us")),
            "torch_rowwise_over_fp8ext": ratio(times.get("torch_rowwise_us"), times.get("fp8ext_us")),
            "fp8ext_rel_err_vs_bf16": err}


def summarize(rows: list[dict], worst: int = 3) -> dict:
    out = {}
    groups = [(f"{m} M>={PREFILL_M}", lambda r, m=m: r["model"] == m and r["M"] >= PREFILL_M, ACCEPT_PREFILL)
              for m in LAYERS]
    groups += [(f"{m} M<={DECODE_M}", lambda r, m=m: r["model"] == m and r["M"] <= DECODE_M,
                ACCEPT_DECODE_70B if m == "70b" else None) for m in LAYERS]
    for name, pred, accept in groups:
        sel = [r for r in rows if pred(r)]
        xs = [r["bf16_over_fp8ext"] for r in sel if r["bf16_over_fp8ext"] is not None]
        out[f"{name} geomean bf16/fp8ext"] = round(geomean(xs), 3) if xs else None
        out[f"{name} geomean torch_rowwise/fp8ext"] = round(geomean(
            r["torch_rowwise_over_fp8ext"] for r in sel if r["torch_rowwise_over_fp8ext"] is not None), 3)
        if accept is not None:
            out[f"{name} acceptance (>= {accept})"] = acceptance(xs, len(sel), lambda v, a=accept: geomean(v) >= a)
    measured = sorted((r for r in rows if r["bf16_over_fp8ext"] is not None), key=lambda r: r["bf16_over_fp8ext"])
    out["worst bf16/fp8ext"] = [f"{r['model']} {r['layer']} M={r['M']}: {r['bf16_over_fp8ext']:.3f}"
                                for r in measured[:worst]]
    out["failed rows"] = sum(r["bf16_over_fp8ext"] is None for r in rows)
    return out


def guarded_rows(measure, where: dict) -> list[dict]:
    """measure()'s rows, or one row saying why it failed (building a layer that does not fit, say)."""
    rows = guarded(measure)
    if isinstance(rows, list):
        return rows
    # One failed row per M, so that every summary group that the layer belongs to is marked incomplete.
    return [{**where, "M": M, "error": rows, "bf16_over_fp8ext": None, "torch_rowwise_over_fp8ext": None}
            for M in MS]


def measure_layer(timer: Timer, model: str, layer: str, K: int, N: int, rounds: int) -> list[dict]:
    """One projection at every M of MS: a bf16 nn.Linear of random weights, its Float8Linear and the torch peer."""
    bf16 = nn.Linear(K, N, bias=False, device="cuda", dtype=torch.bfloat16)
    f8 = Float8Linear.from_linear(bf16)
    peer = TorchRowwiseLinear(f8)
    out = []
    for M in MS:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        with torch.inference_mode():
            times = timed_or_failed(timer, {"bf16_us": lambda: bf16(x), "fp8ext_us": lambda: f8(x),
                                            "torch_rowwise_us": lambda: peer(x)}, rounds)
            err = None
            if isinstance(times["fp8ext_us"], float) and isinstance(times["bf16_us"], float):
                err = rel_err(f8(x), bf16(x))
        r = row_of(model, layer, K, N, M, times, err)
        out.append(r)
        print(f"{model} {layer} {K}->{N} M={M}: bf16 {r['bf16_us']} us, fp8ext {r['fp8ext_us']} us, "
              f"bf16/fp8ext {r['bf16_over_fp8ext']}, torch_rowwise/fp8ext {r['torch_rowwise_over_fp8ext']}",
              flush=True)
        del x
    return out


@register_suite("linear", help="Float8Linear forward vs bf16 nn.Linear and the torch row-wise peer (Llama-3 layers)",
                defaults={"rep_ms": 60})
def linear(args) -> dict:
    timer = Timer(rep_ms=args.rep_ms)
    rows = []
    for model, layers in LAYERS.items():
        for layer, (K, N) in layers.items():
            rows += guarded_rows(lambda: measure_layer(timer, model, layer, K, N, args.rounds),
                                 {"model": model, "layer": layer, "K": K, "N": N})
            torch.cuda.empty_cache()
    return {"method": f"{TIMER_METHOD}, {args.rounds} interleaved turns, "
                      f"{args.rep_ms:g} ms per choice; one layer's forward under inference_mode, bf16 input [M, K], "
                      "no bias; fp8ext = Float8Linear (quantize_rowwise + scaled_mm, fast accumulation), bf16 = "
                      "nn.Linear of the same weights, torch_rowwise = the same FP8 weights with an eager torch "
                      "quantize and torch._scaled_mm row-wise",
            "summary": summarize(rows), "rows": rows}
