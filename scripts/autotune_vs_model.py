#!/usr/bin/env python3
"""Does the opt-in autotuner pick better than the cost model? For a set of llama shapes: the model's kernel
(fp8ext.selected_kernel with autotuning off, fp8ext's kernels only), then fp8ext.autotune(True) and one call to tune the bucket, and
both choices timed the way the bench times (fp8ext.bench.Timer: L2 flushed, interleaved turns, medians) on the
same tensors. Also records how long the tuning call took.

    python scripts/autotune_vs_model.py [--json out.json] [--rep-ms 60]
"""
import argparse
import json
import time

import torch

import fp8ext
from fp8ext.bench import Timer, run_record
from fp8ext.testing import random_operands

# Decode and prefill rows of small, mid and large weights, both accumulation modes for some.
SHAPES = [(16, 4096, 4096, True), (64, 8192, 8192, True), (128, 10240, 8192, True), (32, 57344, 8192, True),
          (1024, 8192, 8192, True), (4096, 28672, 4096, True), (16, 8192, 8192, False), (2048, 8192, 8192, False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--rep-ms", type=float, default=60)
    args = ap.parse_args()
    timer = Timer(rep_ms=args.rep_ms)
    rows = []
    for M, N, K, fast in SHAPES:
        fp8ext.autotune(False)
        a, b, sa, sb = random_operands(M, N, K, device="cuda")
        model = fp8ext.selected_kernel(M, N, K, use_fast_accum=fast, torch_ok=False)
        fp8ext.autotune(True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)  # tunes the bucket
        torch.cuda.synchronize()
        tune_ms = 1e3 * (time.perf_counter() - t0)
        tuned = fp8ext.selected_kernel(M, N, K, use_fast_accum=fast)
        fp8ext.autotune(False)

        def run(name):
            def fn():
                with fp8ext.force_kernel(name):
                    return fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)
            return fn

        times = timer.interleaved({"model": run(model), "autotuned": run(tuned)})
        row = {"M": M, "N": N, "K": K, "use_fast_accum": fast, "model_kernel": model, "autotuned_kernel": tuned,
               "model_us": round(times["model"], 2), "autotuned_us": round(times["autotuned"], 2),
               "tuning_call_ms": round(tune_ms, 1)}
        rows.append(row)
        print(f"{M}x{N}x{K} fast={fast}: model {model} {times['model']:.1f} us, autotuned {tuned} "
              f"{times['autotuned']:.1f} us ({times['model'] / times['autotuned']:.3f}x); tuning call "
              f"{tune_ms:.0f} ms", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**run_record(),
                       "method": "fp8ext.bench.Timer (L2 flushed before each call, medians), model and autotuned "
                                 f"choice interleaved, {args.rep_ms} ms each; the same tensors for both",
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
