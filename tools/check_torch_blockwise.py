"""Check: which K does this torch's block-wise torch._scaled_mm compute correctly?

The block-wise backstop (csrc/sm90/blockwise_dispatch.h) hands torch only the shapes measured right on torch 2.11
(M % 4 == 0 and ceil(K / 128) % 4 == 0: sm90::torch_blockwise_computes) and is off on every other torch release.
Before turning it on for another release, run this there: for each K it calls torch._scaled_mm with block-wise
scales in torch's layouts on fresh random operands and compares the result with the float64 reference under the
block-wise bound (fp8ext.testing). Prints one line per K; --json writes a record.

    python tools/check_torch_blockwise.py [--json bench/results/<record>.json]
"""
from __future__ import annotations

import argparse
import json

import torch

# K / 128 = 1..8, partial last groups (976, 1008, 3008, 7104), and large K of both kinds.
KS = [128, 256, 384, 512, 640, 768, 896, 1024, 976, 1008, 2880, 3008, 4096, 4288, 7104, 7168, 29568]
M, N = 256, 512


def check_k(K: int) -> dict:
    from fp8ext.testing import check_against_reference, random_blockwise_operands, reference

    a, b, sa, sb = random_blockwise_operands(M, N, K, device="cuda")
    groups = -(-K // 128)
    row = {"K": K, "k_groups": groups, "k_groups_multiple_of_4": groups % 4 == 0}
    try:
        out = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
    except (RuntimeError, NotImplementedError, ValueError) as e:  # ValueError: "Invalid scaling configuration"
        return {**row, "torch": "refused: " + str(e).splitlines()[0]}
    ref = reference(a, b, sa, sb)
    row["rel_err"] = float((out.double() - ref).norm() / ref.norm())
    try:
        check_against_reference(out, a, b, sa, sb, use_fast_accum=False)
        row["torch"] = "right"
    except AssertionError as e:
        row["torch"] = "wrong: " + str(e)[:160]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for K in KS:
        rows.append(check_k(K))
        r = rows[-1]
        print(f"K={K:6d} groups={r['k_groups']:4d} %4={r['k_groups'] % 4} rel_err={r.get('rel_err', float('nan')):.3g} "
              f"{r['torch'][:60]}", flush=True)
    if args.json:
        from fp8ext.bench.common import suite_record

        record = {**suite_record("check-torch-blockwise"), "method": __doc__.split("\n\n")[1].replace("\n", " "),
                  "M": M, "N": N, "rows": rows}
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
