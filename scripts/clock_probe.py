#!/usr/bin/env python3
"""Why do long and short measurements of the same kernel disagree? Times fp8ext (dispatcher) and
torch._scaled_mm row-wise on a few large shapes, interleaved (ours, torch, ours, torch, ...), at two do_bench
repetition lengths, while nvidia-smi samples the SM clock, power and temperature every 50 ms. Each
measurement gets the mean clock and power of the samples taken while it ran.

    python scripts/clock_probe.py --out probe.json [--shapes 16384x8192x8192,8192x8192x8192] [--rounds 3]

Reads the card's state only (nvidia-smi --query-gpu); it never changes clocks or power limits.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

import fp8ext
from fp8ext.bench import Timer, make_operands, run_record, tflops


class Sampler:
    """nvidia-smi --query-gpu at 50 ms, kept as (host time, sm MHz, watts, deg C)."""

    def __init__(self, index: int):
        self.samples: list[tuple[float, float, float, float]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--id={index}", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
             "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                mhz, watts, temp = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), mhz, watts, temp))

    def window(self, t0: float, t1: float) -> dict:
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {"samples": 0}
        return {"samples": len(s), "sm_mhz": statistics.mean(x[1] for x in s),
                "watts": statistics.mean(x[2] for x in s), "temp_c": statistics.mean(x[3] for x in s)}

    def stop(self):
        self.proc.terminate()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shapes", default="16384x8192x8192,8192x8192x8192,4096x28672x4096")
    p.add_argument("--reps", default="20,100", help="do_bench repetition lengths (ms)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    sampler = Sampler(torch.cuda.current_device())
    time.sleep(0.5)
    rows = []
    for M, N, K in shapes:
        a, b, sa, sb, _, _ = make_operands(M, N, K)
        peers = {"fp8ext": lambda: fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True),
                 "torch_rowwise": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                           use_fast_accum=True)}
        for rep in (int(r) for r in args.reps.split(",")):
            timer = Timer(rep_ms=rep, warmup_ms=25)
            for rnd in range(args.rounds):
                order = list(peers) if rnd % 2 == 0 else list(reversed(peers))
                for name in order:
                    t0 = time.time()
                    us = timer(peers[name])
                    row = {"M": M, "N": N, "K": K, "rep_ms": rep, "round": rnd, "peer": name, "us": us,
                           "tflops": tflops(M, N, K, us), **sampler.window(t0, time.time())}
                    rows.append(row)
                    print(f"{M}x{N}x{K} rep={rep:3d} r{rnd} {name:14s} {us:9.1f} us {row['tflops']:6.0f} TF "
                          f"{row.get('sm_mhz', 0):5.0f} MHz {row.get('watts', 0):4.0f} W {row.get('temp_c', 0):3.0f} C",
                          flush=True)
        del a, b, sa, sb
    sampler.stop()
    kernels = {f"{m}x{n}x{k}": fp8ext.selected_kernel(m, n, k) for m, n, k in shapes}
    result = {**run_record(), "kernel": kernels, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
