"""Probe: the block-scaled tile kernels' walk at large M, in bands of one tile against blockwise_band's choice.

fp8ext's own kernels only (set_backends("fp8ext"): no torch backstop), at every M >= 1024 row of the blockwise
suite (DeepSeek-V3's layers and the zoo's held-out rows), each timed with torch._scaled_mm block-wise on the same
tensors in interleaved turns (fp8ext.bench.Timer: L2 flushed, host held out, medians). The band is fixed per
process (FP8EXT_BLOCKWISE_MAX_BAND is read once), so the probe runs one child process per band, alternating,
--procs of each; both see the same operands (seeded), and each reports a checksum of its output, which must agree:
the walk changes the order of the tiles, not what a tile computes.

    python scripts/probe_blockwise_band.py --procs 1 --json bench/results/<record>.json
    python scripts/probe_blockwise_band.py --procs 2 --fresh 16 --seed 7 --json ...   (new shapes, see rows())
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys

import torch

BANDS = (1, 8)


def rows(fresh: int, seed: int) -> list[dict]:
    """With fresh = 0, every M >= 1024 row of the blockwise suite and the Nsight Compute shape. Otherwise `fresh`
    new shapes drawn log-uniformly (M 1024-16384, N 1024-65536, K 1024-32768) from `seed`, inside the region where
    blockwise_band takes a band (both operands at least 50 MiB) and under 4 TFLOP each; M a multiple of 4 and K of
    512, so that torch._scaled_mm computes them right (docs/blockwise.md)."""
    if fresh == 0:
        from fp8ext.bench.suites.blockwise import blockwise_rows

        out = [r for r in blockwise_rows(None) if r["M"] >= 1024]
        out.append({"M": 8192, "N": 7168, "K": 7168, "weight": "ncu", "split": "extra"})
        return out
    rng = random.Random(seed)
    draw = lambda lo, hi: math.exp(rng.uniform(math.log(lo), math.log(hi)))  # noqa: E731
    out = []
    while len(out) < fresh:
        M, N = 4 * round(draw(1024, 16384) / 4), 64 * round(draw(1024, 65536) / 64)
        K = 512 * round(draw(1024, 32768) / 512)
        if min(M, N) * K >= 50 << 20 and 2 * M * N * K <= 4e12:
            out.append({"M": M, "N": N, "K": K, "weight": f"fresh-{seed}", "split": "fresh"})
    return out


def child(fresh: int, seed: int) -> None:
    import fp8ext
    from fp8ext import ops
    from fp8ext.bench.timing import Timer
    from fp8ext.testing import random_blockwise_operands

    fp8ext.set_backends("fp8ext")
    timer = Timer(rep_ms=60)
    for i, row in enumerate(rows(fresh, seed)):
        M, N, K = row["M"], row["N"], row["K"]
        g = torch.Generator(device="cuda").manual_seed(1000 + i)
        a, b, sa, sb = random_blockwise_operands(M, N, K, device="cuda", generator=g)
        ours = lambda: ops.scaled_mm(a, b, sa, sb)  # noqa: E731
        fns = {"fp8ext_us": ours}
        # torch computes the shape right only with M and K / 128 (rounded up) multiples of 4 (docs/blockwise.md).
        if M % 4 == 0 and (-(-K // 128)) % 4 == 0:
            fns["torch_us"] = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        out = ours()
        weights = torch.arange(1, out.numel() + 1, device="cuda", dtype=torch.int64).view_as(out) % 9973
        checksum = int((out.view(torch.int16).to(torch.int64) * weights).sum().item())
        times = timer.interleaved(fns, rounds=3)
        print(json.dumps({**row, "kernel": ops.selected_blockwise_kernel(M, N, K, torch_ok=False),
                          "checksum": checksum, **times}), flush=True)
        del a, b, sa, sb, out, weights


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=1, help="child processes per band")
    ap.add_argument("--json", default=None)
    ap.add_argument("--fresh", type=int, default=0, help="time this many new shapes instead of the suite's rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.fresh, args.seed)
        return
    runs = []
    for p in range(args.procs):
        for band in BANDS:
            env = {**os.environ, "FP8EXT_BLOCKWISE_MAX_BAND": str(band)}
            cmd = [sys.executable, __file__, "--child", "--fresh", str(args.fresh), "--seed", str(args.seed)]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if res.returncode != 0:
                sys.exit(f"child (band {band}) failed:\n{res.stderr[-3000:]}")
            runs.append({"band": band, "proc": p, "rows": [json.loads(x) for x in res.stdout.splitlines()]})
            print(f"band {band}, process {p}: {len(runs[-1]['rows'])} rows", flush=True)
    summary = summarize(runs)
    print(json.dumps(summary, indent=1))
    if args.json:
        from fp8ext.bench.common import suite_record

        with open(args.json, "w") as f:
            json.dump({**suite_record("probe-blockwise-band"), "method": __doc__.strip(), "summary": summary,
                       "runs": runs}, f, indent=1)


def summarize(runs: list[dict]) -> dict:
    """Per band: geomean over rows of torch / fp8ext (where torch ran) per split; and per row the band-8 time
    over the band-1 time (geomean over processes), with the checksums' agreement."""
    by_band = {b: [r for r in runs if r["band"] == b] for b in BANDS}
    out = {}
    for band, band_runs in by_band.items():
        for split in ("tune", "heldout", "extra", "fresh"):
            ratios = [r["torch_us"] / r["fp8ext_us"] for run in band_runs for r in run["rows"]
                      if r["split"] == split and r.get("torch_us") and r.get("fp8ext_us")]
            if ratios:
                out[f"band {band}, {split}: geomean torch / fp8ext ({len(ratios)} samples)"] = round(
                    math.exp(sum(map(math.log, ratios)) / len(ratios)), 4)
    per_row = []
    n = len(by_band[BANDS[0]][0]["rows"])
    for i in range(n):
        t = {b: [run["rows"][i]["fp8ext_us"] for run in by_band[b]] for b in BANDS}
        g = {b: math.exp(sum(map(math.log, v)) / len(v)) for b, v in t.items()}
        row = by_band[BANDS[0]][0]["rows"][i]
        sums = {run["rows"][i]["checksum"] for b in BANDS for run in by_band[b]}
        per_row.append([row["M"], row["N"], row["K"], row["split"], row["kernel"],
                        round(g[BANDS[1]] / g[BANDS[0]], 4), len(sums) == 1])
    out["per row: M, N, K, split, kernel, band-8 time / band-1 time, checksums agree"] = per_row
    for split in ("tune", "heldout", "fresh"):
        r = [x[5] for x in per_row if x[3] == split]
        if r:
            out[f"{split}: geomean band-8 / band-1 time ({len(r)} rows)"] = round(
                math.exp(sum(map(math.log, r)) / len(r)), 4)
            out[f"{split}: worst band-8 / band-1 time"] = max(r)
    out["checksums agree on every row"] = all(x[6] for x in per_row)
    return out


if __name__ == "__main__":
    main()
