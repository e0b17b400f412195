"""Times the block-scaled mainloop variants of scripts/probe_blockwise_mainloop.cu next to the library's kernels
(forced, no backstop) and torch._scaled_mm block-wise (cuBLASLt), on the same tensors, L2 flushed, interleaved
turns, medians (fp8ext.bench's Timer).

Two parts:
  - a K sweep at 8448 x 7168 (66 x 56 tiles of 128 x 128: 28 full waves of 132 SMs, no partial wave) for K = 1024 ..
    16384: time = tiles a SM x (fixed cost a tile + K tiles x cost a K tile), so the slope against K separates the
    mainloop's cost from the per-tile prologue and epilogue, for each kernel;
  - a few large problems.

  python scripts/probe_blockwise_mainloop.py --so probe_blockwise_mainloop.so --json out.json

--so may be given more than once as PATH@TAG (two builds of the probe, or one with its SASS patched): each loads in
the same process and its variants are timed as NAME@TAG, so builds are compared in the same turns.
"""
import argparse
import ctypes
import json

import torch

import fp8ext
from fp8ext.bench.common import run_record
from fp8ext.bench.timing import TIMER_METHOD, Timer
from fp8ext.testing import random_blockwise_operands

from probe_ctypes import ProbeBuild  # scripts/probe_ctypes.py

LIB_KERNELS = ["bw_coop_128x128x128_c2x1_ov_bf16", "bw_coop_128x128x128_c1x2_ov_bf16"]
K_SWEEP = [(8448, 7168, k) for k in (1024, 2048, 4096, 8192, 16384)]
LARGE = [(8192, 7168, 7168), (16384, 7168, 2048), (4096, 18432, 7168), (8192, 2112, 7168), (12288, 4096, 4096)]
# Variants whose result is not the product (timed only).
UNCHECKED = {"nofold_c2x1"}


class Probe(ProbeBuild):
    def __init__(self, spec: str):
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        super().__init__(spec, [vp, vp, vp, i64, i64, vp, i64, i64, vp, i64, i64, i64, vp, ctypes.c_size_t,
                                ctypes.c_int, vp])

    def call(self, i, a, b, sa, sb, out):
        M, K = a.shape
        N = b.shape[1]
        self.run(i, a.data_ptr(), b.data_ptr(), sa.data_ptr(), sa.stride(0), sa.stride(1), sb.data_ptr(),
                 sb.stride(0), sb.stride(1), out.data_ptr(), M, N, K, self.workspace.data_ptr(),
                 self.workspace.numel(), self.sm_count, torch.cuda.current_stream().cuda_stream)
        return out


def measure(probes, timer, M, N, K, rounds, variants):
    a, b, sa, sb = random_blockwise_operands(M, N, K, device="cuda")
    ref = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    fns = {"torch": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)}
    row = {"M": M, "N": N, "K": K, "checks": {}}
    lib_out = {}
    for name in LIB_KERNELS:
        def lib(name=name):
            with fp8ext.force_kernel(name):
                return fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        lib_out[name] = lib()
        row["checks"][name] = bool(torch.equal(lib_out[name], ref))
        fns[name] = lib
    outs = {}
    for probe in probes:
        for i, base in enumerate(probe.names):
            if base not in variants:
                continue
            name = base + probe.tag
            outs[name] = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            probe.call(i, a, b, sa, sb, outs[name])
            if base not in UNCHECKED:
                row["checks"][name] = bool(torch.equal(outs[name], ref))
            fns[name] = lambda probe=probe, i=i, name=name: probe.call(i, a, b, sa, sb, outs[name])
    torch.cuda.synchronize()
    times = timer.interleaved(fns, rounds=rounds)
    row["us"] = {n: round(t, 2) for n, t in times.items()}
    row["ratio_to_torch"] = {n: round(times["torch"] / t, 4) for n, t in times.items() if n != "torch"}
    print(M, N, K, json.dumps(row["ratio_to_torch"]), "checks", row["checks"], flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--so", required=True, action="append", help="PATH or PATH@TAG; repeat to compare builds")
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rep-ms", type=float, default=60)
    ap.add_argument("--variants", help="comma-separated names of the probe's variants to time (default: all)")
    args = ap.parse_args()
    fp8ext.set_backends("fp8ext")
    probes = [Probe(spec) for spec in args.so]
    probe = probes[0]
    timer = Timer(rep_ms=args.rep_ms, warmup_ms=20)
    torch.manual_seed(20261202)
    variants = args.variants.split(",") if args.variants else probe.names
    unknown = set(variants) - set(probe.names)
    if unknown:
        raise SystemExit(f"no such variants: {sorted(unknown)}; the .so has {probe.names}")
    rows = [dict(measure(probes, timer, M, N, K, args.rounds, variants), part="k_sweep") for M, N, K in K_SWEEP]
    rows += [dict(measure(probes, timer, M, N, K, args.rounds, variants), part="large") for M, N, K in LARGE]
    if args.json:
        rec = {"what": "block-scaled mainloop variants (scripts/probe_blockwise_mainloop.cu) against the library's "
                       "kernels and torch._scaled_mm block-wise",
               **run_record(), "method": TIMER_METHOD, "variants": variants, "builds": args.so,
               "library_kernels": LIB_KERNELS, "rows": rows}
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
