"""Times the row-wise overlapped (precise) mainloop variants of scripts/probe_rowwise_mainloop.cu next to the
library's kernel of the same configuration (forced) and torch._scaled_mm row-wise with use_fast_accum=False
(cuBLASLt), on the same tensors, L2 flushed, interleaved turns, medians (fp8ext.bench's Timer). Every variant's
output is compared bit for bit with the library's (the adds are the same, in the same order).

  python scripts/probe_rowwise_mainloop.py --so probe_rowwise_mainloop.so --json out.json

--so may be given more than once as PATH@TAG (builds from two trees): each loads in the same process and its
variants are timed as NAME@TAG. Each kernel runs on a few problems of the M range its tile is meant for
(PROBLEMS), not where the dispatch would pick it: on a problem the dispatch gives another kernel, the ratio to
torch says nothing of the library's speed there.
"""
import argparse
import ctypes
import json
import math

import torch

import fp8ext
from fp8ext.bench.common import run_record
from fp8ext.bench.timing import TIMER_METHOD, Timer
from fp8ext.testing import random_operands

from probe_ctypes import ProbeBuild  # scripts/probe_ctypes.py

PROBLEMS = {
    "coop_128x128x128_c1x2_ov_precise_bf16": [(8192, 8192, 8192), (4096, 14336, 4096), (8192, 4096, 14336),
                                              (16384, 7168, 2048), (2048, 28672, 8192), (4096, 1024, 8192)],
    "pp_64x128x128_c1x1_ov_precise_bf16": [(256, 8192, 8192), (512, 14336, 4096), (384, 4096, 14336),
                                           (128, 28672, 8192)],
    "swap_pp_64x64x128_c1x1_ov_precise_bf16": [(16, 8192, 8192), (32, 14336, 4096), (64, 4096, 14336),
                                               (8, 28672, 8192)],
}


class Probe(ProbeBuild):
    def __init__(self, spec: str):
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        super().__init__(spec, [vp, vp, vp, vp, vp, i64, i64, i64, vp, ctypes.c_size_t, ctypes.c_int, vp])

    def call(self, i, a, b, sa, sb, out):
        M, K = a.shape
        N = b.shape[1]
        self.run(i, a.data_ptr(), b.data_ptr(), sa.data_ptr(), sb.data_ptr(), out.data_ptr(), M, N, K,
                 self.workspace.data_ptr(), self.workspace.numel(), self.sm_count,
                 torch.cuda.current_stream().cuda_stream)
        return out


def measure(probes, timer, name, M, N, K, rounds):
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    fns = {"torch": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False)}

    def lib():
        with fp8ext.force_kernel(name):
            return fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False)
    ref = lib()
    fns["library"] = lib
    row = {"kernel": name, "M": M, "N": N, "K": K, "equal_to_library": {}}
    outs = {}
    for probe in probes:
        for i, variant in enumerate(probe.names):
            if variant.rpartition(".")[0] != name:
                continue
            tag = variant.rpartition(".")[2] + probe.tag
            outs[tag] = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            probe.call(i, a, b, sa, sb, outs[tag])
            row["equal_to_library"][tag] = bool(torch.equal(outs[tag], ref))
            fns[tag] = lambda probe=probe, i=i, tag=tag: probe.call(i, a, b, sa, sb, outs[tag])
    torch.cuda.synchronize()
    times = timer.interleaved(fns, rounds=rounds)
    row["us"] = {n: round(t, 2) for n, t in times.items()}
    row["ratio_to_torch"] = {n: round(times["torch"] / t, 4) for n, t in times.items() if n != "torch"}
    print(name, M, N, K, json.dumps(row["ratio_to_torch"]), "equal", row["equal_to_library"], flush=True)
    return row


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--so", required=True, action="append", help="PATH@TAG; repeat to compare builds")
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rep-ms", type=float, default=60)
    args = ap.parse_args()
    fp8ext.set_backends("fp8ext")
    probes = [Probe(spec) for spec in args.so]
    timer = Timer(rep_ms=args.rep_ms, warmup_ms=20)
    torch.manual_seed(20261203)
    rows = [measure(probes, timer, name, M, N, K, args.rounds) for name, shapes in PROBLEMS.items()
            for M, N, K in shapes]
    summary = {}
    for name in PROBLEMS:
        rs = [r for r in rows if r["kernel"] == name]
        timed = [t for t in rs[0]["ratio_to_torch"]]
        summary[name] = {f"{t} vs torch": round(geomean([r["ratio_to_torch"][t] for r in rs]), 4) for t in timed}
        for t in timed:
            if t.startswith("halves"):
                base = "lib" + t[len("halves"):]
                summary[name][f"{t} / {base}"] = round(geomean([r["us"][base] / r["us"][t] for r in rs]), 4)
    summary["all variants equal to the library"] = all(all(r["equal_to_library"].values()) for r in rows)
    print(json.dumps(summary, indent=1))
    if args.json:
        rec = {"what": "row-wise overlapped (precise) mainloop variants of scripts/probe_rowwise_mainloop.cu against "
                       "the library's kernels and torch._scaled_mm with use_fast_accum=False",
               **run_record(), "method": TIMER_METHOD, "builds": args.so,
               "summary": summary, "rows": rows}
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
