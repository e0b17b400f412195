"""How the benchmark times a call: medians of L2-flushed calls, peers in interleaved turns."""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, ContextManager, Optional

import torch


class Timer:
    """Median time of fn() in microseconds, L2 flushed before each call."""

    def __init__(self, rep_ms: float = 100, warmup_ms: float = 25):
        self.rep_ms, self.warmup_ms = rep_ms, warmup_ms
        try:
            from triton.testing import do_bench

            self._do_bench = do_bench
        except ImportError:  # CUDA events with an explicit L2 flush
            self._do_bench = None
            self._flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")

    def __call__(self, fn: Callable[[], object]) -> float:
        return _median(self.samples(fn))

    def samples(self, fn: Callable[[], object], rep_ms: Optional[float] = None,
                warmup_ms: Optional[float] = None) -> list[float]:
        """Every timed call of fn() in microseconds, about rep_ms of them after warmup_ms of untimed calls."""
        rep = self.rep_ms if rep_ms is None else rep_ms
        warmup = self.warmup_ms if warmup_ms is None else warmup_ms
        if self._do_bench is not None:
            return [1e3 * t for t in self._do_bench(fn, warmup=warmup, rep=rep, return_mode="all")]
        for _ in range(3):
            fn()
        times = []
        for _ in range(max(5, int(rep) // 5)):
            self._flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(1e3 * start.elapsed_time(end))
        return times

    def interleaved(self, fns: dict[str, Callable[[], object]], rounds: int = 3,
                    around: Optional[Callable[[str], ContextManager]] = None) -> dict[str, float]:
        """Median time of each fn, its samples taken in `rounds` turns of rep_ms / rounds each, the order of the
        fns rotated by one every round; `around(name)`, if given, is entered for each of that fn's turns (tune.py
        forces a kernel there). Under the H200's power cap the SM clock wanders on a scale of
        seconds (docs/design.md, "Peaks and the power cap"); timing the peers one after another in one fixed order
        hands each its own stretch of that wander, and single rows moved by up to 8% between runs. Interleaved
        turns spread the wander over every peer alike."""
        names = list(fns)
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            for n in names[r % len(names):] + names[: r % len(names)]:
                warmup = self.warmup_ms if r == 0 else max(5.0, self.warmup_ms / rounds)
                with around(n) if around is not None else contextlib.nullcontext():
                    times[n] += self.samples(fns[n], rep_ms=self.rep_ms / rounds, warmup_ms=warmup)
        return {n: _median(t) for n, t in times.items()}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def progress(total: int, enabled: bool):
    """A step(msg) callable: one tick per finished item with msg beside it, step(None) at the end."""
    try:
        from tqdm import tqdm

        pbar = tqdm(total=total, disable=not enabled, file=sys.stderr, dynamic_ncols=True)

        def step(msg):
            if msg is None:
                pbar.close()
            else:
                pbar.set_postfix_str(msg)
                pbar.update(1)
        return step
    except ImportError:
        count = [0]

        def step(msg):
            if msg is not None and enabled:
                count[0] += 1
                print(f"[{count[0]}/{total}] {msg}", file=sys.stderr, flush=True)
        return step
