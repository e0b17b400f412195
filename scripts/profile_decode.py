"""Where a decode step's GPU time goes: the model suite's Llama stack (bf16 and fp8ext.convert), one decode step
captured as a CUDA graph, its replays profiled with torch.profiler, kernel time summed by kind.

    python scripts/profile_decode.py --config 8b --layers 32 --batch 1,8 --json out.json

Per variant and batch: the step's wall time (CUDA events, median of the replays), the sum of kernel durations by
kind (fp8ext quantize, fp8ext decode GEMV, fp8ext CUTLASS GEMM, bf16 GEMM, attention, other), the --top kernels by
time (names cut to 120 characters) and the number of kernels per step. Wall time minus the kernel sum is the time
the GPU sits between kernels. --variants picks among the model suite's (bf16, fp8ext, fp8ext_fused); with
--compile each step runs the model under torch.compile, as the suite's compiled_graph mode does; --attention is the
model suite's.
"""
import argparse
import collections
import json
import sys

import torch

from fp8ext.bench.common import suite_record
from fp8ext.bench.suites.model import ATTENTION, build_model, compile_model, cuda_graph, decode_step, time_ms, variants


def kind(name: str) -> str:
    n = name.lower()
    if "quantize_rowwise" in n:
        return "fp8ext_quantize"
    if "gemv" in n:
        return "fp8ext_gemv"
    if "cutlass" in n or "device_kernel" in n:
        return "fp8ext_cutlass"
    if "gemm" in n or "nvjet" in n or "sm90_xmma" in n or "cublas" in n:
        return "bf16_gemm"
    if "flash" in n or "fmha" in n or "attention" in n or "sdpa" in n:
        return "attention"
    return "other"


def profile_step(replay, replays: int, top: int = 0) -> dict:
    wall_ms = time_ms({"step": replay}, iters=replays, rounds=1, warmup=3)["step"]  # median of CUDA events
    if isinstance(wall_ms, str):  # time_ms records a failure as its message
        raise RuntimeError(wall_ms)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            replay()
        torch.cuda.synchronize()
    per_kind = collections.defaultdict(float)
    per_name = collections.defaultdict(float)
    count = 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0:
            per_kind[kind(e.name)] += e.device_time / 1e3 / replays  # ms per step
            per_name[e.name[:120]] += e.device_time / 1e3 / replays
            count += 1
    heaviest = sorted(per_name.items(), key=lambda kv: -kv[1])[:top]
    return {"wall_ms": wall_ms, "kernel_ms": dict(per_kind), "top_kernels_ms": dict(heaviest),
            "kernel_sum_ms": sum(per_kind.values()), "kernels_per_step": count / replays}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="8b")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--batch", default="1,8")
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--replays", type=int, default=10)
    p.add_argument("--variants", default="bf16,fp8ext")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--attention", default="sdpa", choices=ATTENTION)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--json")
    args = p.parse_args(argv)
    names = args.variants.split(",")
    model = build_model(args.config, args.layers, 128256, "cuda", attention=args.attention)
    models, _, _ = variants(model, torchao=False, fused="fp8ext_fused" in names)
    steppers = {n: compile_model(models[n]) if args.compile else None for n in names}
    rows = []
    with torch.inference_mode():
        for batch in (int(b) for b in args.batch.split(",")):
            for name in names:
                replay = cuda_graph(decode_step(models[name], batch, args.ctx, 128256, "cuda",
                                                step_model=steppers[name]))
                row = {"variant": name, "batch": batch, "compiled": args.compile,
                       **profile_step(replay, args.replays, args.top)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**suite_record("profile_decode"), "config": args.config, "layers": args.layers,
                       "ctx": args.ctx, "compiled": args.compile, "attention": args.attention, "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
