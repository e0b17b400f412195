"""autotune: does the opt-in autotuner pick better than the cost model? For a set of llama shapes: the model's kernel
(selected_kernel with autotuning off, fp8ext's kernels only), then autotune(True) and one call to tune the bucket,
and both choices timed the way the bench times (L2 flushed, interleaved turns, medians) on the same tensors. Also
records how long the tuning call took."""
from __future__ import annotations

import time

import torch

import fp8ext
from ...testing import random_operands
from ..common import geomean
from ..registry import register_suite
from ..timing import TIMER_METHOD, Timer

# Decode and prefill rows of small, mid and large weights, both accumulation modes for some.
SHAPES = [(16, 4096, 4096, True), (64, 8192, 8192, True), (128, 10240, 8192, True), (32, 57344, 8192, True),
          (1024, 8192, 8192, True), (4096, 28672, 4096, True), (16, 8192, 8192, False), (2048, 8192, 8192, False)]


def model_and_tuned(a, b, sa, sb, fast: bool) -> tuple[str, str, float]:
    """The cost model's kernel, the autotuner's, and the tuning call's time in ms; autotuning is off after."""
    M, K, N = a.shape[0], a.shape[1], b.shape[1]
    fp8ext.autotune(False)
    model = fp8ext.selected_kernel(M, N, K, use_fast_accum=fast, torch_ok=False)
    fp8ext.autotune(True)
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)  # tunes the bucket
        torch.cuda.synchronize()
        tune_ms = 1e3 * (time.perf_counter() - t0)
        tuned = fp8ext.selected_kernel(M, N, K, use_fast_accum=fast)
    finally:
        fp8ext.autotune(False)
    return model, tuned, tune_ms


@register_suite("autotune", help="the autotuner's picks against the cost model's, timed on the same tensors",
                defaults={"rep_ms": 60})
def autotune(args) -> dict:
    timer = Timer(rep_ms=args.rep_ms)
    rows = []
    for M, N, K, fast in SHAPES:
        a, b, sa, sb = random_operands(M, N, K, device="cuda")
        model, tuned, tune_ms = model_and_tuned(a, b, sa, sb, fast)

        def run(name):
            def fn():
                with fp8ext.force_kernel(name):
                    return fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)
            return fn

        times = timer.interleaved({"model": run(model), "autotuned": run(tuned)}, args.rounds)
        rows.append({"M": M, "N": N, "K": K, "use_fast_accum": fast, "model_kernel": model, "autotuned_kernel": tuned,
                     "model_us": round(times["model"], 2), "autotuned_us": round(times["autotuned"], 2),
                     "tuning_call_ms": round(tune_ms, 1)})
        print(f"{M}x{N}x{K} fast={fast}: model {model} {times['model']:.1f} us, autotuned {tuned} "
              f"{times['autotuned']:.1f} us ({times['model'] / times['autotuned']:.3f}x); tuning call "
              f"{tune_ms:.0f} ms", flush=True)
    summary = {"geomean model time / autotuned time": geomean(r["model_us"] / r["autotuned_us"] for r in rows),
               "rows where the picks differ": sum(r["model_kernel"] != r["autotuned_kernel"] for r in rows),
               "tuning call ms (min..max)": f"{min(r['tuning_call_ms'] for r in rows):.0f}.."
                                            f"{max(r['tuning_call_ms'] for r in rows):.0f}"}
    return {"method": f"{TIMER_METHOD}, model and autotuned choice in "
                      f"{args.rounds} interleaved turns, {args.rep_ms:g} ms each; the same tensors for both",
            "summary": summary, "rows": rows}
