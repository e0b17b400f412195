"""fp8ext.bench's timing bookkeeping, without a GPU: the interleaved turns that the records are measured with."""
import pytest

from fp8ext.bench import Timer, _median


class ScriptedTimer(Timer):
    """A Timer whose 'measurements' are scripted: each turn of a peer returns the clock's current value, and the
    clock drifts upward with every turn, as a card settling under its power cap does."""

    def __init__(self, rep_ms=90, warmup_ms=30):
        self.rep_ms, self.warmup_ms = rep_ms, warmup_ms
        self.calls = []
        self.clock = 0.0

    def samples(self, fn, rep_ms=None, warmup_ms=None):
        self.calls.append((fn(), rep_ms, warmup_ms))
        self.clock += 1.0
        return [fn() * 10.0 + self.clock]


def test_median():
    assert _median([3.0, 1.0, 2.0]) == 2.0
    assert _median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_interleaved_rotates_the_order_and_splits_the_time():
    t = ScriptedTimer()
    result = t.interleaved({"a": lambda: 1, "b": lambda: 2, "c": lambda: 3}, rounds=3)
    assert [c[0] for c in t.calls] == [1, 2, 3, 2, 3, 1, 3, 1, 2]
    assert all(rep == 30 for _, rep, _ in t.calls)
    assert [w for _, _, w in t.calls[:3]] == [30, 30, 30] and all(w == 10 for _, _, w in t.calls[3:])
    # Each peer gets one early, one middle and one late turn: a = 10 + {1, 6, 8}, b = 20 + {2, 4, 9},
    # c = 30 + {3, 5, 7}; the median is taken over all of a peer's samples.
    assert result == {"a": 16.0, "b": 24.0, "c": 35.0}


def test_one_round_is_the_old_method():
    t = ScriptedTimer()
    t.interleaved({"a": lambda: 1, "b": lambda: 2}, rounds=1)
    assert [(c[0], c[1], c[2]) for c in t.calls] == [(1, 90, 30), (2, 90, 30)]


def test_interleaved_enters_around_for_each_turn():
    import contextlib

    t, entered = ScriptedTimer(), []

    @contextlib.contextmanager
    def around(name):
        entered.append(name)
        yield

    t.interleaved({"a": lambda: 1, "b": lambda: 2}, rounds=2, around=around)
    assert entered == ["a", "b", "b", "a"] and [c[0] for c in t.calls] == [1, 2, 2, 1]

def test_rounds_must_be_positive():
    from fp8ext.bench import main
    with pytest.raises(SystemExit):
        main(["--rounds", "0"])
