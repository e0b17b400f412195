"""How the benchmark times a call: medians of L2-flushed calls with the host held out, peers in interleaved turns."""
from __future__ import annotations

import contextlib
import math
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
    18.2-18.5 us (docs/decisions.md). The hold is twice fn's measured issue time plus 20 us. Host time has its own
    suite (--suite host).

    A measurement takes as many samples as fit in rep_ms, or exactly `calls` of them (split over the turns of
    interleaved()). Timer.forwards() times whole forwards instead (the model suite's prefill and decode steps, graph
    replays of decode chains): no flush and no hold, and each sample waited for before the next is issued."""

    FLUSH_BYTES = 256 * 1024 * 1024

    def __init__(self, rep_ms: float = 100, warmup_ms: float = 25, hold: bool = True, flush: bool = True,
                 calls: Optional[int] = None, sync: bool = False):
        # hold=False: do_bench's way; sync: each sample ends before the next is issued, so that a call's own host
        # time counts, as it does for whoever runs one forward after another.
        self.rep_ms, self.warmup_ms, self.hold, self.flush, self.calls, self.sync = (rep_ms, warmup_ms, hold, flush,
                                                                                     calls, sync)
        self._flush = torch.empty(self.FLUSH_BYTES, dtype=torch.int8, device="cuda") if flush else None
        self._cycles_per_us: Optional[float] = None
        self._flush_time_us: Optional[float] = None

    @classmethod
    def forwards(cls, calls: int) -> "Timer":
        """A timer of whole forwards: `calls` samples per measurement, each a synchronized call between CUDA events,
        no L2 flush (a forward's weights far exceed the L2) and no hold (an eager forward's host time is part of
        what it costs)."""
        return cls(warmup_ms=0, hold=False, flush=False, calls=calls, sync=True)

    def __call__(self, fn: Callable[[], object]) -> float:
        return median(self.samples(fn, calls=self.calls))

    def _spin_cycles_per_us(self) -> float:
        """The spin kernel's clock (torch.cuda._sleep counts SM cycles), measured once."""
        if self._cycles_per_us is None:
            cycles = 200_000
            self._cycles_per_us = cycles / _once_us(lambda: torch.cuda._sleep(cycles))
        return self._cycles_per_us

    def _flush_us(self) -> float:
        """How long one flush runs, measured once (0 without a flush)."""
        if self._flush is None:
            return 0.0
        if self._flush_time_us is None:
            self._flush_time_us = _once_us(self._flush.zero_)
        return self._flush_time_us

    def samples(self, fn: Callable[[], object], rep_ms: Optional[float] = None, warmup_ms: Optional[float] = None,
                calls: Optional[int] = None) -> list[float]:
        """Every timed call of fn() in microseconds: after warmup_ms of untimed calls, `calls` of them, or as many
        as fit in rep_ms of GPU time (flush, hold and fn)."""
        rep = self.rep_ms if rep_ms is None else rep_ms
        warmup = self.warmup_ms if warmup_ms is None else warmup_ms
        fn()
        torch.cuda.synchronize()
        per_call, hold_us = 1.0, 0.0
        if self.hold or warmup > 0 or calls is None:
            # One call's GPU time with the flush, and its issue time on the host (synchronized between calls, so
            # that the issue never waits for a full launch queue).
            gpu, issue = [], []
            for _ in range(5):
                if self._flush is not None:
                    self._flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                t0 = time.perf_counter()
                fn()
                issue.append(1e6 * (time.perf_counter() - t0))
                end.record()
                end.synchronize()
                gpu.append(1e3 * start.elapsed_time(end))
            per_call = max(1.0, median(gpu))
            for _ in range(int(1e3 * warmup / per_call)):
                fn()
            hold_us = 2.0 * median(issue) + 20.0 if self.hold else 0.0
        hold_cycles = int(hold_us * self._spin_cycles_per_us()) if self.hold else 0
        n = calls if calls is not None else max(5, int(1e3 * rep / (self._flush_us() + hold_us + per_call)))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in events:
            if self._flush is not None:
                self._flush.zero_()
            if hold_cycles:
                torch.cuda._sleep(hold_cycles)
            start.record()
            fn()
            end.record()
            if self.sync:
                end.synchronize()
        torch.cuda.synchronize()
        return [1e3 * start.elapsed_time(end) for start, end in events]

    def interleaved_samples(self, fns: dict[str, Callable[[], object]], rounds: int = 3,
                            around: Optional[Callable[[str], ContextManager]] = None,
                            failed: Optional[dict] = None) -> dict[str, list[float]]:
        """Every sample of each fn, taken in `rounds` turns (of rep_ms / rounds, or of calls / rounds samples), the
        order of the fns rotated by one every round; `around(name)`, if given, is entered for each of that fn's
        turns (tune.py forces a kernel there). With `failed` (a dict), a fn that raises in one of its turns is
        put there (name: the exception), left out of the later turns and out of the result, and the others go on;
        without it the exception propagates. Under the H200's power cap the SM clock wanders on a scale of
        seconds (docs/design.md, "Peaks and the power cap"); timing the peers one after another in one fixed order
        hands each its own stretch of that wander, and single rows moved by up to 8% between runs. Interleaved
        turns spread the wander over every peer alike."""
        names = list(fns)
        times: dict[str, list[float]] = {n: [] for n in names}
        calls = None if self.calls is None else max(1, math.ceil(self.calls / rounds))
        for r in range(rounds):
            for n in names[r % len(names):] + names[: r % len(names)]:
                if failed is not None and n in failed:
                    continue
                warmup = self.warmup_ms if r == 0 else min(self.warmup_ms, max(5.0, self.warmup_ms / rounds))
                try:
                    with around(n) if around is not None else contextlib.nullcontext():
                        times[n] += self.samples(fns[n], rep_ms=self.rep_ms / rounds, warmup_ms=warmup, calls=calls)
                except Exception as e:  # noqa: BLE001
                    if failed is None:
                        raise
                    failed[n] = e
        return {n: t for n, t in times.items() if failed is None or n not in failed}

    def interleaved(self, fns: dict[str, Callable[[], object]], rounds: int = 3,
                    around: Optional[Callable[[str], ContextManager]] = None,
                    failed: Optional[dict] = None) -> dict[str, float]:
        """The median time of each fn over its interleaved_samples()."""
        return {n: median(t) for n, t in self.interleaved_samples(fns, rounds, around, failed).items()}


def _once_us(op: Callable[[], object]) -> float:
    """GPU time of one op() in microseconds, after one untimed op() (which also loads its kernel)."""
    op()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    op()
    end.record()
    end.synchronize()
    return 1e3 * start.elapsed_time(end)


def median(xs: list[float]) -> float:
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
