#!/usr/bin/env python3
"""The one manifest of the sm90 kernels, and the generator of their translation units.

Three tables: ROWS, the row-wise family (per-row / per-column or tensor-wise scales), BLOCKWISE_ROWS, the
block-scaled family (1 x 128 activation scales, 128 x 128 weight scales), and GROUPED_ROWS, the grouped row-wise
family (scaled_grouped_mm). Each row becomes one translation unit, csrc/sm90/{rowwise,blockwise,grouped}/kernels/
<name>.cu: one explicit instantiation of the template in rowwise/rowwise_gemm.cuh, blockwise/blockwise_gemm.cuh or
grouped/grouped_gemm.cuh, which registers itself under <name> when the library loads (rowwise/kernel_registry.h,
blockwise/blockwise_gemm.h, grouped/grouped_params.h). One kernel per file so the build compiles
them in parallel and a change to one row recompiles one file.

    python csrc/sm90/generate_kernels.py          # rewrite both kernels/ folders and the manifest from the tables
    python csrc/sm90/generate_kernels.py --check  # exit 1 if any of them is not what the tables say (CI test)
    python csrc/sm90/generate_kernels.py --list   # the row-wise kernels' names

It also writes python/fp8ext/kernel_manifest.json: every kernel's traits as data (tile, cluster, schedule,
accumulation, dtypes, max M, workspace, twin), the hand-written decode kernels (csrc/sm90/decode/, their table in
decode_kernels.py) included:
"kernels" lists the row-wise family, "blockwise_kernels" the block-scaled one, "grouped_kernels" the grouped one. Python reads kernels' traits from
it; C++ gets the same traits from each kernel's config (KernelConfig, BlockwiseConfig) and the decode kernels'
registration.

Kernel names, each part's meaning and the scheduler options a name may carry: docs/kernel_names.md.

Why each row exists is said beside it; which row serves which (M, N, K) is the dispatchers' business
(dispatch/dispatch.cpp, dispatch/blockwise_dispatch.cpp).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from decode_kernels import (BLOCKWISE_DECODE_KERNELS, DECODE_KERNELS, GROUPED_DECODE_KERNELS,  # noqa: F401
                            BlockwiseDecodeKernel, DecodeKernel, blockwise_decode_kernel_names, decode_kernel_names,
                            grouped_decode_kernel_names)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
KERNEL_DIR = HERE / "rowwise" / "kernels"
BLOCKWISE_KERNEL_DIR = HERE / "blockwise" / "kernels"
GROUPED_KERNEL_DIR = HERE / "grouped" / "kernels"
MANIFEST = ROOT / "python" / "fp8ext" / "kernel_manifest.json"

SCHEDULES = {"pp": "kPingpong", "coop": "kCooperative", "sk": "kStreamK"}
SCHEDULE_NAMES = {"pp": "pingpong", "coop": "cooperative", "sk": "streamk"}


def _shape_parts(swap_ab: bool, schedule: str, tile: tuple[int, int, int], cluster: tuple[int, int]) -> list:
    """The name parts both families share: [swap]_<schedule>_<tm>x<tn>x<tk>_c<cm>x<cn>."""
    return ["swap" if swap_ab else None, schedule, "x".join(map(str, tile)), "c" + "x".join(map(str, cluster))]


def _config_head(template: str, schedule: str, tile: tuple[int, int, int], cluster: tuple[int, int]) -> str:
    """The template arguments both families' configs start with: tile, cluster and schedule."""
    return (f"::fp8ext::sm90::{template}<{', '.join(map(str, (*tile, *cluster)))}, "
            f"::fp8ext::sm90::Schedule::{SCHEDULES[schedule]}, ")


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
        parts = [*_shape_parts(self.swap_ab, self.schedule, self.tile, self.cluster),
                 None if self.promotion == 4 else f"pi{self.promotion}", "ov" if self.overlap else None, self.accum,
                 self.out, None if self.in_a == "e4m3" else f"a{self.in_a}"]
        return "_".join(p for p in parts if p)

    def config(self) -> str:
        return (_config_head("KernelConfig", self.schedule, self.tile, self.cluster) +
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
    # as large as a 64-row weight tile, or twice as large). The 64x16 and 64x32 versions, for M <= 32, were never
    # the dispatch's pick and were dropped (docs/decisions.md).
    rows += [Row("pp", (64, n, 128), (2, 1), "fast", "bf16", swap_ab=True) for n in (64, 128)]
    rows.append(Row("pp", (128, 128, 128), (2, 1), "fast", "bf16", swap_ab=True))
    # M = 65..128: four CTAs share the activation tile, so each fetches a quarter of it (its own 64-row weight tile
    # is half the bytes of that activation tile).
    rows.append(Row("pp", (64, 128, 128), (4, 1), "fast", "bf16", swap_ab=True))
    # Stream-K with the multicast, for the rows where stream-K evens out the waves at M = 16-128 (a 128-row weight
    # tile count a little over a whole number of waves: 57344 rows = 448 tiles = 3.4 waves); its 128x64 version was
    # never the dispatch's pick and was dropped.
    rows += [Row("sk", (128, n, 128), (2, 1), "fast", "bf16", swap_ab=True) for n in (32, 128)]
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
    # accumulators, so a warpgroup's share of a tile stays at 64 x 128 or below: ptxas spills 820 bytes for coop
    # 128x256 precise. ---
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
    # precise kernels that serve M = 16-256 (the 64x32 version was never the dispatch's pick and was dropped).
    rows += [Row("pp", (64, n, 128), (2, 1), "precise", "bf16", swap_ab=True, overlap=True) for n in (64, 128)]
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
class GroupedRow(Row):
    """A grouped kernel (grouped/grouped_gemm.cuh): a row-wise config compiled as a pointer-array kernel, or with
    block-wise scales (then precise by construction, named as a block-scaled kernel)."""
    blockwise: bool = False

    @property
    def name(self) -> str:
        if self.blockwise:
            return "_".join(["grp", "bw", *filter(None, _shape_parts(self.swap_ab, self.schedule, self.tile,
                                                                     self.cluster)), self.out])
        return "grp_" + Row.name.fget(self)

    def config(self) -> str:
        return (_config_head("GroupedConfig", self.schedule, self.tile, self.cluster) +
                f"::fp8ext::sm90::Accum::k{self.accum.capitalize()}, "
                f"::fp8ext::sm90::OutType::k{self.out.upper()}, {'true' if self.swap_ab else 'false'}, "
                f"{'true' if self.blockwise else 'false'}>")


# Grouped (scaled_grouped_mm, bf16 output): many groups of a few tokens (MoE decode) swapped, so a group's tokens
# are the MMA's narrow N; groups of a hundred tokens and more on the 128 x 128 cooperative tile. The swapped tile is
# 128 weight rows deep: half as many tiles as 64 rows, each a longer weight read, faster at decode (docs/decisions.md);
# block-wise it must be, to hold whole 128-row weight scale blocks.
GROUPED_ROWS = [GroupedRow(*shape, accum, "bf16", swap_ab=swap) for accum in ("fast", "precise")
                for *shape, swap in (("pp", (128, 32, 128), (1, 1), True), ("coop", (128, 128, 128), (1, 1), False))] + [
    GroupedRow("coop", tile, (1, 1), "precise", "bf16", swap_ab=swap, blockwise=True)
    for tile, swap in (((128, 32, 128), True), ((128, 128, 128), False))]
# Groups averaging more rows than kNarrowMaxRowsPerGroup (grouped_dispatch.inc), fast accumulation: 128 x 256, half the
# A reads of the 128 x 128 tile per FLOP and no more padding along the rows (docs/decisions.md). Precise has none: a
# 64 x 256 share and its promotion copy do not fit twice in the registers (row-wise rows above).
GROUPED_ROWS.append(GroupedRow("coop", (128, 256, 128), (1, 1), "fast", "bf16"))


# Split kernels (grouped/grouped_gemm.cuh, grouped_split_launch): each small-tile grouped kernel above with the
# large-tile kernel of its family, one prologue writing both kernels' tables (each group to one of them by its rows on
# the device), registered beside the small-tile kernel in its translation unit. For calls whose groups are small on
# average but may hold one large group.
def _split_name(small: GroupedRow) -> str:
    return "grp_bw_split_bf16" if small.blockwise else f"grp_split_{small.accum}_{small.out}"


GROUPED_SPLITS = {small: large for small in GROUPED_ROWS if small.swap_ab for large in GROUPED_ROWS
                  if not large.swap_ab and large.tile == (128, 128, 128) and large.cluster == (1, 1) and
                  (large.blockwise, large.accum, large.out) ==
                  (small.blockwise, small.accum, small.out)}

# Split-K kernels (grouped_split.cuh, grouped_splitk_launch): each row-wise small-tile kernel with a partial kernel, the
# 128 x 128 tile with fp32 out, on which a large group too small to fill the GPU runs in K slices that a reduce kernel
# sums. The partial kernels are parts of these, not kernels a call can name (the op writes bf16).
GROUPED_PARTIALS = [GroupedRow("coop", (128, 128, 128), (1, 1), accum, "fp32") for accum in ("fast", "precise")]
GROUPED_SPLITKS = {small: partial for small in GROUPED_ROWS if small.swap_ab and not small.blockwise
                   for partial in GROUPED_PARTIALS if partial.accum == small.accum}


def _splitk_name(small: GroupedRow) -> str:
    return f"grp_splitk_{small.accum}_{small.out}"


@dataclass(frozen=True)
class BlockwiseRow:
    schedule: str  # pp | coop | sk
    tile: tuple[int, int, int]  # tile_k is the scale group along K, 128
    cluster: tuple[int, int]
    out: str  # bf16 | fp16 | fp32
    swap_ab: bool = False
    overlap: bool = False  # overlap_blockwise_mainloop.cuh instead of CUTLASS's draining MMA loop

    @property
    def name(self) -> str:
        parts = ["bw", *_shape_parts(self.swap_ab, self.schedule, self.tile, self.cluster),
                 "ov" if self.overlap else None, self.out]
        return "_".join(p for p in parts if p)

    def config(self) -> str:
        return (_config_head("BlockwiseConfig", self.schedule, self.tile, self.cluster) +
                f"::fp8ext::sm90::OutType::k{self.out.upper()}, {'true' if self.swap_ab else 'false'}"
                f"{', true' if self.overlap else ''}>")


def _blockwise_rows() -> list[BlockwiseRow]:
    rows: list[BlockwiseRow] = []
    # A consumer warpgroup holds its share of the fp32 sum and of the tensor core's partial (a third fragment with
    # ov), so its share of a tile stays at 64 x 128 or below; in the weight's frame a tile also holds whole
    # 128-column scale blocks. Each tile comes with CUTLASS's mainloop and with the overlapped one (ov), which
    # computes the same sums in the same order (a GPU test holds every ov kernel to its twin bit for bit).
    # Large M: the 128 x 128 cooperative tile, the only one built for every output type (fp16 and fp32 borrow the
    # bf16 kernel's fit in the dispatch).
    rows += [BlockwiseRow("coop", (128, 128, 128), (1, 1), out) for out in ("bf16", "fp16", "fp32")]
    rows.append(BlockwiseRow("coop", (128, 128, 128), (1, 1), "bf16", overlap=True))
    # The same tile in 2-CTA clusters, which share an operand's TMA loads between two SMs. CUTLASS's blockwise loop
    # does not order a stage's release with every consumer thread's scale reads in a cluster, so a cluster kernel
    # needs the overlapped mainloop (blockwise_gemm.cuh asserts it).
    rows += [BlockwiseRow("coop", (128, 128, 128), c, "bf16", overlap=True) for c in ((1, 2), (2, 1))]
    # Pingpong on 64-row tiles: twice as many tiles as 128 x 128 for the same call.
    rows += [BlockwiseRow("pp", (64, 128, 128), (1, 1), "bf16", overlap=ov) for ov in (False, True)]
    # Stream-K on the 128 x 128 tile: for few, deep tiles, K split across the SMs.
    rows += [BlockwiseRow("sk", (128, 128, 128), (1, 1), "bf16", overlap=ov) for ov in (False, True)]
    # Small M: swapped, so the tokens are the MMA's narrow N and the weight's 128-row scale blocks its M.
    rows += [BlockwiseRow("coop", (128, 64, 128), (1, 1), "bf16", swap_ab=True, overlap=ov) for ov in (False, True)]
    # Small M on weights of few tiles: swapped 32-token tiles with stream-K.
    rows += [BlockwiseRow("sk", (128, 32, 128), (1, 1), "bf16", swap_ab=True, overlap=ov) for ov in (False, True)]
    return rows


BLOCKWISE_ROWS = _blockwise_rows()


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


def blockwise_traits(k: BlockwiseRow | BlockwiseDecodeKernel) -> dict:
    """A block-scaled kernel's traits, in the same keys as traits() with the same meanings: accumulation is
    "precise" (fp32 promotion every K tile of 128, promotion 4 for the tile kernels), activations are e4m3.
    `twin` is the bf16 kernel of the same name whose dispatch fit a kernel of another output type borrows
    (blockwise_dispatch.cpp, blockwise_fit; None when there is none, or for that kernel itself); `rowwise_twin` is
    a decode kernel's row-wise counterpart, whose predicted time the dispatch scales (None for the tile kernels)."""
    if isinstance(k, BlockwiseDecodeKernel):
        cand = k.name[:-len(k.out)] + "bf16"
        twin = cand if k.out != "bf16" and cand in {d.name for d in BLOCKWISE_DECODE_KERNELS} else None
        return {"name": k.name, "schedule": "gemv", "tile": [0, 0, 0], "cluster": [1, 1], "accum": "precise",
                "out": k.out, "in_a": "e4m3", "swap_ab": False, "promotion": 0, "overlap": False, "max_m": k.max_m,
                "workspace": False, "twin": twin, "rowwise_twin": k.rowwise_twin}
    twin = None
    if k.out != "bf16":
        cand = BlockwiseRow(k.schedule, k.tile, k.cluster, "bf16", k.swap_ab, k.overlap)
        twin = cand.name if cand in BLOCKWISE_ROWS else None
    return {"name": k.name, "schedule": SCHEDULE_NAMES[k.schedule], "tile": list(k.tile), "cluster": list(k.cluster),
            "accum": "precise", "out": k.out, "in_a": "e4m3", "swap_ab": k.swap_ab, "promotion": 4,
            "overlap": k.overlap, "max_m": 0, "workspace": k.schedule == "sk", "twin": twin, "rowwise_twin": None}


def manifest() -> str:
    """python/fp8ext/kernel_manifest.json: the traits of every kernel, sorted by name; "kernels" is the row-wise
    family, "blockwise_kernels" the block-scaled one, "grouped_kernels" the grouped one."""
    kernels = sorted((traits(k) for k in [*ROWS, *DECODE_KERNELS]), key=lambda t: t["name"])
    blockwise = sorted((blockwise_traits(k) for k in [*BLOCKWISE_ROWS, *BLOCKWISE_DECODE_KERNELS]),
                       key=lambda t: t["name"])
    grouped = sorted([*({**traits(k), "name": k.name, "twin": None, "split_with": None,
                         "scaling": "blockwise" if k.blockwise else "rowwise"} for k in GROUPED_ROWS),
                      *({**traits(k), "name": _split_name(k), "twin": None, "split_with": large.name,
                         "scaling": "blockwise" if k.blockwise else "rowwise"} for k, large in GROUPED_SPLITS.items()),
                      *({**traits(k), "name": _splitk_name(k), "twin": None, "split_with": partial.name,
                         "scaling": "rowwise"} for k, partial in GROUPED_SPLITKS.items()),
                      *({**traits(k), "in_a": "e4m3", "split_with": None,
                         "scaling": "blockwise" if k.name.startswith("grp_bw_") else "rowwise"}
                        for k in GROUPED_DECODE_KERNELS)],
                     key=lambda t: t["name"])
    lines = ",\n  ".join(json.dumps(k) for k in kernels)
    blockwise_lines = ",\n  ".join(json.dumps(k) for k in blockwise)
    grouped_lines = ",\n  ".join(json.dumps(k) for k in grouped)
    return (f'{{"format": "fp8ext-kernel-manifest-1",\n "kernels": [\n  {lines}\n ],\n'
            f' "blockwise_kernels": [\n  {blockwise_lines}\n ],\n "grouped_kernels": [\n  {grouped_lines}\n ]\n}}\n')


TEMPLATE = """\
// Generated by csrc/sm90/generate_kernels.py from its table; edit the table, not this file.
#include "sm90/rowwise/rowwise_gemm.cuh"

namespace {{
using Config = {config};
}}

FP8EXT_SM90_KERNEL("{name}", Config)
"""

BLOCKWISE_TEMPLATE = """\
// Generated by csrc/sm90/generate_kernels.py from its block-wise table; edit the table, not this file.
#include "sm90/blockwise/blockwise_gemm.cuh"

namespace {{
using Config = {config};
}}

FP8EXT_SM90_BLOCKWISE_KERNEL("{name}", Config)
"""


GROUPED_TEMPLATE = """\
// Generated by csrc/sm90/generate_kernels.py from its grouped table; edit the table, not this file.
#include "sm90/grouped/grouped_gemm.cuh"

namespace {{
using Config = {config};
}}

FP8EXT_SM90_GROUPED_KERNEL("{name}", Config)
"""


def _render(rows, template: str) -> dict[str, str]:
    names = [r.name for r in rows]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f"duplicate kernel names in the table: {sorted(dupes)}")
    return {f"{r.name}.cu": template.format(name=r.name, config=r.config()) for r in rows}


GROUPED_SPLIT_TEMPLATE = """
namespace {{
using LargeConfig = {config};
}}

FP8EXT_SM90_GROUPED_SPLIT_KERNEL("{name}", Config, LargeConfig, "{large}")
"""

GROUPED_SPLITK_TEMPLATE = """
namespace {{
using PartialConfig = {config};
}}

FP8EXT_SM90_GROUPED_SPLITK_KERNEL("{name}", Config, PartialConfig, "{partial}")
"""


def _render_grouped() -> dict[str, str]:
    files = _render(GROUPED_ROWS + GROUPED_PARTIALS, GROUPED_TEMPLATE)
    for small, large in GROUPED_SPLITS.items():
        name = f"{small.name}.cu"
        files[name] = files[name].replace("grouped/grouped_gemm.cuh", "grouped/grouped_split.cuh")
        files[name] += GROUPED_SPLIT_TEMPLATE.format(name=_split_name(small), config=large.config(), large=large.name)
        if small in GROUPED_SPLITKS:
            partial = GROUPED_SPLITKS[small]
            files[name] += GROUPED_SPLITK_TEMPLATE.format(name=_splitk_name(small), config=partial.config(),
                                                          partial=partial.name)
    return files


def render() -> dict[Path, dict[str, str]]:
    """Each kernels/ folder and the files the tables put there."""
    return {KERNEL_DIR: _render(ROWS, TEMPLATE), BLOCKWISE_KERNEL_DIR: _render(BLOCKWISE_ROWS, BLOCKWISE_TEMPLATE),
            GROUPED_KERNEL_DIR: _render_grouped()}


def _check(outputs: dict[Path, dict[str, str]]) -> int:
    bad = False
    for folder, files in outputs.items():
        existing = {p.name for p in folder.glob("*.cu")}
        stale = sorted(existing - files.keys())
        missing = sorted(files.keys() - existing)
        changed = sorted(f for f in files.keys() & existing if (folder / f).read_text() != files[f])
        for what, names in (("stale", stale), ("missing", missing), ("out of date", changed)):
            for n in names:
                print(f"{what}: {(folder / n).relative_to(ROOT)}", file=sys.stderr)
        bad = bad or bool(stale or missing or changed)
    if not MANIFEST.exists() or MANIFEST.read_text() != manifest():
        print(f"out of date: {MANIFEST.relative_to(ROOT)}", file=sys.stderr)
        bad = True
    if decode_kernel_names() != {k.name for k in DECODE_KERNELS}:
        print("DECODE_KERNELS does not list the names that csrc/sm90/decode/gemv_*.cu register", file=sys.stderr)
        bad = True
    if blockwise_decode_kernel_names() != {k.name for k in BLOCKWISE_DECODE_KERNELS}:
        print("BLOCKWISE_DECODE_KERNELS does not list the names that csrc/sm90/decode/bw_gemv_*.cu register",
              file=sys.stderr)
        bad = True
    if grouped_decode_kernel_names() != {k.name for k in GROUPED_DECODE_KERNELS}:
        print("GROUPED_DECODE_KERNELS does not list the names that csrc/sm90/grouped/grouped_gemv.cu registers",
              file=sys.stderr)
        bad = True
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="only check that the kernels/ folders and the manifest match the tables")
    parser.add_argument("--list", action="store_true", help="print the row-wise kernels' names")
    args = parser.parse_args()
    outputs = render()
    if args.list:
        print("\n".join(sorted(f[:-3] for f in outputs[KERNEL_DIR])))
        return 0
    if args.check:
        return _check(outputs)
    for folder, files in outputs.items():
        folder.mkdir(exist_ok=True)
        for name in {p.name for p in folder.glob("*.cu")} - files.keys():
            (folder / name).unlink()
        for name, text in files.items():
            path = folder / name
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
    MANIFEST.write_text(manifest())
    n_row, n_bw = len(outputs[KERNEL_DIR]), len(outputs[BLOCKWISE_KERNEL_DIR])
    print(f"{n_row} kernels in {KERNEL_DIR.relative_to(ROOT)}, {n_bw} in {BLOCKWISE_KERNEL_DIR.relative_to(ROOT)}, "
          f"{len(GROUPED_ROWS) + len(GROUPED_PARTIALS)} in {GROUPED_KERNEL_DIR.relative_to(ROOT)}; "
          f"traits of {n_row + len(DECODE_KERNELS)} + {n_bw + len(BLOCKWISE_DECODE_KERNELS)} in "
          f"{MANIFEST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
