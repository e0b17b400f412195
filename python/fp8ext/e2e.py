"""`python -m fp8ext.e2e [options]` is `python -m fp8ext.bench --suite model [options]`: the end-to-end comparison
of a Llama-3-shaped decoder stack in bf16, fp8ext.convert, torch row-wise FP8 and torchao (bench/suites/model.py
has the measurement, docs/model_path.md what it reports).

    python -m fp8ext.e2e                                # 8B and 70B layer shapes, 2 layers each
    python -m fp8ext.e2e --config 8b --layers 4 --json bench/results/model.json --plot bench/results/model.png
"""
from __future__ import annotations

import sys

from .bench.common import TorchRowwiseLinear, rel_err
from .bench.suites.model import (CONFIGS, DECODE_BATCHES, LLAMA3_VOCAB, PREFILL, build_model, compare, cuda_graph,
                                 decode_step, top1_agreement, variants)

__all__ = ["CONFIGS", "DECODE_BATCHES", "LLAMA3_VOCAB", "PREFILL", "TorchRowwiseLinear", "build_model", "compare",
           "cuda_graph", "decode_step", "main", "rel_err", "top1_agreement", "variants"]


def main(argv=None) -> int:
    from .bench import main as bench_main

    return bench_main(["--suite", "model", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
