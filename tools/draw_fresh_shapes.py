#!/usr/bin/env python3
"""Draw a set of fresh block-wise shapes: weights of models that no fit and no earlier run has read, and seeded M,
printed as the MxNxK list that `python -m fp8ext.bench --suite blockwise --shapes` takes.

    python tools/draw_fresh_shapes.py fresh-2026-12-03       # the first set; tuning rows since the refit it judged
    python tools/draw_fresh_shapes.py fresh-2026-12-03b      # the second, which judged that refit
    python tools/draw_fresh_shapes.py tune-grid              # the synthetic tuning grid (tuning rows only)

A set judges one fit and is then spent: once its times have been read it may become tuning material
(tools/fit_blockwise_dispatch.py --custom), and a new set, drawn here before any of its shapes is timed, judges
the next fit. A set's weights are checked against the zoo (both splits), the Llama grid, DeepSeek-V3's layers, the
synthetic tuning grid and every earlier set, so that none of its (N, K) was read before. Once timed, a set's shapes
are recorded in fp8ext.zoo.FRESH_SETS; for a set recorded there this checks that the draw still gives them.

Per weight, four M, each log-uniform: in [1, 128], [129, 1023] and [1024, 16384], each rounded up to a multiple of
4 (torch's block-wise path declines other M, and the acceptance compares with it), and one in [1, 16384] as drawn.
Python's random.Random is seeded with '<set>/<model>/<weight>'.
"""
from __future__ import annotations

import math
import random
import sys

# (model, weight, N, K): the fused projections as the serving engines run them, from the models' published configs.
SETS: dict[str, list[tuple[str, str, int, int]]] = {
    "fresh-2026-12-03": [
        # Qwen3-235B-A22B: hidden 4096, 64 q / 4 kv heads of 128, expert MLP 1536
        ("qwen3-235b-a22b", "qkv", 9216, 4096), ("qwen3-235b-a22b", "o", 4096, 8192),
        ("qwen3-235b-a22b", "expert_gate_up", 3072, 4096), ("qwen3-235b-a22b", "expert_down", 4096, 1536),
        # Qwen3-32B: hidden 5120, 64 q / 8 kv heads of 128, MLP 25600
        ("qwen3-32b", "qkv", 10240, 5120), ("qwen3-32b", "o", 5120, 8192),
        ("qwen3-32b", "gate_up", 51200, 5120), ("qwen3-32b", "down", 5120, 25600),
        # Qwen3-8B: hidden 4096, 32 q / 8 kv heads of 128, MLP 12288
        ("qwen3-8b", "qkv", 6144, 4096), ("qwen3-8b", "o", 4096, 4096),
        ("qwen3-8b", "gate_up", 24576, 4096), ("qwen3-8b", "down", 4096, 12288),
        # Mistral-Large-2: hidden 12288, 96 q / 8 kv heads of 128, MLP 28672
        ("mistral-large-2", "qkv", 14336, 12288), ("mistral-large-2", "o", 12288, 12288),
        ("mistral-large-2", "gate_up", 57344, 12288), ("mistral-large-2", "down", 12288, 28672),
    ],
    "fresh-2026-12-03b": [
        # Yi-34B: hidden 7168, 56 q / 8 kv heads of 128, MLP 20480
        ("yi-34b", "qkv", 9216, 7168), ("yi-34b", "o", 7168, 7168),
        ("yi-34b", "gate_up", 40960, 7168), ("yi-34b", "down", 7168, 20480),
        # Qwen3-14B: hidden 5120, 40 q / 8 kv heads of 128, MLP 17408 (its o, 5120 x 5120, is Phi-3-medium's)
        ("qwen3-14b", "qkv", 7168, 5120), ("qwen3-14b", "gate_up", 34816, 5120), ("qwen3-14b", "down", 5120, 17408),
        # GLM-4.5: hidden 5120, 96 q / 8 kv heads of 128, expert MLP 1536
        ("glm-4.5", "qkv", 14336, 5120), ("glm-4.5", "o", 5120, 12288),
        ("glm-4.5", "expert_gate_up", 3072, 5120), ("glm-4.5", "expert_down", 5120, 1536),
        # Command-A: hidden 12288, MLP 36864 (its attention weights are Mistral-Large-2's)
        ("command-a", "gate_up", 73728, 12288), ("command-a", "down", 12288, 36864),
    ],
}

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
    from fp8ext import zoo

    seen = {(w["N"], w["K"]) for w in zoo.weights()} | set(zoo.LLAMA_NK) | set(zoo.TUNE_GRID_NK)
    seen |= {(n, k) for _, n, k in zoo.DEEPSEEK_V3}
    for earlier, weights in SETS.items():
        if earlier == name:
            break
        seen |= {(n, k) for _, _, n, k in weights}
    return seen


def shapes(name: str) -> list[tuple[int, int, int]]:
    out = []
    for model, weight, n, k in SETS[name]:
        rng = random.Random(f"{name}/{model}/{weight}")
        out += [(draw_m(rng, lo, hi, four), n, k) for lo, hi, four in M_RANGES]
    return out


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in [*SETS, "tune-grid"]:
        print(f"usage: {sys.argv[0]} {{{','.join([*SETS, 'tune-grid'])}}}", file=sys.stderr)
        return 2
    from fp8ext import zoo

    name = sys.argv[1]
    if name == "tune-grid":
        print(",".join(f"{m}x{n}x{k}" for n, k in zoo.TUNE_GRID_NK for m in zoo.TUNE_GRID_M))
        return 0
    clash = {(n, k) for _, _, n, k in SETS[name]} & read_before(name) - SHARED.get(name, set())
    if clash:
        print(f"{name}: weights read before: {sorted(clash)}", file=sys.stderr)
        return 1
    drawn = shapes(name)
    if name in zoo.FRESH_SETS and drawn != zoo.FRESH_SETS[name]:
        print(f"{name}: the draw no longer gives the shapes fp8ext.zoo.FRESH_SETS records", file=sys.stderr)
        return 1
    print(",".join(f"{m}x{n}x{k}" for m, n, k in drawn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
