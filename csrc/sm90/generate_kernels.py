#!/usr/bin/env python3
"""The one table of the sm90 kernel family, and the generator of its translation units.

Each row becomes csrc/sm90/rowwise/kernels/<name>.cu: one explicit instantiation of the template in rowwise_gemm.cuh,
which registers itself under <name> when the library loads (kernel_registry.h). One kernel per file so the
build compiles them in parallel and a change to one row recompiles one file.

    python csrc/sm90/generate_kernels.py          # rewrite kernels/ and the manifest from the table
    python csrc/sm90/generate_kernels.py --check  # exit 1 if either is not what the table says (CI test)

It also writes python/fp8ext/kernel_manifest.json: every kernel's traits as data (tile, cluster, schedule,
accumulation, dtypes, max M, workspace, twin), the hand-written decode kernels included. Python reads kernels'
traits from it; C++ gets the same traits from each kernel's KernelConfig (and the decode kernels' registration).

Tile and cluster shapes are in the MMA's frame (see kernel_config.h). Why each row exists is said beside it;
which row serves which (M, N, K) is the dispatcher's business (dispatch.cpp).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNEL_DIR = HERE / "rowwise" / "kernels"
DECODE_DIR = HERE / "decode"
MANIFEST = HERE.parent.parent / "python" / "fp8ext" / "kernel_manifest.json"

SCHEDULES = {"pp": "kPingpong", "coop": "kCooperative", "sk": "kStreamK"}


@dataclass(frozen=True)
class Row:
    schedule: str  # pp | coop | sk
    tile: tuple[int, int, int]
    cluster: tuple[int, int]
    accum: str  # fast | precise
    out: str  # bf16 | fp16 | fp32
    swap_ab: bool = False
    in_a: str = "e4m3"
    promotion: int = 4  # precise only: MMA k-blocks (32 of K each) between fp32 promotions; 4 = once per 128 of K
    overlap: bool = False  # precise only: overlap_promotion_mainloop.cuh instead of CUTLASS's draining MMA loop

    @property
    def name(self) -> str:
        tm, tn, tk = self.tile
        cm, cn = self.cluster
        parts = ["swap" if self.swap_ab else None, self.schedule, f"{tm}x{tn}x{tk}", f"c{cm}x{cn}",
                 None if self.promotion == 4 else f"pi{self.promotion}", "ov" if self.overlap else None, self.accum, self.out,
                 None if self.in_a == "e4m3" else f"a{self.in_a}"]
        return "_".join(p for p in parts if p)

    def config(self) -> str:
        tm, tn, tk = self.tile
        cm, cn = self.cluster
        return (f"::fp8ext::sm90::KernelConfig<{tm}, {tn}, {tk}, {cm}, {cn}, "
                f"::fp8ext::sm90::Schedule::{SCHEDULES[self.schedule]}, "
                f"::fp8ext::sm90::Accum::k{self.accum.capitalize()}, "
                f"::fp8ext::sm90::OutType::k{self.out.upper()}, {'true' if self.swap_ab else 'false'}, "
                f"::fp8ext::sm90::InType::k{self.in_a.upper()}, {self.promotion}{', true' if self.overlap else ''}>")


def _rows() -> list[Row]:
    rows: list[Row] = []
    # --- bf16 output, fast accumulation: the main product. ---
    # Decode (M <= 64): swap A/B so the tokens are the MMA's narrow N and the weight rows fill its 64-row M.
    rows += [Row("pp", (64, n, 128), (1, 1), "fast", "bf16", swap_ab=True) for n in (16, 32, 64)]
    # M 65..128: swapped 64-row weight tiles keep twice as many tiles as 128-row ones, so a weight of a few
    # hundred 128-row tiles fills its last wave better (57344 rows: 448 tiles = 3.4 waves, 896 = 6.8).
    rows.append(Row("pp", (64, 128, 128), (1, 1), "fast", "bf16", swap_ab=True))
    # M around 128 with weights too few tiles wide for a full wave: swapped, 128-row tiles along the weights.
    rows.append(Row("pp", (128, 128, 128), (1, 1), "fast", "bf16", swap_ab=True))
    # Few deep tiles (small N, large K): stream-K spreads K over the idle SMs.
    rows.append(Row("sk", (128, 32, 128), (1, 1), "fast", "bf16", swap_ab=True))
    # M 33..128 on weights whose 64-row tiles fill a last wave badly (18432 rows: 288 tiles, 2.2 waves): stream-K
    # evens out the waves, as swap_sk_128x32 does for M <= 32.
    rows += [Row("sk", (128, n, 128), (1, 1), "fast", "bf16", swap_ab=True) for n in (64, 128)]
    # Decode with the activations multicast: the two CTAs of a 2x1 cluster own neighbouring weight-row tiles and
    # read the same activation tile, which each then fetches half of from L2 (at M = 64-128 the activation tile is
    # as large as a 64-row weight tile, or twice as large).
    rows += [Row("pp", (64, n, 128), (2, 1), "fast", "bf16", swap_ab=True) for n in (32, 64, 128)]
    rows.append(Row("pp", (128, 128, 128), (2, 1), "fast", "bf16", swap_ab=True))
    # The same multicast for M <= 16 on the largest weights, where the 64x32 tile's token half was wasted.
    rows.append(Row("pp", (64, 16, 128), (2, 1), "fast", "bf16", swap_ab=True))
    # M = 65..128: four CTAs share the activation tile, so each fetches a quarter of it (its own 64-row weight tile
    # is half the bytes of that activation tile).
    rows.append(Row("pp", (64, 128, 128), (4, 1), "fast", "bf16", swap_ab=True))
    # Stream-K with the multicast, for the rows where stream-K evens out the waves at M = 16-128 (a 128-row weight
    # tile count a little over a whole number of waves: 57344 rows = 448 tiles = 3.4 waves).
    rows += [Row("sk", (128, n, 128), (2, 1), "fast", "bf16", swap_ab=True) for n in (32, 64, 128)]
    # M = 129..512 on the largest weights: 256 tokens per tile, so at M = 256 each weight tile is read once per call
    # instead of once per 128 tokens (64 x 256 per consumer warpgroup: 128 accumulator registers in fast mode).
    # Its 1x1 twin and a 128x128 4x1 stream-K tile were measured beside it and dropped (docs/design.md).
    rows.append(Row("sk", (128, 256, 128), (2, 1), "fast", "bf16", swap_ab=True))
    rows.append(Row("sk", (128, 128, 128), (1, 1), "fast", "bf16"))
    # Prefill / training (large M): big tiles, 2-CTA clusters multicasting the shared operand.
    rows.append(Row("pp", (128, 128, 128), (2, 1), "fast", "bf16"))
    rows.append(Row("pp", (128, 128, 128), (1, 2), "fast", "bf16"))
    rows.append(Row("coop", (128, 256, 128), (2, 1), "fast", "bf16"))
    rows.append(Row("coop", (256, 128, 128), (1, 2), "fast", "bf16"))
    # A width between 128 and 256 for weights whose column count is an odd number of 128-wide tiles
    # (N = 2176 = 17 x 128: 12 tiles of 192 instead of 17 of 128 or 9 of 256), with and without the cluster.
    rows += [Row("coop", (128, 192, 128), c, "fast", "bf16") for c in ((1, 1), (2, 1))]

    # --- bf16 output, precise accumulation (fp32 promotion every 128 of K). A promoting warpgroup holds two
    # accumulators, so a warpgroup's share of a tile stays at 64 x 128 or below: coop 128x256 precise spilled 820
    # bytes (ptxas, 2026-11-29). ---
    rows += [Row("pp", (64, n, 128), (1, 1), "precise", "bf16", swap_ab=True) for n in (32, 64, 128)]
    rows.append(Row("pp", (64, 128, 128), (1, 1), "precise", "bf16"))
    rows.append(Row("coop", (128, 128, 128), (1, 2), "precise", "bf16"))
    # Each promotion drains the warpgroup's wgmma pipeline (GmmaFP8Accumulation waits for all MMAs): a wider tile
    # (64 x 192 per warpgroup, 192 accumulator registers in all) and promoting every 256 of K both amortise it.
    rows.append(Row("coop", (128, 192, 128), (1, 2), "precise", "bf16"))
    rows.append(Row("coop", (128, 192, 128), (1, 2), "precise", "bf16", promotion=8))
    rows.append(Row("coop", (128, 128, 128), (1, 2), "precise", "bf16", promotion=8))
    # The same promotion every 128 of K without the drain: the next K tile's wgmmas run while the previous one's
    # partial sums are added (overlap_promotion_mainloop.cuh). Costs a third accumulator fragment, so only
    # warpgroup shares of 64 x 128 or less.
    rows += [Row("pp", (64, n, 128), (1, 1), "precise", "bf16", swap_ab=True, overlap=True) for n in (32, 64, 128)]
    rows.append(Row("pp", (64, 128, 128), (1, 1), "precise", "bf16", overlap=True))
    rows.append(Row("coop", (128, 128, 128), (1, 2), "precise", "bf16", overlap=True))
    # The decode multicast of the fast rows (two CTAs of a cluster share the activation tile) for the overlapped
    # precise kernels that serve M = 16-256.
    rows += [Row("pp", (64, n, 128), (2, 1), "precise", "bf16", swap_ab=True, overlap=True) for n in (32, 64, 128)]
    rows.append(Row("pp", (64, 128, 128), (1, 2), "precise", "bf16", overlap=True))

    # --- e5m2 activations x e4m3 weights (gradients), bf16 output: one large-M kernel per accumulation mode;
    # M <= 4 goes to the GEMV, which reads either type. ---
    rows.append(Row("coop", (128, 128, 128), (1, 2), "fast", "bf16", in_a="e5m2"))
    rows.append(Row("coop", (128, 128, 128), (1, 2), "precise", "bf16", in_a="e5m2"))

    # --- fp16 and fp32 output: one decode and one large-M kernel per accumulation mode. ---
    for out in ("fp16", "fp32"):
        for accum in ("fast", "precise"):
            rows.append(Row("pp", (64, 32, 128), (1, 1), accum, out, swap_ab=True))
            rows.append(Row("coop", (128, 128, 128), (1, 2), accum, out))
    return rows


ROWS = _rows()


@dataclass(frozen=True)
class DecodeKernel:
    """A hand-written decode kernel (csrc/sm90/decode/gemv_*.cu): no tiles, no tile scheduler, any activation type,
    up to max_m tokens. Its C++ registration states the same traits (a test compares the two)."""
    name: str
    accum: str
    out: str
    max_m: int


# gemv_rowwise.cu: one warp per weight row, exact fp32 sums, M <= 4, every output type.
# gemv_tensor_core.cu: mma.sync with K split over the warps of a block (r: weight rows per warp, s: K slices).
DECODE_KERNELS = [DecodeKernel(f"gemv_m4_precise_{out}", "precise", out, 4) for out in ("bf16", "fp16", "fp32")] + [
    DecodeKernel(f"gemv_tc_m32_{v}_fast_bf16", "fast", "bf16", 32) for v in ("r16_s4", "r16_s8", "r32_s8")]


def decode_kernel_names() -> set[str]:
    """The names that the hand-written decode kernels (csrc/sm90/decode/gemv_*.cu, outside this table) register under,
    read from their sources."""
    return {name for path in sorted(DECODE_DIR.glob("gemv_*.cu"))
            for name in re.findall(r'"(gemv_\w+_(?:bf16|fp16|fp32))"', path.read_text())}


def traits(k: Row | DecodeKernel) -> dict:
    """One kernel's traits as data: what dispatch's cost model, the tuner, the tests and fp8ext read (no name
    parsing anywhere). Tile and cluster are in the MMA's frame (swap_ab: the MMA's M runs over the call's N).
    `twin` is the bf16, e4m3 kernel of the same tile, cluster and schedule, whose calibration a kernel of another
    output or input type borrows (None when there is none, or for that kernel itself)."""
    if isinstance(k, DecodeKernel):
        return {"name": k.name, "schedule": "gemv", "tile": [0, 0, 0], "cluster": [1, 1], "accum": k.accum,
                "out": k.out, "in_a": "any", "swap_ab": False, "promotion": 0, "overlap": False, "max_m": k.max_m,
                "workspace": False, "twin": None}
    twin = None
    if (k.out, k.in_a) != ("bf16", "e4m3"):
        cand = Row(k.schedule, k.tile, k.cluster, k.accum, "bf16", k.swap_ab, "e4m3", k.promotion, k.overlap)
        twin = cand.name if cand in ROWS else None
    return {"name": k.name, "schedule": {"pp": "pingpong", "coop": "cooperative", "sk": "streamk"}[k.schedule],
            "tile": list(k.tile), "cluster": list(k.cluster), "accum": k.accum, "out": k.out, "in_a": k.in_a,
            "swap_ab": k.swap_ab, "promotion": k.promotion if k.accum == "precise" else 0, "overlap": k.overlap,
            "max_m": 0, "workspace": k.schedule == "sk", "twin": twin}


def manifest() -> str:
    """python/fp8ext/kernel_manifest.json: the traits of every kernel of the family, sorted by name."""
    kernels = sorted((traits(k) for k in [*ROWS, *DECODE_KERNELS]), key=lambda t: t["name"])
    lines = ",\n  ".join(json.dumps(k) for k in kernels)
    return f'{{"format": "fp8ext-kernel-manifest-1",\n "kernels": [\n  {lines}\n ]\n}}\n'


TEMPLATE = """\
// Generated by csrc/sm90/generate_kernels.py from its table; edit the table, not this file.
#include "sm90/rowwise/rowwise_gemm.cuh"

namespace {{
using Config = {config};
}}

FP8EXT_SM90_KERNEL("{name}", Config)
"""


def render() -> dict[str, str]:
    names = [r.name for r in ROWS]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f"duplicate kernel names in the table: {sorted(dupes)}")
    return {f"{r.name}.cu": TEMPLATE.format(name=r.name, config=r.config()) for r in ROWS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that kernels/ matches the table")
    parser.add_argument("--list", action="store_true", help="print the kernel names")
    args = parser.parse_args()
    files = render()
    if args.list:
        print("\n".join(sorted(f[:-3] for f in files)))
        return 0
    existing = {p.name for p in KERNEL_DIR.glob("*.cu")}
    if args.check:
        stale = sorted(existing - files.keys())
        missing = sorted(files.keys() - existing)
        changed = sorted(f for f in files.keys() & existing if (KERNEL_DIR / f).read_text() != files[f])
        for what, names in (("stale", stale), ("missing", missing), ("out of date", changed)):
            for n in names:
                print(f"{what}: csrc/sm90/rowwise/kernels/{n}", file=sys.stderr)
        stale_manifest = not MANIFEST.exists() or MANIFEST.read_text() != manifest()
        if stale_manifest:
            print(f"out of date: {MANIFEST.relative_to(HERE.parent.parent)}", file=sys.stderr)
        if decode_kernel_names() != {k.name for k in DECODE_KERNELS}:
            print("DECODE_KERNELS does not list the names that csrc/sm90/decode/gemv_*.cu register", file=sys.stderr)
            return 1
        return 1 if stale or missing or changed or stale_manifest else 0
    KERNEL_DIR.mkdir(exist_ok=True)
    for name in existing - files.keys():
        (KERNEL_DIR / name).unlink()
    for name, text in files.items():
        path = KERNEL_DIR / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    MANIFEST.write_text(manifest())
    print(f"{len(files)} kernels in {KERNEL_DIR.relative_to(HERE.parent.parent)}, traits of {len(files) + len(DECODE_KERNELS)} "
          f"in {MANIFEST.relative_to(HERE.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
