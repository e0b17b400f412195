"""Probe: at large M, is the block-scaled kernels' gap to cuBLASLt one of cycles or of energy?

Under sustained load the H200 sits at its power limit and lowers the SM clock until the board draws no more
(docs/design.md, "Peaks and the power cap"). A kernel can then be slower than another in two ways: it needs more
cycles for the same work, or it spends more energy per cycle and so runs at a lower clock. This probe tells the two
apart. For each shape it runs each peer back to back for --hold-s seconds, in turns (the order rotated every
round), while nvidia-smi samples the SM clock and the board power every 25 ms; over the second half of each turn
(the clock has settled by then) it takes the time per call from CUDA events, the median clock and power, and from
them the cycles per call (time x clock) and the energy per call (time x power).

Peers, all on the same fresh random operands:
  bw:<kernel>     fp8ext block-wise, that kernel forced (default: the 2x1-cluster overlapped 128 x 128 tile, the
                  design of cuBLASLt's own; and the 1x2 cluster with CUTLASS's mainloop)
  torch_blockwise torch._scaled_mm with the same block-wise scales (cuBLASLt)
  rowwise_fast    fp8ext with row-wise scales and fast accumulation on the same a and b: no per-group promotion

Operands are 100 MB and more, beyond the 50 MB L2, and the calls follow one another with no flush: this is the
steady state of a long stream of large GEMMs, which is what the power limit governs.

    python scripts/probe_power_clock.py [--shapes 8192x7168x7168,...] [--json bench/results/<record>.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time

import torch

DEFAULT_SHAPES = "8192x7168x7168,4096x7168x18432,16384x4096x7168"
DEFAULT_KERNELS = "bw_coop_128x128x128_c2x1_ov_bf16,bw_coop_128x128x128_c1x2_bf16"


class Sampler:
    """nvidia-smi's clock and power readings, each stamped with the host's time.monotonic() on arrival."""

    def __init__(self, period_ms: int):
        self.samples: list[tuple[float, float, float]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "-i", str(torch.cuda.current_device()), "--query-gpu=clocks.sm,power.draw",
             "--format=csv,noheader,nounits", f"-lms={period_ms}"],
            stdout=subprocess.PIPE, text=True, bufsize=1)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                mhz, watts = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.monotonic(), mhz, watts))

    def between(self, t0: float, t1: float) -> list[tuple[float, float]]:
        return [(m, w) for t, m, w in list(self.samples) if t0 <= t <= t1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def hold(fn, seconds: float, chunk: int) -> tuple[list[tuple[float, float]], float, float]:
    """fn() back to back for `seconds`: (per chunk of `chunk` calls, (host time at its end, GPU us per call)), and the
    host times at which the second half of the turn began and the turn ended."""
    fn()
    torch.cuda.synchronize()
    t_start = time.monotonic()
    pending, done = [], []
    while time.monotonic() - t_start < seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(chunk):
            fn()
        end.record()
        pending.append((start, end))
        # Keep the queue short, so that a chunk's host time is close to when the GPU ran it.
        while len(pending) > 2:
            s, e = pending.pop(0)
            e.synchronize()
            done.append((time.monotonic(), 1e3 * s.elapsed_time(e) / chunk))
    for s, e in pending:
        e.synchronize()
        done.append((time.monotonic(), 1e3 * s.elapsed_time(e) / chunk))
    t_end = time.monotonic()
    return done, t_start + 0.5 * (t_end - t_start), t_end


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK[,MxNxK...]")
    p.add_argument("--kernels", default=DEFAULT_KERNELS, help="block-wise kernels to force, comma-separated")
    p.add_argument("--hold-s", type=float, default=3.0,
                   help="seconds each peer runs per turn (nvidia-smi's power is a 1 s average: over the second half "
                   "of a 3 s turn it is all this turn's)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--period-ms", type=int, default=25)
    p.add_argument("--json")
    args = p.parse_args()

    import fp8ext
    from fp8ext.bench.common import run_record
    from fp8ext.testing import random_blockwise_operands, random_scales

    # fp8ext's own kernels only: rowwise_fast is then fp8ext's row-wise kernel, not torch's through the backstop.
    fp8ext.set_backends("fp8ext")
    sampler = Sampler(args.period_ms)
    time.sleep(0.5)
    if not sampler.samples:
        raise SystemExit("nvidia-smi gave no samples")
    rows, summary = [], {}
    try:
        for shape in args.shapes.split(","):
            M, N, K = (int(x) for x in shape.split("x"))
            a, b, sa, sb = random_blockwise_operands(M, N, K, device="cuda")
            ra, rb = random_scales(M, device="cuda", shape=(M, 1)), random_scales(N, device="cuda", shape=(1, N))

            # name: (the call, the block-wise kernel forced for it)
            peers = {f"bw:{k}": (lambda: fp8ext.scaled_mm(a, b, sa, sb), k) for k in args.kernels.split(",")}
            peers["torch_blockwise"] = (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16), None)
            peers["rowwise_fast"] = (lambda: fp8ext.scaled_mm(a, b, ra, rb, use_fast_accum=True), None)
            rowwise_kernel = fp8ext.selected_kernel(M, N, K, use_fast_accum=True, torch_ok=False)
            # About 20 ms of GPU work a chunk.
            one = hold(peers["torch_blockwise"][0], 0.2, 1)[0]
            chunk = max(1, int(20000 / statistics.median(us for _, us in one)))
            names = list(peers)
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    fn, kernel = peers[name]
                    with fp8ext.force_kernel(kernel):
                        chunks, t_half, t_end = hold(fn, args.hold_s, chunk)
                    us = statistics.median(u for t, u in chunks if t >= t_half)
                    smp = sampler.between(t_half, t_end)
                    mhz = statistics.median(m for m, _ in smp) if smp else float("nan")
                    watts = statistics.median(w for _, w in smp) if smp else float("nan")
                    rows.append({"M": M, "N": N, "K": K, "round": r, "peer": name, "us": us,
                                 "tflops": 2.0 * M * N * K / (us * 1e-6) / 1e12, "sm_mhz": mhz, "watts": watts,
                                 "samples": len(smp), "mcycles": us * mhz * 1e-6, "mj": us * watts * 1e-3})
                    print(f"{shape:>18} r{r} {name:<42} {us:9.1f} us {mhz:6.0f} MHz {watts:6.0f} W", flush=True)
            per = {}
            for name in names:
                mine = [x for x in rows if (x["M"], x["N"], x["K"]) == (M, N, K) and x["peer"] == name]
                per[name] = {k: statistics.median(x[k] for x in mine)
                             for k in ("us", "sm_mhz", "watts", "mcycles", "mj")}
            ref = per["torch_blockwise"]
            for name, v in per.items():
                v["vs_torch"] = {"time": ref["us"] / v["us"], "clock": v["sm_mhz"] / ref["sm_mhz"],
                                 "cycles": ref["mcycles"] / v["mcycles"], "energy": ref["mj"] / v["mj"]}
            per["rowwise_fast"]["kernel"] = rowwise_kernel
            summary[shape] = per
            del a, b, sa, sb, ra, rb
    finally:
        sampler.stop()
    print("\nper shape, peer: medians over rounds; vs_torch: torch / peer for time, cycles and energy (above 1: the "
          "peer needs less), peer / torch for the clock")
    for shape, per in summary.items():
        for name, v in per.items():
            r = v["vs_torch"]
            print(f"{shape:>18} {name:<42} time {r['time']:.3f} clock {r['clock']:.3f} cycles {r['cycles']:.3f} "
                  f"energy {r['energy']:.3f}  ({v['sm_mhz']:.0f} MHz, {v['watts']:.0f} W)")
    if args.json:
        record = {**run_record(), "probe": "power_clock", "hold_s": args.hold_s, "rounds": args.rounds,
                  "period_ms": args.period_ms, "summary": summary, "rows": rows}
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
