#!/usr/bin/env python3
"""Draw a set of fresh block-wise shapes: weights of models that no fit and no earlier run has read, and seeded M,
printed as the MxNxK list that `python -m fp8ext.bench --suite blockwise --shapes` takes.

    python tools/draw_fresh_shapes.py fresh-2026-12-03       # the first set; tuning rows since the refit it judged
    python tools/draw_fresh_shapes.py fresh-2026-12-03b      # the second, which judged that refit
    python tools/draw_fresh_shapes.py tune-grid              # the synthetic tuning grid (tuning rows only)

A set judges one fit and is then spent: once its times have been read it may become tuning material
(tools/fit_blockwise_dispatch.py --custom), and a new set, drawn here before any of its shapes is timed, judges
the next fit. The sets are fp8ext.zoo.FRESH_SETS: a new one is added there with its weights and an empty tuple of
M, and this draws the M to record there. A set's weights are checked against the zoo (both splits), the Llama
grid, DeepSeek-V3's layers, the synthetic tuning grid and every earlier set, so that none of its (N, K) was read
before; for a set whose M are recorded, the draw must still give them.

Per weight, four M, each log-uniform: in [1, 128], [129, 1023] and [1024, 16384], each rounded up to a multiple of
4 (torch's block-wise path declines other M, and the acceptance compares with it), and one in [1, 16384] as drawn.
Python's random.Random is seeded with '<set>/<model>/<weight>'.
"""
from __future__ import annotations

import math
import random
import sys

from fp8ext import zoo

# Weights a set shares with what was read before, and why that is allowed: the Llama grid's were read by the
# row-wise tables only, never by the block-wise fit.
SHARED = {"fresh-2026-12-03": {(4096, 4096), (6144, 4096)}}  # Qwen3-8B's o and qkv are Llama-3-8B's

M_RANGES = ((1, 128, True), (129, 1023, True), (1024, 16384, True), (1, 16384, False))


def draw_m(rng: random.Random, lo: int, hi: int, multiple_of_4: bool) -> int:
    m = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    m = min(max(m, lo), hi)
    return min(-(-m // 4) * 4, hi) if multiple_of_4 else m


def read_before(name: str) -> set[tuple[int, int]]:
    """The (N, K) of every weight read before set `name`: the zoo, the Llama grid, DeepSeek-V3, the tuning grid and
    the earlier sets."""
    seen = {(w["N"], w["K"]) for w in zoo.weights()} | set(zoo.LLAMA_NK) | set(zoo.TUNE_GRID_NK)
    seen |= {(n, k) for _, n, k in zoo.DEEPSEEK_V3}
    for earlier, weights in zoo.FRESH_SETS.items():
        if earlier == name:
            break
        seen |= {(n, k) for _, _, n, k, _ in weights}
    return seen


def shapes(name: str) -> list[tuple[int, int, int]]:
    """The set's (M, N, K), drawn afresh from its weights."""
    out = []
    for model, weight, n, k, _ in zoo.FRESH_SETS[name]:
        rng = random.Random(f"{name}/{model}/{weight}")
        out += [(draw_m(rng, lo, hi, four), n, k) for lo, hi, four in M_RANGES]
    return out


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in [*zoo.FRESH_SETS, "tune-grid"]:
        print(f"usage: {sys.argv[0]} {{{','.join([*zoo.FRESH_SETS, 'tune-grid'])}}}", file=sys.stderr)
        return 2
    name = sys.argv[1]
    if name == "tune-grid":
        print(",".join(f"{m}x{n}x{k}" for n, k in zoo.TUNE_GRID_NK for m in zoo.TUNE_GRID_M))
        return 0
    weights = zoo.FRESH_SETS[name]
    clash = {(n, k) for _, _, n, k, _ in weights} & read_before(name) - SHARED.get(name, set())
    if clash:
        print(f"{name}: weights read before: {sorted(clash)}", file=sys.stderr)
        return 1
    drawn = shapes(name)
    if all(ms for *_, ms in weights) and drawn != zoo.fresh_shapes(name):
        print(f"{name}: the draw no longer gives the M that fp8ext.zoo.FRESH_SETS records", file=sys.stderr)
        return 1
    if not any(ms for *_, ms in weights):
        print("the M to record in fp8ext.zoo.FRESH_SETS, weight by weight:", file=sys.stderr)
        for (model, weight, *_), i in zip(weights, range(0, len(drawn), 4)):
            print(f"  {model} {weight}: {tuple(m for m, _, _ in drawn[i:i + 4])}", file=sys.stderr)
    print(",".join(f"{m}x{n}x{k}" for m, n, k in drawn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
