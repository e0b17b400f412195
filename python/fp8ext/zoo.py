"""The shape zoo: real weight shapes of open model families, random weight shapes, and the odd M that serving
produces, split once into a tuning part and a held-out part.

    from fp8ext.zoo import zoo_rows
    tune = zoo_rows("tune")        # what calibration (tools/tune.py) may measure and fit on
    heldout = zoo_rows("heldout")  # what only the benchmark (python -m fp8ext.bench --suite zoo) may measure

Each weight is one linear layer's (N, K) = (output features, input features), as nn.Linear stores it [N, K].
A weight lands in the tuning or the held-out part by a hash of its name, fixed once; a held-out weight whose
(N, K) also occurs in the tuning part or on the llama grid (which calibration measures too) moves to the tuning
part, so that no held-out weight shape was ever measured for calibration. Each weight gets four M values from a
seeded generator: one each in [1, 128], (128, 1024) and [1024, 16384], and one anywhere, never a power of two.
Nothing that picks kernels (the cost model's fit, the table of kernels built) may read the held-out part;
tests/test_zoo.py checks the fit's inputs against it.
"""
from __future__ import annotations

import hashlib
import math
import random

# (family, layer, N, K). Attention projections fused as the serving engines run them (q, k, v in one weight;
# gate and up in one), MLP down projections, MoE experts and lm_heads. Sizes from the models' published configs.
MODEL_WEIGHTS: list[tuple[str, str, int, int]] = [
    # Qwen2.5-7B: hidden 3584, 28 q / 4 kv heads of 128, MLP 18944, vocab 152064
    ("qwen2.5-7b", "qkv", 4608, 3584), ("qwen2.5-7b", "o", 3584, 3584), ("qwen2.5-7b", "gate_up", 37888, 3584),
    ("qwen2.5-7b", "down", 3584, 18944), ("qwen2.5-7b", "lm_head", 152064, 3584),
    # Qwen2.5-72B: hidden 8192, 64 q / 8 kv heads, MLP 29568
    ("qwen2.5-72b", "gate_up", 59136, 8192), ("qwen2.5-72b", "down", 8192, 29568),
    # Mistral-Nemo-12B: hidden 5120, 32 q / 8 kv heads of 128, MLP 14336, vocab 131072
    ("mistral-nemo", "qkv", 6144, 5120), ("mistral-nemo", "o", 5120, 4096), ("mistral-nemo", "gate_up", 28672, 5120),
    ("mistral-nemo", "down", 5120, 14336), ("mistral-nemo", "lm_head", 131072, 5120),
    # Mixtral-8x22B: hidden 6144, 48 q / 8 kv heads of 128, expert MLP 16384
    ("mixtral-8x22b", "qkv", 8192, 6144), ("mixtral-8x22b", "o", 6144, 6144),
    ("mixtral-8x22b", "expert_gate_up", 32768, 6144), ("mixtral-8x22b", "expert_down", 6144, 16384),
    # Gemma-2-9B: hidden 3584, 16 q / 8 kv heads of 256, MLP 14336, vocab 256000
    ("gemma-2-9b", "qkv", 8192, 3584), ("gemma-2-9b", "o", 3584, 4096), ("gemma-2-9b", "gate_up", 28672, 3584),
    ("gemma-2-9b", "down", 3584, 14336), ("gemma-2-9b", "lm_head", 256000, 3584),
    # Gemma-2-27B: hidden 4608, 32 q / 16 kv heads of 128, MLP 36864
    ("gemma-2-27b", "qkv", 8192, 4608), ("gemma-2-27b", "o", 4608, 4096), ("gemma-2-27b", "gate_up", 73728, 4608),
    ("gemma-2-27b", "down", 4608, 36864),
    # Phi-3-mini: hidden 3072, 32 heads of 96, MLP 8192, vocab 32064
    ("phi-3-mini", "qkv", 9216, 3072), ("phi-3-mini", "o", 3072, 3072), ("phi-3-mini", "gate_up", 16384, 3072),
    ("phi-3-mini", "down", 3072, 8192), ("phi-3-mini", "lm_head", 32064, 3072),
    # Phi-3-medium: hidden 5120, 40 q / 10 kv heads of 128, MLP 17920
    ("phi-3-medium", "qkv", 7680, 5120), ("phi-3-medium", "o", 5120, 5120), ("phi-3-medium", "gate_up", 35840, 5120),
    ("phi-3-medium", "down", 5120, 17920),
    # DeepSeek-V3: hidden 7168, MLA (q_lora 1536, kv_lora 512 + 64 rope, 128 heads), dense MLP 18432, experts 2048
    ("deepseek-v3", "q_a", 1536, 7168), ("deepseek-v3", "q_b", 24576, 1536), ("deepseek-v3", "kv_a", 576, 7168),
    ("deepseek-v3", "kv_b", 32768, 512), ("deepseek-v3", "o", 7168, 16384),
    ("deepseek-v3", "dense_gate_up", 36864, 7168), ("deepseek-v3", "dense_down", 7168, 18432),
    ("deepseek-v3", "expert_gate_up", 4096, 7168), ("deepseek-v3", "expert_down", 7168, 2048),
    ("deepseek-v3", "lm_head", 129280, 7168),
    # Qwen3-30B-A3B: hidden 2048, 32 q / 4 kv heads of 128, 128 experts of MLP 768
    ("qwen3-30b-a3b", "qkv", 5120, 2048), ("qwen3-30b-a3b", "o", 2048, 4096),
    ("qwen3-30b-a3b", "expert_gate_up", 1536, 2048), ("qwen3-30b-a3b", "expert_down", 2048, 768),
    # Llama-3.2-1B: hidden 2048, 32 q / 8 kv heads of 64, MLP 8192, vocab 128256
    ("llama-3.2-1b", "qkv", 3072, 2048), ("llama-3.2-1b", "o", 2048, 2048), ("llama-3.2-1b", "gate_up", 16384, 2048),
    ("llama-3.2-1b", "down", 2048, 8192), ("llama-3.2-1b", "lm_head", 128256, 2048),
    # gpt-oss-120b: hidden 2880, 64 q / 8 kv heads of 64, experts of MLP 2880
    ("gpt-oss-120b", "qkv", 5120, 2880), ("gpt-oss-120b", "o", 2880, 4096),
    ("gpt-oss-120b", "expert_gate_up", 5760, 2880), ("gpt-oss-120b", "expert_down", 2880, 2880),
]

RANDOM_WEIGHTS = 24  # random (N, K), multiples of 64, N in [256, 65536], K in [256, 32768], log-uniform
SEED = 20261130
M_MAX = 16384


def _random_weights() -> list[tuple[str, str, int, int]]:
    rng = random.Random(SEED)
    out = []
    for i in range(RANDOM_WEIGHTS):
        n = 64 * round(math.exp(rng.uniform(math.log(256), math.log(65536))) / 64)
        k = 64 * round(math.exp(rng.uniform(math.log(256), math.log(32768))) / 64)
        out.append(("random", f"w{i:02d}", max(n, 64), max(k, 64)))
    return out


def _is_power_of_two(m: int) -> bool:
    return m > 1 and m & (m - 1) == 0  # M = 1 (one token of decode) stays: it is what serving runs most


def _draw_m(rng: random.Random, lo: int, hi: int) -> int:
    while True:
        m = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        if lo <= m <= hi and not _is_power_of_two(m):
            return m


def _split_of(name: str) -> str:
    return "tune" if hashlib.sha256(name.encode()).digest()[0] % 2 == 0 else "heldout"


def weights() -> list[dict]:
    """Every zoo weight: {"weight": "family/layer", "N", "K", "split"}."""
    from .bench import LLAMA_NK

    out = [{"weight": f"{fam}/{layer}", "N": n, "K": k, "split": _split_of(f"{fam}/{layer}")}
           for fam, layer, n, k in MODEL_WEIGHTS + _random_weights()]
    measured = {(w["N"], w["K"]) for w in out if w["split"] == "tune"} | set(LLAMA_NK)
    for w in out:
        if w["split"] == "heldout" and (w["N"], w["K"]) in measured:
            w["split"] = "tune"
    return out


def zoo_rows(split: str | None = None) -> list[dict]:
    """The zoo's rows {"M", "N", "K", "weight", "split"}, all of them or one split ("tune" or "heldout")."""
    if split not in (None, "tune", "heldout"):
        raise ValueError(f"split must be 'tune', 'heldout' or None, got {split!r}")
    rows = []
    for w in weights():
        rng = random.Random(f"{SEED}/{w['weight']}")
        ms = [_draw_m(rng, 1, 128), _draw_m(rng, 129, 1023), _draw_m(rng, 1024, M_MAX),
              _draw_m(rng, 1, M_MAX)]
        for m in ms:
            if split is None or w["split"] == split:
                rows.append({"M": m, "N": w["N"], "K": w["K"], "weight": w["weight"], "split": w["split"]})
    return rows
