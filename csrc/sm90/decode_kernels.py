"""The hand-written decode kernels (csrc/sm90/decode/), outside generate_kernels.py's tables: their traits for the
kernel manifest, and the names their sources register under."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DECODE_DIR = Path(__file__).resolve().parent / "decode"


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
# grouped/grouped_gemv.cu: gemv_tensor_core.cu's block on each group's rows (e4m3; any M, in chunks of 32 rows),
# registered in the grouped family: row-wise fast and precise, and block-wise (bw_gemv_tc.cu's scaling).
GROUPED_DECODE_SHAPES = ("m32_r16_s2",)
GROUPED_DECODE_KERNELS = [DecodeKernel(f"grp_gemv_tc_{v}_{accum}_bf16", accum, "bf16", 0)
                          for v in GROUPED_DECODE_SHAPES for accum in ("fast", "precise")] + [
    DecodeKernel(f"grp_bw_gemv_tc_{v}_bf16", "precise", "bf16", 0) for v in GROUPED_DECODE_SHAPES]


@dataclass(frozen=True)
class BlockwiseDecodeKernel:
    """A hand-written block-scaled decode kernel (csrc/sm90/decode/bw_gemv_*.cu): the row-wise decode kernel
    `rowwise_twin` with the scales applied inside the K loop; e4m3 activations, up to max_m tokens. The dispatch
    predicts its time from its twin's (blockwise_dispatch.h). Its C++ registration states the same traits."""
    name: str
    out: str
    max_m: int
    rowwise_twin: str


# bw_gemv_m4.cu: gemv_rowwise.cu's kernel, every output type. bw_gemv_tc.cu: gemv_tensor_core.cu's three variants.
BLOCKWISE_DECODE_KERNELS = [BlockwiseDecodeKernel(f"bw_gemv_m4_{out}", out, 4, f"gemv_m4_precise_{out}")
                            for out in ("bf16", "fp16", "fp32")] + [
    BlockwiseDecodeKernel(f"bw_gemv_tc_m32_{v}_bf16", "bf16", 32, f"gemv_tc_m32_{v}_fast_bf16")
    for v in ("r16_s4", "r16_s8", "r32_s8")]


def decode_kernel_names() -> set[str]:
    """The names that the hand-written row-wise decode kernels (csrc/sm90/decode/gemv_*.cu, outside the table)
    register under, read from their sources."""
    return {name for path in sorted(DECODE_DIR.glob("gemv_*.cu"))
            for name in re.findall(r'"(gemv_\w+_(?:bf16|fp16|fp32))"', path.read_text())}


def blockwise_decode_kernel_names() -> set[str]:
    """The names that the hand-written block-scaled decode kernels (csrc/sm90/decode/bw_gemv_*.cu) register
    under, read from their sources."""
    return {name for path in sorted(DECODE_DIR.glob("bw_gemv_*.cu"))
            for name in re.findall(r'"(bw_gemv_\w+_(?:bf16|fp16|fp32))"', path.read_text())}


def grouped_decode_kernel_names() -> set[str]:
    """The names that the hand-written grouped decode kernels (csrc/sm90/grouped/grouped_gemv.cu) register under,
    read from their source."""
    source = DECODE_DIR.parent / "grouped" / "grouped_gemv.cu"
    return set(re.findall(r'"(grp_(?:bw_)?gemv_\w+_bf16)"', source.read_text()))
