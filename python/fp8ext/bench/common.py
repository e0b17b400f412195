"""What the suites share: the shape lists, the record header, operands, and small numeric helpers."""
from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Callable, Optional

import torch

from .. import ops
from ..testing import random_operands, random_scales

LLAMA_NK = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192), (8192, 8192),
            (57344, 8192), (8192, 28672), (18432, 16384), (16384, 16384), (106496, 16384), (16384, 53248)]
LLAMA_M = [1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
QUICK = [(1, 8192, 8192), (16, 4096, 4096), (64, 28672, 4096), (128, 6144, 4096), (1024, 4096, 14336),
         (4096, 8192, 8192), (8192, 8192, 8192)]
# The 7 shapes of the torch.compile baseline, measured on the H200 before fp8ext's first kernel.
INDUCTOR_SHAPES = [(16, 8192, 8192), (128, 28672, 4096), (1024, 10240, 8192), (2048, 4096, 14336),
                   (4096, 57344, 8192), (8192, 8192, 8192), (16384, 8192, 8192)]

HBM_TBPS = 4.27  # device-to-device copy, read + write, measured on the H200
FP8_DENSE_TFLOPS = 1979.0  # vendor datasheet, dense FP8 (a lead, not a measurement)


def parse_shapes(shapes: str) -> list[tuple[int, int, int]]:
    """'MxNxK[,MxNxK...]' as a list of (M, N, K)."""
    out = []
    for s in shapes.split(","):
        m, n, k = (int(x) for x in s.lower().split("x"))
        out.append((m, n, k))
    return out


def suite_shapes(suite: str, shapes: Optional[str]) -> list[tuple[int, int, int]]:
    if suite == "llama":
        return [(m, n, k) for n, k in LLAMA_NK for m in LLAMA_M]
    if suite == "quick":
        return list(QUICK)
    if suite == "inductor":
        return list(INDUCTOR_SHAPES)
    if suite == "custom":
        if not shapes:
            raise SystemExit("--suite custom needs --shapes MxNxK[,MxNxK...]")
        return parse_shapes(shapes)
    raise SystemExit(f"unknown suite {suite!r}")


def git_commit() -> str:
    env = os.environ.get("FP8EXT_COMMIT")
    if env:
        return env
    try:
        root = Path(__file__).resolve().parents[3]
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_record() -> dict:
    """What every JSON record of an H200 measurement starts with: commit, GPU, torch version and date."""
    return {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": _dt.date.today().isoformat()}


def suite_record(suite: str) -> dict:
    """The header of a `python -m fp8ext.bench` record: run_record()'s fields, the date as a UTC time, the CUDA
    version, the suite and the host, in the order the bench records have always had."""
    head = run_record()
    return {"commit": head["commit"], "gpu": head["gpu"], "torch": head["torch"], "cuda": torch.version.cuda,
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "suite": suite,
            "host": platform.node()}


def make_operands(M: int, N: int, K: int, device="cuda"):
    """Fresh random fp8 operands and positive scales: row-wise (M,1)/(1,N) and tensor-wise ()/()."""
    a, b, sa, sb = random_operands(M, N, K, device=device)
    st_a, st_b = random_scales(1, device=device, shape=()), random_scales(1, device=device, shape=())
    return a, b, sa, sb, st_a, st_b


def tflops(M, N, K, us):
    return 2.0 * M * N * K / (us * 1e-6) / 1e12 if us and us > 0 else float("nan")


def weight_gbps(N, K, us):
    return N * K / (us * 1e-6) / 1e9 if us and us > 0 else float("nan")


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


@contextlib.contextmanager
def backends(name: str):
    """fp8ext.set_backends(name) for the block, the previous setting restored after it."""
    before = ops.backends()
    ops.set_backends(name)
    try:
        yield
    finally:
        ops.set_backends(before)


def print_rows(columns: list[tuple[str, str]], rows: list[dict], cells: Callable[[dict], dict]) -> None:
    """A fixed-width table: each column is (header, right-aligned format spec), cells(row) gives the row's value
    per header, and the row's kernel ends each line."""
    header = " ".join(f"{h:>{spec.split('.')[0].lstrip('>')}}" for h, spec in columns) + "  kernel"
    print(header)
    print("-" * len(header))
    for r in rows:
        values = cells(r)
        print(" ".join(format(values[h], spec) for h, spec in columns) + "  " + r["kernel"])


def pyplot():
    """matplotlib's pyplot on the Agg backend, or None (with a message) where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("fp8ext.bench: matplotlib is not installed, so no plot is written (pip install matplotlib)")
        return None
    return plt
