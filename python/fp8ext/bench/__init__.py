"""fp8ext benchmark: one harness, registered suites. fp8ext.scaled_mm against its peers on the same tensors, in the
same run, and the probes that measure what a row of that table cannot: the decode floor, host time, batch
invariance, the autotuner, the numerical edges.

    python -m fp8ext.bench                      # the `quick` suite; a CPU correctness demo without an sm_90 GPU
    python -m fp8ext.bench --suite llama        # 12 Llama-3 weight shapes x 12 M values, fast and precise
    python -m fp8ext.bench --suite custom --shapes 16x4096x4096,8192x8192x8192
    python -m fp8ext.bench --suite llama --json bench/results/run.json --plot bench/results/run.png
    python -m fp8ext.bench --suite zoo [--split heldout] [--plot zoo.png]  # other models' weights and odd M
    python -m fp8ext.bench --suite blockwise [--split heldout | --shapes 4096x7168x2048]  # block-scaled
    python -m fp8ext.bench --suite floor|host|invariance|inductor-peer|autotune|edge|torch-blockwise --json out.json

Times are medians of GPU time per call (L2 flushed before every call, the host held out of the timed span:
timing.Timer), on fresh random inputs, taken in
interleaved turns (--rounds, the peer order rotated each turn) so that a clock wandering under the power cap
lands on every peer alike. Peers:
torch._scaled_mm row-wise (one fp32 scale per row of a and per column of b, like fp8ext) and tensor-wise
(cuBLAS with one scale each), with the same use_fast_accum; optionally torch.compile max-autotune of
_scaled_mm with persistent TMA templates (--compile-peer).

Every suite prints a summary and, with --json, writes one record: the header of suite_record() (commit, GPU,
torch, CUDA, date, suite, host, and the settings such as FP8EXT_PDL when set), then its method, summary and rows. A suite is a function registered with
@register_suite (registry.py), one module each under suites/.
"""
from .common import (FP8_DENSE_TFLOPS, HBM_TBPS, INDUCTOR_SHAPES, QUICK, geomean, git_commit, make_operands,
                     parse_shapes, run_record, suite_record, suite_shapes, tflops, weight_gbps)
from .registry import SUITES, Suite, register_suite
from .timing import Timer
from .cli import cpu_demo, main
from .suites.peers import plot, print_table, run_gpu, summarize
from .suites.zoo import plot_zoo, print_zoo_table, run_zoo, summarize_zoo

__all__ = ["FP8_DENSE_TFLOPS", "HBM_TBPS", "INDUCTOR_SHAPES", "QUICK", "SUITES", "Suite",
           "Timer", "cpu_demo", "geomean", "git_commit", "main", "make_operands", "parse_shapes", "plot", "plot_zoo",
           "print_table", "print_zoo_table", "register_suite", "run_gpu", "run_record", "run_zoo", "suite_record",
           "suite_shapes", "summarize", "summarize_zoo", "tflops", "weight_gbps"]
