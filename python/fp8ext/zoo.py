"""Shape data, in one module that imports nothing of fp8ext (the benchmark and the tools read it):

- the Llama-3 grid: LLAMA3_LAYERS, one decoder layer's projections of 8B, 70B and 405B; LLAMA_NK x LLAMA_M, the
  llama suite's 144 shapes, which calibration measures too;
- the shape zoo: real weight shapes of open model families, random weight shapes, and the odd M that serving
  produces, split once into a tuning part and a held-out part (zoo_rows);
- DeepSeek-V3's layers (DEEPSEEK_V3 x DEEPSEEK_M): the tuning part of the block-wise suite;
- the block-wise suite's fresh sets (FRESH_SETS) and its synthetic tuning grid (TUNE_GRID_M x TUNE_GRID_NK), as
  tools/draw_fresh_shapes.py drew them;
- the row-wise fresh set (FRESH_WEIGHTS, zoo_rows("fresh")): weights of models read by nothing before it, which
  judges the large-M row-wise work once, at its end.

    from fp8ext.zoo import zoo_rows
    tune = zoo_rows("tune")        # what calibration (tools/tune.py) may measure and fit on
    heldout = zoo_rows("heldout")  # what only the benchmark (python -m fp8ext.bench --suite zoo) may measure

Each weight is one linear layer's (N, K) = (output features, input features), as nn.Linear stores it [N, K].
A zoo weight lands in the tuning or the held-out part by a hash of its name, fixed once; a held-out weight whose
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

# Llama-3: one decoder layer's projections as (N, K), q/k/v and gate/up fused as the serving engines run them.
LLAMA3_LAYERS: dict[str, dict[str, tuple[int, int]]] = {
    "8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)},
    "70b": {"qkv": (10240, 8192), "o": (8192, 8192), "gate_up": (57344, 8192), "down": (8192, 28672)},
    "405b": {"qkv": (18432, 16384), "o": (16384, 16384), "gate_up": (106496, 16384), "down": (16384, 53248)},
}
# The llama grid: those 12 weights at 12 M from decode to large prefill.
LLAMA_NK: list[tuple[int, int]] = [nk for layer in LLAMA3_LAYERS.values() for nk in layer.values()]
LLAMA_M = [1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def llama_rows(split: str, **extra) -> list[dict]:
    """The llama grid as rows in the zoo's form, weight by weight, M ascending."""
    return [{"M": m, "N": n, "K": k, "weight": f"llama/{n}x{k}", "split": split, **extra}
            for n, k in LLAMA_NK for m in LLAMA_M]


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
    out = [{"weight": f"{fam}/{layer}", "N": n, "K": k, "split": _split_of(f"{fam}/{layer}")}
           for fam, layer, n, k in MODEL_WEIGHTS + _random_weights()]
    measured = {(w["N"], w["K"]) for w in out if w["split"] == "tune"} | set(LLAMA_NK)
    for w in out:
        if w["split"] == "heldout" and (w["N"], w["K"]) in measured:
            w["split"] = "tune"
    return out


# The row-wise fresh set: weights of open models that neither the zoo, the Llama grid, DeepSeek-V3's layers, the
# block-wise suite's sets nor its tuning grid hold (tests/test_zoo.py checks), fixed before the large-M row-wise
# kernels and their dispatch were tuned. It judges that work once, at its end, as the held-out split is judged
# (`python -m fp8ext.bench --suite zoo --split fresh`); nothing that picks kernels may read it. Each weight gets four M
# by the zoo's own rule, seeded by FRESH_SEED and its name.
FRESH_WEIGHTS: list[tuple[str, str, int, int]] = [
    # Gemma-3-27B: hidden 5376, 32 q / 16 kv heads of 128, MLP 21504
    ("gemma-3-27b", "qkv", 8192, 5376), ("gemma-3-27b", "o", 5376, 4096), ("gemma-3-27b", "gate_up", 43008, 5376),
    ("gemma-3-27b", "down", 5376, 21504),
    # Gemma-3-12B: hidden 3840, 16 q / 8 kv heads of 256, MLP 15360
    ("gemma-3-12b", "qkv", 8192, 3840), ("gemma-3-12b", "o", 3840, 4096), ("gemma-3-12b", "gate_up", 30720, 3840),
    ("gemma-3-12b", "down", 3840, 15360),
    # OLMo-2-13B: hidden 5120, 40 heads of 128 without grouping, MLP 13824 (its o, 5120 x 5120, is Phi-3-medium's)
    ("olmo-2-13b", "qkv", 15360, 5120), ("olmo-2-13b", "gate_up", 27648, 5120), ("olmo-2-13b", "down", 5120, 13824),
    # Qwen2.5-32B: hidden 5120, 40 q / 8 kv heads of 128, MLP 27648 (its attention weights are read before)
    ("qwen2.5-32b", "gate_up", 55296, 5120), ("qwen2.5-32b", "down", 5120, 27648),
    # Mistral-Small-24B: hidden 5120, 32 q / 8 kv heads of 128, MLP 32768 (its attention weights are Mistral-Nemo's)
    ("mistral-small-24b", "gate_up", 65536, 5120), ("mistral-small-24b", "down", 5120, 32768),
]
FRESH_SEED = 20261205


def _four_m(seed: str) -> list[int]:
    rng = random.Random(seed)
    return [_draw_m(rng, 1, 128), _draw_m(rng, 129, 1023), _draw_m(rng, 1024, M_MAX), _draw_m(rng, 1, M_MAX)]


def zoo_rows(split: str | None = None) -> list[dict]:
    """The zoo's rows {"M", "N", "K", "weight", "split"}: both parts (None), one ("tune" or "heldout"), or the
    row-wise fresh set ("fresh"), which is not part of the zoo."""
    if split not in (None, "tune", "heldout", "fresh"):
        raise ValueError(f"split must be 'tune', 'heldout', 'fresh' or None, got {split!r}")
    if split == "fresh":
        return [{"M": m, "N": n, "K": k, "weight": f"{fam}/{layer}", "split": "fresh"}
                for fam, layer, n, k in FRESH_WEIGHTS for m in _four_m(f"{FRESH_SEED}/{fam}/{layer}")]
    rows = []
    for w in weights():
        for m in _four_m(f"{SEED}/{w['weight']}"):
            if split is None or w["split"] == split:
                rows.append({"M": m, "N": w["N"], "K": w["K"], "weight": w["weight"], "split": w["split"]})
    return rows

# DeepSeek-V3 (hidden 7168, MLA with q_lora 1536 / kv_lora 512, 128 heads; dense MLP 18432, experts 2048): (name, N,
# K) of each weight as a GEMM out = x [M, K] @ w.t(), under its checkpoint's names. The zoo's deepseek-v3 family is
# the same weights (and the lm_head) under the zoo's own names, which fix its split.
DEEPSEEK_V3 = [("q_a_proj", 1536, 7168), ("q_b_proj", 24576, 1536), ("kv_a_proj_with_mqa", 576, 7168),
               ("kv_b_proj", 32768, 512), ("o_proj", 7168, 16384), ("dense_gate_up", 36864, 7168),
               ("dense_down", 7168, 18432), ("expert_gate_up", 4096, 7168), ("expert_down", 7168, 2048)]
# M = 4 and 32 are the block-scaled decode kernels' largest (bw_gemv_m4_*, bw_gemv_tc_*): their fits must see both
# ends of the range they compute.
DEEPSEEK_M = [1, 4, 16, 32, 64, 128, 512, 1024, 4096, 16384]

# The block-wise suite's fresh sets: weights of models that no fit and no earlier run had read, as (model, weight,
# N, K, the four M drawn for it), the fused projections as the serving engines run them, from the models' published
# configs. tools/draw_fresh_shapes.py drew the M (seeded; it redraws them exactly, as
# tests/test_blockwise_dispatch.py checks) and `--suite blockwise --shapes` timed these shapes. A set judges one fit
# of the block-wise dispatch and then becomes tuning material (tools/fit_blockwise_dispatch.py --custom).
FRESH_SETS: dict[str, list[tuple[str, str, int, int, tuple[int, ...]]]] = {
    "fresh-2026-12-03": [
        # Qwen3-235B-A22B: hidden 4096, 64 q / 4 kv heads of 128, expert MLP 1536
        ("qwen3-235b-a22b", "qkv", 9216, 4096, (76, 696, 1080, 4128)),
        ("qwen3-235b-a22b", "o", 4096, 8192, (4, 728, 14432, 35)),
        ("qwen3-235b-a22b", "expert_gate_up", 3072, 4096, (40, 140, 5032, 169)),
        ("qwen3-235b-a22b", "expert_down", 4096, 1536, (4, 316, 3932, 2900)),
        # Qwen3-32B: hidden 5120, 64 q / 8 kv heads of 128, MLP 25600
        ("qwen3-32b", "qkv", 10240, 5120, (84, 404, 3216, 1206)),
        ("qwen3-32b", "o", 5120, 8192, (36, 952, 13312, 2)),
        ("qwen3-32b", "gate_up", 51200, 5120, (16, 740, 3580, 36)),
        ("qwen3-32b", "down", 5120, 25600, (4, 308, 1220, 8)),
        # Qwen3-8B: hidden 4096, 32 q / 8 kv heads of 128, MLP 12288
        ("qwen3-8b", "qkv", 6144, 4096, (24, 220, 3472, 19)),
        ("qwen3-8b", "o", 4096, 4096, (4, 184, 1628, 13788)),
        ("qwen3-8b", "gate_up", 24576, 4096, (4, 232, 3688, 2)),
        ("qwen3-8b", "down", 4096, 12288, (4, 436, 3736, 188)),
        # Mistral-Large-2: hidden 12288, 96 q / 8 kv heads of 128, MLP 28672
        ("mistral-large-2", "qkv", 14336, 12288, (4, 568, 1524, 248)),
        ("mistral-large-2", "o", 12288, 12288, (8, 136, 1548, 298)),
        ("mistral-large-2", "gate_up", 57344, 12288, (4, 324, 6936, 387)),
        ("mistral-large-2", "down", 12288, 28672, (4, 172, 1064, 518)),
    ],
    "fresh-2026-12-03b": [
        # Yi-34B: hidden 7168, 56 q / 8 kv heads of 128, MLP 20480
        ("yi-34b", "qkv", 9216, 7168, (8, 340, 7628, 17)),
        ("yi-34b", "o", 7168, 7168, (12, 296, 3528, 5)),
        ("yi-34b", "gate_up", 40960, 7168, (28, 292, 4564, 5)),
        ("yi-34b", "down", 7168, 20480, (4, 416, 7972, 9458)),
        # Qwen3-14B: hidden 5120, 40 q / 8 kv heads of 128, MLP 17408 (its o, 5120 x 5120, is Phi-3-medium's)
        ("qwen3-14b", "qkv", 7168, 5120, (16, 504, 2144, 1815)),
        ("qwen3-14b", "gate_up", 34816, 5120, (4, 268, 6872, 307)),
        ("qwen3-14b", "down", 5120, 17408, (8, 220, 1028, 200)),
        # GLM-4.5: hidden 5120, 96 q / 8 kv heads of 128, expert MLP 1536
        ("glm-4.5", "qkv", 14336, 5120, (4, 184, 4048, 414)),
        ("glm-4.5", "o", 5120, 12288, (48, 260, 7028, 22)),
        ("glm-4.5", "expert_gate_up", 3072, 5120, (4, 132, 6944, 1317)),
        ("glm-4.5", "expert_down", 5120, 1536, (4, 192, 10284, 2)),
        # Command-A: hidden 12288, MLP 36864 (its attention weights are Mistral-Large-2's)
        ("command-a", "gate_up", 73728, 12288, (32, 612, 1064, 54)),
        ("command-a", "down", 12288, 36864, (112, 416, 1160, 1109)),
    ],
}


def fresh_shapes(name: str) -> list[tuple[int, int, int]]:
    """The (M, N, K) of a fresh set, weight by weight, in the order they were drawn and timed."""
    return [(m, n, k) for _, _, n, k, ms in FRESH_SETS[name] for m in ms]


# The synthetic tuning grid of the block-wise dispatch: decode and small M against long K, where its fit was
# weakest. Tuning material only, never a judge: no fresh set may hold its weights.
TUNE_GRID_M = (2, 8, 24, 48, 96)
TUNE_GRID_NK = ((2048, 16384), (3072, 24576), (5120, 20480), (8192, 32768), (10240, 14336))
