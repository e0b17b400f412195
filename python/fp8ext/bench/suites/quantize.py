"""quantize: fp8ext.quantize_rowwise's speed, timed the way the bench times (L2 flushed before every call, medians,
interleaved turns), on fresh random inputs.

  - bandwidth: bf16 inputs of 8192x8192 and 16384x8192 (and fp32 8192x8192, for information). Bytes moved =
    input bytes + FP8 output bytes + float32 scale bytes. Next to it, in the same interleaved turns, a
    device-to-device copy (dst.copy_(src), uint8) of half that many bytes, which moves the same bytes (read +
    write): the fraction of copy bandwidth is copy time / quantize time.
  - small M: M = 1, 2, 4, 8, 16 at K = 4096 and 8192, bf16, against an empty kernel (a one-element in-place add,
    as the floor suite times it): what a quantize costs over the fixed cost of one timed launch. Next to them, a
    plain read of the same input (torch.amax over all of x: one reduction kernel, one value written) and a copy
    of the same bytes as the bandwidth rows' (uint8 dst.copy_(src) of half the bytes moved: one read from HBM
    after the L2 flush and one write, no reduction), the floor for any kernel that must read x and write q. And,
    for information, a bare kernel (torch.cuda._sleep(0): one thread, a few instructions), the least a timed
    launch costs. The acceptance is against the add, as the floor suite's empty launch is; the add's kernel has
    more to do and more code than the bare one, and takes about 0.45 us longer on the H200.

Both parts also time the formula in plain eager torch ops (amax, scale, divide, clamp, cast: several kernels) as a
peer, for information.

  - blockwise: fp8ext.quantize_blockwise of bf16 activations (one scale per 1 x 128 group, the fused op) at
    K = 7168 (DeepSeek-V3's hidden size) and M from decode to prefill, against the same formula in torch ops
    (fp8ext's composed path, which it replaced for such inputs) and a copy of the same bytes. For information.
"""
from __future__ import annotations

from typing import Optional

import torch

from ... import quantize_blockwise, quantize_rowwise
from ...quantize import _quantize_blocks_composed
from ..common import E4M3, acceptance, ratio, timed_or_failed, torch_quantize_rowwise
from ..registry import register_suite
from ..timing import TIMER_METHOD, Timer

BANDWIDTH_SHAPES = [(8192, 8192, torch.bfloat16), (16384, 8192, torch.bfloat16), (8192, 8192, torch.float32)]
SMALL_M = (1, 2, 4, 8, 16)
SMALL_K = (4096, 8192)
MIN_COPY_FRACTION = 0.85  # acceptance: bf16 bandwidth rows at this fraction of copy bandwidth or more
MAX_EMPTY_RATIO = 1.2  # acceptance: small-M rows within this factor of an empty launch


BLOCKWISE_M = (1, 16, 128, 1024, 8192)
BLOCKWISE_K = 7168


def bytes_moved(M: int, K: int, dtype: torch.dtype, scales_per_row: int = 1) -> int:
    """What one quantization of an [M, K] input must move: the input, the FP8 output, the float32 scales (one per
    row, or one per 1 x 128 group: scales_per_row = ceil(K / 128))."""
    return M * K * torch.empty((), dtype=dtype).element_size() + M * K + M * scales_per_row * 4


def gbps(nbytes: int, us) -> Optional[float]:
    r = ratio(nbytes, us)
    return r * 1e6 / 1e9 if r is not None else None


def same_bytes_copy(x: torch.Tensor, scales_per_row: int = 1):
    """A device-to-device copy that moves what quantizing x moves: half of bytes_moved read, half written (uint8
    dst.copy_(src), buffers of their own)."""
    n = bytes_moved(*x.shape, x.dtype, scales_per_row) // 2
    src = torch.randint(0, 256, (n,), device=x.device, dtype=torch.uint8)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def bandwidth_row(M: int, K: int, dtype: torch.dtype, times: dict) -> dict:
    """A bandwidth row from the times in us ({"fp8ext_us", "copy_us", "torch_us"}, any a failure string)."""
    n = bytes_moved(M, K, dtype)
    row = {"part": "bandwidth", "M": M, "K": K, "dtype": str(dtype).replace("torch.", ""), "bytes_moved": n, **times,
           **{k.replace("_us", "_gbps"): gbps(n, t) for k, t in times.items()}}
    row["fraction_of_copy"] = ratio(times.get("copy_us"), times.get("fp8ext_us"))
    return row


def small_m_row(M: int, K: int, times: dict) -> dict:
    return {"part": "small_m", "M": M, "K": K, "dtype": "bfloat16", **times,
            "ratio_to_empty": ratio(times.get("fp8ext_us"), times.get("empty_us")),
            "read_ratio_to_empty": ratio(times.get("read_us"), times.get("empty_us")),
            "ratio_to_read": ratio(times.get("fp8ext_us"), times.get("read_us")),
            "copy_ratio_to_empty": ratio(times.get("copy_us"), times.get("empty_us")),
            "ratio_to_copy": ratio(times.get("fp8ext_us"), times.get("copy_us")),
            "torch_ratio_to_empty": ratio(times.get("torch_us"), times.get("empty_us")),
            "ratio_to_bare": ratio(times.get("fp8ext_us"), times.get("bare_us"))}


def summarize(rows: list[dict]) -> dict:
    bw = [r for r in rows if r["part"] == "bandwidth" and r["dtype"] == "bfloat16"]
    small = [r for r in rows if r["part"] == "small_m"]
    fractions = [r["fraction_of_copy"] for r in bw if r.get("fraction_of_copy") is not None]
    ratios = [r["ratio_to_empty"] for r in small if r.get("ratio_to_empty") is not None]
    out = {f"bandwidth {r['M']}x{r['K']} {r['dtype']} fraction of copy": r.get("fraction_of_copy")
           for r in rows if r["part"] == "bandwidth"}
    out["bf16 min fraction of copy"] = min(fractions) if fractions else None
    out[f"bandwidth acceptance (>= {MIN_COPY_FRACTION})"] = acceptance(fractions, len(bw),
                                                                       lambda v: min(v) >= MIN_COPY_FRACTION)
    out["small M max ratio to empty"] = max(ratios) if ratios else None
    worst = max((r for r in small if r.get("ratio_to_empty") is not None), key=lambda r: r["ratio_to_empty"],
                default=None)
    out["small M worst (M, K)"] = f"{worst['M']}x{worst['K']}" if worst else None
    reads = [r["read_ratio_to_empty"] for r in small if r.get("read_ratio_to_empty") is not None]
    out["small M plain read: min ratio to empty"] = min(reads) if reads else None
    over_read = [r["ratio_to_read"] for r in small if r.get("ratio_to_read") is not None]
    out["small M max ratio to the plain read"] = max(over_read) if over_read else None
    copies = [r["copy_ratio_to_empty"] for r in small if r.get("copy_ratio_to_empty") is not None]
    out["small M copy of the same bytes: min ratio to empty"] = min(copies) if copies else None
    over_copy = [r["ratio_to_copy"] for r in small if r.get("ratio_to_copy") is not None]
    out["small M max ratio to the copy"] = max(over_copy) if over_copy else None
    over_bare = [r["ratio_to_bare"] for r in small if r.get("ratio_to_bare") is not None]
    out["small M max ratio to a bare one-thread kernel (information)"] = max(over_bare) if over_bare else None
    out[f"small M acceptance (<= {MAX_EMPTY_RATIO})"] = acceptance(ratios, len(small),
                                                                  lambda v: max(v) <= MAX_EMPTY_RATIO)
    return out


def measure_bandwidth(timer: Timer, rounds: int) -> list[dict]:
    rows = []
    for M, K, dtype in BANDWIDTH_SHAPES:
        x = torch.randn(M, K, device="cuda", dtype=dtype)
        times = timed_or_failed(timer, {"fp8ext_us": lambda: quantize_rowwise(x), "copy_us": same_bytes_copy(x),
                                        "torch_us": lambda: torch_quantize_rowwise(x)}, rounds)
        rows.append(bandwidth_row(M, K, dtype, times))
        r = rows[-1]
        print(f"bandwidth {M}x{K} {r['dtype']}: fp8ext {r['fp8ext_gbps']} GB/s, copy {r['copy_gbps']} GB/s, "
              f"fraction of copy {r['fraction_of_copy']}", flush=True)
        del x
    return rows


def measure_small_m(timer: Timer, rounds: int) -> list[dict]:
    one = torch.ones(1, device="cuda")
    rows = []
    for K in SMALL_K:
        for M in SMALL_M:
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            peers = {"empty_us": lambda: one.add_(1), "bare_us": lambda: torch.cuda._sleep(0),
                     "fp8ext_us": lambda: quantize_rowwise(x),
                     "read_us": lambda: torch.amax(x), "copy_us": same_bytes_copy(x),
                     "torch_us": lambda: torch_quantize_rowwise(x)}
            times = timed_or_failed(timer, peers, rounds)
            rows.append(small_m_row(M, K, times))
            print(f"small M {M}x{K}: fp8ext {times['fp8ext_us']} us, empty {times['empty_us']} us, ratio "
                  f"{rows[-1]['ratio_to_empty']}", flush=True)
    return rows


def measure_blockwise(timer: Timer, rounds: int) -> list[dict]:
    rows = []
    groups = -(-BLOCKWISE_K // 128)
    for M in BLOCKWISE_M:
        x = torch.randn(M, BLOCKWISE_K, device="cuda", dtype=torch.bfloat16)
        times = timed_or_failed(timer, {"fp8ext_us": lambda: quantize_blockwise(x),
                                        "composed_us": lambda: _quantize_blocks_composed(x, (1, 128), E4M3),
                                        "copy_us": same_bytes_copy(x, groups)}, rounds)
        rows.append({"part": "blockwise", "M": M, "K": BLOCKWISE_K, "dtype": "bfloat16", **times,
                     "speedup_over_composed": ratio(times.get("composed_us"), times.get("fp8ext_us")),
                     "fraction_of_copy": ratio(times.get("copy_us"), times.get("fp8ext_us"))})
        print(f"blockwise {M}x{BLOCKWISE_K}: fp8ext {times['fp8ext_us']} us, torch ops {times['composed_us']} us, "
              f"copy {times['copy_us']} us", flush=True)
        del x
    return rows


def summarize_blockwise(rows: list[dict]) -> dict:
    return {f"blockwise {r['M']}x{r['K']}: fused / torch ops speed-up, fraction of copy":
            [r.get("speedup_over_composed"), r.get("fraction_of_copy")] for r in rows if r["part"] == "blockwise"}


@register_suite("quantize", help="quantize_rowwise: fraction of copy bandwidth, small M against an empty launch; "
                "quantize_blockwise against torch ops", defaults={"rep_ms": 60})
def quantize(args) -> dict:
    timer = Timer(rep_ms=args.rep_ms)
    rows = measure_bandwidth(timer, args.rounds) + measure_small_m(timer, args.rounds)
    rows += measure_blockwise(timer, args.rounds)
    return {"method": f"{TIMER_METHOD}, {args.rounds} interleaved turns, "
                      f"{args.rep_ms:g} ms per choice; bytes moved = input + FP8 output + float32 scales, copy of "
                      "the same bytes (uint8 dst.copy_(src) of half as many bytes, read + write); small M against a "
                      "one-element in-place add, a bare one-thread kernel (torch.cuda._sleep(0)), a plain read "
                      "(torch.amax) and a copy of the same bytes; torch "
                      "peer: eager amax, scale, divide, clamp, cast",
            "summary": {**summarize(rows), **summarize_blockwise(rows)}, "rows": rows}
