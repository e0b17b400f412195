#!/usr/bin/env python3
"""Measures batch invariance on the GPU: does row i of fp8ext.scaled_mm depend on how many rows the call has?

For each weight shape and accumulation mode, the first rows of one activation are computed inside calls of
M = 1 ... 16384 rows (the other rows random), through the normal dispatch, and compared bit for bit with the
same rows of the M = 8 call (the first min(M, 8) rows). Within one kernel the rows are identical
(tests/test_robustness_gpu.py checks every kernel); through dispatch, a different M can select a different kernel
and change the last bits. The M list brackets the table's switch points (the decode kernels end at M = 4, 16 or
32). Prints a table and writes JSON.

    python scripts/batch_invariance.py [--json out.json]
"""
import argparse
import json

import torch

import fp8ext
from fp8ext.bench import run_record
from fp8ext.testing import random_fp8, random_scales

MS = [1, 4, 5, 8, 16, 17, 32, 33, 64, 128, 129, 256, 512, 1024, 2048, 4096, 16384]
# Four Llama-3 8B weights, and one 405B weight whose M = 129-256 bucket picks a 256-token stream-K tile
# (swap_sk_128x256x128_c2x1) between ping-pong neighbours.
SHAPES = [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (18432, 16384)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for N, K in SHAPES:
        a = random_fp8(max(MS), K, device="cuda")
        b = random_fp8(N, K, device="cuda").t()
        sa = random_scales(max(MS), device="cuda", shape=(max(MS), 1))
        sb = random_scales(N, device="cuda", shape=(1, N))
        for fast in (True, False):
            first = fp8ext.scaled_mm(a[:8], b, sa[:8], sb, use_fast_accum=fast).float()
            for M in MS:
                ref = first[:min(M, 8)]
                out = fp8ext.scaled_mm(a[:M], b, sa[:M], sb, use_fast_accum=fast)[:len(ref)].float()
                diff = (out - ref).abs()
                rel = (diff / ref.abs().clamp_min(1e-30)).max().item()
                row = {"N": N, "K": K, "use_fast_accum": fast, "M": M,
                       "kernel": fp8ext.selected_kernel(M, N, K, use_fast_accum=fast),
                       "identical_fraction": (diff == 0).float().mean().item(), "max_rel_diff": rel}
                rows.append(row)
                print(f"N={N:6d} K={K:6d} {'fast   ' if fast else 'precise'} M={M:6d} "
                      f"{row['kernel']:40s} identical {100 * row['identical_fraction']:6.2f}%  max rel {rel:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**run_record(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
