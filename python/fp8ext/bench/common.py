"""What the suites share: the shape lists, the record header, operands, and small numeric helpers."""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from .. import kernels
from ..nn import Float8Linear
from ..testing import quantize_rowwise as testing_quantize_rowwise
from ..testing import random_operands, random_scales
from ..zoo import LLAMA_M, LLAMA_NK

E4M3 = torch.float8_e4m3fn

QUICK = [(1, 8192, 8192), (16, 4096, 4096), (64, 28672, 4096), (128, 6144, 4096), (1024, 4096, 14336),
         (4096, 8192, 8192), (8192, 8192, 8192)]
# The 7 shapes of the torch.compile baseline, measured on the H200 before fp8ext's first kernel.
INDUCTOR_SHAPES = [(16, 8192, 8192), (128, 28672, 4096), (1024, 10240, 8192), (2048, 4096, 14336),
                   (4096, 57344, 8192), (8192, 8192, 8192), (16384, 8192, 8192)]

HBM_TBPS = 4.27  # device-to-device copy, read + write, measured on the H200
FP8_DENSE_TFLOPS = 1979.0  # vendor datasheet, dense FP8 (a lead, not a measurement)


def parse_shapes(shapes: str) -> list[tuple[int, int, int]]:
    """'MxNxK[,MxNxK...]' as a list of (M, N, K); ValueError, naming the item, for one that is not three positive
    integers or whose N or K is not a multiple of 16 (the op's contract)."""
    out = []
    for item in shapes.split(","):
        parts = item.strip().lower().split("x")
        try:
            m, n, k = (int(x) for x in parts)
        except ValueError:
            raise ValueError(f"--shapes: {item.strip()!r} is not MxNxK (three integers, e.g. 4096x7168x2048)") from None
        if min(m, n, k) < 1:
            raise ValueError(f"--shapes: {item.strip()!r}: M, N and K must be at least 1")
        if n % 16 or k % 16:
            raise ValueError(f"--shapes: {item.strip()!r}: N and K must be multiples of 16, as fp8ext.scaled_mm "
                             "requires")
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
    """What every JSON record of an H200 measurement starts with: commit, GPU, torch version and date (the CPU
    demo's too: its GPU is "none")."""
    try:
        gpu = torch.cuda.get_device_name()
    except (RuntimeError, AssertionError):  # no driver, or a CPU build of torch
        gpu = "none"
    return {"commit": git_commit(), "gpu": gpu, "torch": torch.__version__,
            "date": _dt.date.today().isoformat()}


# Environment settings that change what fp8ext runs, recorded with every suite when they are set.
RECORDED_SETTINGS = ("FP8EXT_PDL", "FP8EXT_BACKENDS", "FP8EXT_AUTOTUNE")


def suite_record(suite: str) -> dict:
    """The header of a `python -m fp8ext.bench` record: run_record()'s fields, the date as a UTC time, the CUDA
    version, the suite and the host, in the order the bench records have always had; then `settings`, those of
    RECORDED_SETTINGS that are set (FP8EXT_PDL=0, say), when any is."""
    head = run_record()
    record = {"commit": head["commit"], "gpu": head["gpu"], "torch": head["torch"], "cuda": torch.version.cuda,
              "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "suite": suite,
              "host": platform.node()}
    settings = {k: os.environ[k] for k in RECORDED_SETTINGS if k in os.environ}
    if settings:
        record["settings"] = settings
    return record


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
    before = kernels.backends()
    kernels.set_backends(name)
    try:
        yield
    finally:
        kernels.set_backends(before)


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


def failure(e: BaseException) -> str:
    """An exception as the one-line string a record keeps in place of a measurement."""
    first = str(e).splitlines()[0][:200] if str(e) else ""
    return f"failed: {type(e).__name__}: {first}"


def guarded(fn: Callable[[], object]):
    """fn()'s value, or failure()'s string: one measurement that this model, torch or library version cannot take
    is recorded in the JSON instead of ending the suite."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return failure(e)


def split_failures(fns: dict[str, Callable[[], object]]) -> tuple[dict, dict[str, str]]:
    """Calls each fn once: (the fns that ran, {name: failure string} for those that raised). Timing loops then run
    only the fns that work, so one broken peer costs its own numbers and not the row's."""
    ok, errors = {}, {}
    for name, fn in fns.items():
        result = guarded(fn)
        if isinstance(result, str) and result.startswith("failed: "):
            errors[name] = result
        else:
            ok[name] = fn
    return ok, errors


def torch_quantize_rowwise(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8ext.quantize_rowwise's formula (e4m3, no scale_ub) on a 2-D input in plain eager torch ops: a reduction
    for amax, the scale, then divide, clamp and cast, each its own kernel unless torch.compile fuses them."""
    return testing_quantize_rowwise(x2, E4M3)


class TorchRowwiseLinear(nn.Module):
    """The peer of Float8Linear: its FP8 weight and per-row scales, with the activation quantized per token in plain
    torch ops (torch_quantize_rowwise) and the GEMM by torch._scaled_mm row-wise, bias added after (torch's
    row-wise path takes no bias everywhere)."""

    def __init__(self, f8: Float8Linear):
        super().__init__()
        self.in_features, self.out_features, self.use_fast_accum = f8.in_features, f8.out_features, f8.use_fast_accum
        self.weight, self.bias = f8.weight, f8.bias
        self.weight_scale = nn.Parameter(f8.weight_scale.detach().view(1, -1), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq, scale = torch_quantize_rowwise(x.reshape(-1, self.in_features))
        out = torch._scaled_mm(xq, self.weight.t(), scale, self.weight_scale, out_dtype=x.dtype,
                               use_fast_accum=self.use_fast_accum)
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.view(*x.shape[:-1], self.out_features)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest per-token (last dimension) relative L2 error of `out` against `ref`."""
    out, ref = out.float().flatten(0, -2), ref.float().flatten(0, -2)
    return float(((out - ref).norm(dim=-1) / ref.norm(dim=-1).clamp(min=1e-30)).max())


def ratio(num, den) -> Optional[float]:
    """num / den where both are measured (positive numbers, not failure strings), else None."""
    ok = all(isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0 for t in (num, den))
    return num / den if ok else None


def timed_or_failed(timer, fns: dict[str, Callable[[], object]], rounds: int) -> dict:
    """timer.interleaved() of the fns that run, in the timer's unit; the failure string in place of each fn that
    raises, whether on its first call or in one of its timed turns (the others go on)."""
    ok, errors = split_failures(fns)
    failed: dict[str, BaseException] = {}
    times = timer.interleaved(ok, rounds, failed=failed) if ok else {}
    errors.update({n: failure(e) for n, e in failed.items()})
    return {n: times.get(n, errors.get(n)) for n in fns}


def acceptance(values: list, expected: int, passes: Callable[[list], bool]):
    """passes(values) where every one of the `expected` measurements was taken, else "incomplete": an acceptance
    is not judged on the rows that happened to survive."""
    return bool(passes(values)) if values and len(values) == expected else "incomplete"


def write_record(path: str, record: dict, quiet: bool = False) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1) + "\n")
    if not quiet:
        print(f"\nwrote {path}")
