"""How the benchmark times a call: medians of L2-flushed calls with the host held out, peers in interleaved turns."""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, ContextManager, Optional

import torch


# How a record names this timing in its "method".
TIMER_METHOD = "fp8ext.bench Timer (L2 flushed before each call, host held out, medians)"


class Timer:
    """Median GPU time of fn() in microseconds, L2 flushed before each call, the host kept out of the timed span.

    Each sample is: zero a 256 MiB buffer (flushes the 50 MiB L2), hold the GPU in a spin kernel, record a start
    event, fn(), record an end event; the samples are queued without synchronizing, as triton.testing.do_bench
    queues them. The hold is what do_bench lacks: the start event then runs only after the host has issued fn's
    launches, so the span holds fn's GPU work (its launches back to back) and no host time. Without it a sample
    whose host fell behind the GPU timed fn's host work too: on the H200's host an fp8ext call took 26-51 us to
    issue and the flush, a 256 MiB write, runs about 70 us; the swapped stream-K kernel's eager medians at
    64 x 576 x 7168 moved between 17 and 37 us from process to process while its CUDA-graph replays stayed at
    18.2-18.5 us (scripts/probe_streamk.py). The hold is twice fn's measured issue time plus 20 us. Host time has
    its own suite (--suite host)."""

    FLUSH_BYTES = 256 * 1024 * 1024

    def __init__(self, rep_ms: float = 100, warmup_ms: float = 25, hold: bool = True):
        self.rep_ms, self.warmup_ms, self.hold = rep_ms, warmup_ms, hold  # hold=False: do_bench's way, for probes
        self._flush = torch.empty(self.FLUSH_BYTES, dtype=torch.int8, device="cuda")
        self._cycles_per_us: Optional[float] = None
        self._flush_time_us: Optional[float] = None

    def __call__(self, fn: Callable[[], object]) -> float:
        return _median(self.samples(fn))

    def _spin_cycles_per_us(self) -> float:
        """The spin kernel's clock (torch.cuda._sleep counts SM cycles), measured once."""
        if self._cycles_per_us is None:
            cycles = 200_000
            self._cycles_per_us = cycles / _once_us(lambda: torch.cuda._sleep(cycles))
        return self._cycles_per_us

    def _flush_us(self) -> float:
        """How long one flush runs, measured once."""
        if self._flush_time_us is None:
            self._flush_time_us = _once_us(self._flush.zero_)
        return self._flush_time_us

    def samples(self, fn: Callable[[], object], rep_ms: Optional[float] = None,
                warmup_ms: Optional[float] = None) -> list[float]:
        """Every timed call of fn() in microseconds: after warmup_ms of untimed calls, as many as fit in rep_ms of
        GPU time (flush, hold and fn)."""
        rep = self.rep_ms if rep_ms is None else rep_ms
        warmup = self.warmup_ms if warmup_ms is None else warmup_ms
        fn()
        torch.cuda.synchronize()
        # One call's GPU time with the flush, and its issue time on the host (synchronized between calls, so that
        # the issue never waits for a full launch queue).
        gpu, issue = [], []
        for _ in range(5):
            self._flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            fn()
            issue.append(1e6 * (time.perf_counter() - t0))
            end.record()
            end.synchronize()
            gpu.append(1e3 * start.elapsed_time(end))
        per_call = max(1.0, _median(gpu))
        for _ in range(int(1e3 * warmup / per_call)):
            fn()
        hold_us = 2.0 * _median(issue) + 20.0 if self.hold else 0.0
        hold_cycles = int(hold_us * self._spin_cycles_per_us()) if self.hold else 0
        n = max(5, int(1e3 * rep / (self._flush_us() + hold_us + per_call)))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in events:
            self._flush.zero_()
            if hold_cycles:
                torch.cuda._sleep(hold_cycles)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [1e3 * start.elapsed_time(end) for start, end in events]

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


def _once_us(op: Callable[[], object]) -> float:
    """GPU time of one op() in microseconds, after one untimed op() (which also loads its kernel)."""
    op()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    op()
    end.record()
    end.synchronize()
    return 1e3 * start.elapsed_time(end)


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
