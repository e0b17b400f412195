"""inductor-peer: fp8ext against torch.compile max-autotune of torch._scaled_mm (persistent TMA templates on) on the
7 shapes of the inductor baseline, one shape per process, cheapest compile first, until --budget-s runs out.
Compiling takes 22-85 s per shape on the H200, and a process per shape keeps one compile that hangs or
runs long from taking the others with it. Each process is the custom suite with --compile-peer."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..common import geomean
from ..registry import register_suite

# INDUCTOR_SHAPES, cheapest compile first.
ORDER = ["16384x8192x8192", "16x8192x8192", "1024x10240x8192", "2048x4096x14336", "8192x8192x8192",
         "128x28672x4096", "4096x57344x8192"]
MIN_LEFT_S = 60  # a shape started with less than this left would not finish compiling


def one_shape(shape: str, args, out: Path, timeout_s: float) -> list[dict]:
    """The custom suite with the compiled peer on one shape, in its own process: its rows, or [] (with the tail of
    its output) where it failed or ran out of time."""
    cmd = [sys.executable, "-m", "fp8ext.bench", "--suite", "custom", "--shapes", shape, "--accum", args.accum,
           "--compile-peer", "--quiet", "--rep-ms", str(args.rep_ms), "--rounds", str(args.rounds),
           "--json", str(out)] + (["--no-check"] if args.no_check else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"inductor peer: {shape} did not finish in {timeout_s:.0f} s")
        return []
    if proc.returncode != 0 or not out.exists():
        print(f"inductor peer: {shape} failed (exit code {proc.returncode})")
        print("\n".join((proc.stdout + proc.stderr).splitlines()[-3:]))
        return []
    return json.loads(out.read_text())["rows"]


@register_suite("inductor-peer", help="torch.compile max-autotune peer on the inductor shapes, a process per shape "
                                      "within --budget-s",
                defaults={"accum": "fast"},
                options={"--budget-s": dict(type=float, default=600,
                                            help="inductor-peer suite: seconds for all shapes (default 600)")})
def compile_peer(args) -> dict:
    start, rows, missing = time.time(), [], []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in ORDER:
            left = args.budget_s - (time.time() - start)
            if left < MIN_LEFT_S:
                print(f"inductor peer: out of time before {shape}")
                missing.append(shape)
                continue
            got = one_shape(shape, args, Path(tmp) / f"{shape}.json", left)
            missing += [] if got else [shape]
            for r in got:
                print(f"{r['M']}x{r['N']}x{r['K']}: fp8ext {r['fp8ext_us']:.1f} us, compiled "
                      f"{r['torch_compile_rowwise_us']:.1f} us ({r['torch_compile_rowwise_us'] / r['fp8ext_us']:.3f}x), "
                      f"eager row-wise {r['torch_rowwise_us'] / r['fp8ext_us']:.3f}x", flush=True)
            rows += got
    compiled = [r["torch_compile_rowwise_us"] / r["fp8ext_us"] for r in rows]
    summary = {"shapes measured": f"{len({(r['M'], r['N'], r['K']) for r in rows})} of {len(ORDER)}",
               "not measured": ", ".join(missing) or "none",
               "geomean vs compiled": geomean(compiled),
               "rows at >= 1.0x vs compiled": sum(x >= 1.0 for x in compiled),
               "geomean vs eager rowwise": geomean(r["torch_rowwise_us"] / r["fp8ext_us"] for r in rows)}
    return {"method": f"one process per shape (custom suite, --compile-peer, torch.compile mode "
                      f"max-autotune-no-cudagraphs, persistent TMA templates), {args.rounds} interleaved turns of "
                      f"{args.rep_ms / args.rounds:.0f} ms per peer; budget {args.budget_s:.0f} s",
            "summary": summary, "rows": rows}
