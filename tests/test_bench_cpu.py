"""fp8ext.bench without a GPU: the interleaved turns that the records are measured with, and the suite registry and
command line (every suite offered, the probe suites refusing cleanly, the record's header and format)."""
import json
import sys

import pytest

import fp8ext.bench as bench
from fp8ext.bench import Timer, cli, main
from fp8ext.bench.timing import median
from fp8ext.bench.suites import host as host_suite, peers as peers_suite, zoo as zoo_suite


class ScriptedTimer(Timer):
    """A Timer whose 'measurements' are scripted: each turn of a peer returns the clock's current value, and the
    clock drifts upward with every turn, as a card settling under its power cap does."""

    def __init__(self, rep_ms=90, warmup_ms=30, calls=None):
        self.rep_ms, self.warmup_ms, self.calls = rep_ms, warmup_ms, calls
        self.seen = []
        self.clock = 0.0

    def samples(self, fn, rep_ms=None, warmup_ms=None, calls=None):
        self.seen.append((fn(), rep_ms, warmup_ms, calls))
        self.clock += 1.0
        return [fn() * 10.0 + self.clock]


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_interleaved_rotates_the_order_and_splits_the_time():
    t = ScriptedTimer()
    result = t.interleaved({"a": lambda: 1, "b": lambda: 2, "c": lambda: 3}, rounds=3)
    assert [c[0] for c in t.seen] == [1, 2, 3, 2, 3, 1, 3, 1, 2]
    assert all(rep == 30 and calls is None for _, rep, _, calls in t.seen)
    assert [w for _, _, w, _ in t.seen[:3]] == [30, 30, 30] and all(w == 10 for _, _, w, _ in t.seen[3:])
    # Each peer gets one early, one middle and one late turn: a = 10 + {1, 6, 8}, b = 20 + {2, 4, 9},
    # c = 30 + {3, 5, 7}; the median is taken over all of a peer's samples.
    assert result == {"a": 16.0, "b": 24.0, "c": 35.0}


def test_one_round_is_the_old_method():
    t = ScriptedTimer()
    t.interleaved({"a": lambda: 1, "b": lambda: 2}, rounds=1)
    assert [(c[0], c[1], c[2]) for c in t.seen] == [(1, 90, 30), (2, 90, 30)]


def test_interleaved_splits_a_count_of_calls_over_the_turns():
    t = ScriptedTimer(warmup_ms=0, calls=5)
    t.interleaved({"a": lambda: 1, "b": lambda: 2}, rounds=2)
    assert [(c[0], c[2], c[3]) for c in t.seen] == [(1, 0, 3), (2, 0, 3), (2, 0, 3), (1, 0, 3)]


def test_interleaved_can_record_a_failing_fn_and_go_on():
    t, turns = ScriptedTimer(), []

    def flaky():
        turns.append("b")
        if len(turns) > 1:
            raise RuntimeError("out of memory")
        return 2

    failed = {}
    result = t.interleaved({"a": lambda: 1, "b": flaky, "c": lambda: 3}, rounds=3, failed=failed)
    assert set(result) == {"a", "c"} and list(failed) == ["b"] and str(failed["b"]) == "out of memory"
    assert len(turns) == 2  # no turn of b after the one that failed
    with pytest.raises(RuntimeError, match="out of memory"):
        t.interleaved({"b": flaky}, rounds=1)


def test_interleaved_enters_around_for_each_turn():
    import contextlib

    t, entered = ScriptedTimer(), []

    @contextlib.contextmanager
    def around(name):
        entered.append(name)
        yield

    t.interleaved({"a": lambda: 1, "b": lambda: 2}, rounds=2, around=around)
    assert entered == ["a", "b", "b", "a"] and [c[0] for c in t.seen] == [1, 2, 2, 1]


class _GpuScript:
    """Stands in for the CUDA calls Timer.samples makes, in order: each call appends to `log`; fn's issue takes
    `issue_us` on a scripted host clock and every timed span `span_us`."""

    def __init__(self, monkeypatch, issue_us=10.0, span_us=18.0):
        import fp8ext.bench.timing as timing

        self.log, self.clock, self.issue_us = [], 0.0, issue_us
        script = self

        class Event:
            def __init__(self, enable_timing=False):
                self.name = None

            def record(self):
                script.log.append("record")

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return span_us / 1e3

        class Flush:
            def zero_(self):
                script.log.append("flush")

        monkeypatch.setattr(timing.torch.cuda, "Event", Event)
        monkeypatch.setattr(timing.torch.cuda, "_sleep", lambda cycles: self.log.append(("hold", cycles)))
        monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)
        monkeypatch.setattr(timing.time, "perf_counter", lambda: self.clock)
        self.flush = Flush()

    def fn(self):
        self.log.append("fn")
        self.clock += self.issue_us * 1e-6


def _timer(script, hold=True, rep_ms=10.0):
    t = Timer.__new__(Timer)
    t.rep_ms, t.warmup_ms, t.hold, t.flush, t.calls, t.sync = rep_ms, 0.0, hold, True, None, False
    t._flush, t._cycles_per_us, t._flush_time_us = script.flush, 1000.0, 70.0
    return t


def test_timer_holds_the_gpu_before_each_start_event(monkeypatch):
    """Each timed sample is flush, hold, start, fn, end; the hold is twice fn's issue time plus 20 us (in the spin
    kernel's cycles), and the samples fill rep_ms of flush + hold + fn."""
    script = _GpuScript(monkeypatch, issue_us=10.0, span_us=18.0)
    samples = _timer(script).samples(script.fn)
    n = int(10e3 / (70.0 + 40.0 + 18.0))
    assert len(samples) == n and samples == [pytest.approx(18.0)] * n
    timed = script.log[-5 * n:]
    assert timed == ["flush", ("hold", 40_000), "record", "fn", "record"] * n


def test_timer_without_hold_is_do_bench_order(monkeypatch):
    script = _GpuScript(monkeypatch)
    samples = _timer(script, hold=False).samples(script.fn)
    assert not any(isinstance(e, tuple) for e in script.log)
    assert script.log[-4 * len(samples):] == ["flush", "record", "fn", "record"] * len(samples)


def test_timer_of_forwards_takes_its_calls_unflushed_one_after_another(monkeypatch):
    script = _GpuScript(monkeypatch, span_us=2500.0)
    synced = []
    t = Timer.forwards(calls=4)
    assert (t.flush, t.hold, t.sync, t._flush) == (False, False, True, None)
    import fp8ext.bench.timing as timing

    real_event = timing.torch.cuda.Event

    class SyncedEvent(real_event):
        def synchronize(self):
            synced.append(len(script.log))

    monkeypatch.setattr(timing.torch.cuda, "Event", SyncedEvent)
    samples = t.samples(script.fn, calls=4)
    # One untimed call, then each sample start, fn, end, waited for: no flush, no hold, no issue-time probe.
    assert samples == [pytest.approx(2500.0)] * 4
    assert script.log == ["fn"] + ["record", "fn", "record"] * 4
    assert synced == [4, 7, 10, 13]


def test_rounds_must_be_positive():
    with pytest.raises(SystemExit):
        main(["--rounds", "0"])


# ---- the suite registry and the command line -----------------------------------------------------------------

PEER_SUITES = ["quick", "llama", "inductor", "custom", "zoo"]
PROBE_SUITES = ["floor", "host", "invariance", "inductor-peer", "autotune", "edge", "model", "quantize", "linear",
                "blockwise", "decode-chain", "compile", "grouped", "moe", "large-m", "torch-blockwise"]
# The bench record's header and body, in the order the recorded JSON (and the tools reading it) have them.
RECORD_KEYS = ["commit", "gpu", "torch", "cuda", "date", "suite", "host", "method", "summary", "rows"]


@pytest.fixture
def fake_gpu(monkeypatch):
    """The CLI believes it may time: no GPU problem, a named GPU."""
    monkeypatch.setattr(cli, "gpu_problem", lambda: None)
    monkeypatch.setattr(bench.common.torch.cuda, "get_device_name", lambda *a: "Fake GPU")


def test_every_suite_is_a_choice_and_in_the_help(capsys):
    assert list(bench.SUITES) == PEER_SUITES[:4] + ["zoo"] + PROBE_SUITES
    suite_action = next(a for a in cli.build_parser()._actions if a.dest == "suite")
    assert list(suite_action.choices) == list(bench.SUITES)
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name, suite in bench.SUITES.items():
        assert f"  {name} " in out and suite.help in out


def test_unknown_suite_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--suite", "nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err and "Traceback" not in err


def test_a_suite_registered_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        bench.register_suite("quick", help="again")(lambda args: {})


@pytest.mark.parametrize("name", PROBE_SUITES)
def test_probe_suites_refuse_without_an_sm90_gpu(name, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "gpu_problem", lambda: "no CUDA GPU")
    assert main(["--suite", name, "--json", str(tmp_path / "out.json")]) == 1
    captured = capsys.readouterr()
    assert captured.err == (f"fp8ext.bench --suite {name}: needs an H100/H200 (sm_90) and a CUDA build of fp8ext "
                            "(no CUDA GPU)\n")
    assert not (tmp_path / "out.json").exists()


def test_peer_suites_fall_back_to_the_cpu_demo(monkeypatch, capsys):
    monkeypatch.setattr(cli, "gpu_problem", lambda: "no CUDA GPU")
    assert main([]) == 0
    assert "running the CPU correctness demo" in capsys.readouterr().out


def peer_rows():
    return [{"M": m, "N": 4096, "K": 4096, "use_fast_accum": fast, "kernel": "k", "fp8ext_us": 10.0,
             "torch_rowwise_us": 11.0 if m < 1024 else 9.0, "torch_tensorwise_us": 10.5}
            for m in (16, 2048) for fast in (True, False)]


def test_peer_suite_record_keeps_its_format(fake_gpu, monkeypatch, capsys, tmp_path):
    seen = {}

    def fake_run_gpu(shapes, accums, timer, **kw):
        seen.update(shapes=shapes, accums=accums, rep_ms=timer.rep_ms, **kw)
        return peer_rows()

    monkeypatch.setattr(peers_suite, "run_gpu", fake_run_gpu)
    monkeypatch.setattr(peers_suite, "Timer", lambda rep_ms: type("T", (), {"rep_ms": rep_ms})())
    path = tmp_path / "run.json"
    assert main(["--suite", "custom", "--shapes", "16x4096x4096", "--json", str(path), "--quiet"]) == 0
    assert seen["shapes"] == [(16, 4096, 4096)] and seen["accums"] == [True, False] and seen["rep_ms"] == 100
    assert seen["rounds"] == 3 and seen["progress"] is False and seen["compile_peer"] is False
    record = json.loads(path.read_text())
    assert list(record) == RECORD_KEYS
    assert record["suite"] == "custom" and record["gpu"] == "Fake GPU" and record["rows"] == peer_rows()
    assert record["summary"]["fast all vs rowwise"] == pytest.approx((1.1 * 0.9) ** 0.5)
    assert "interleaved turns of 33 ms per peer" in record["method"]
    out = capsys.readouterr().out
    assert "geomean speed-up of fp8ext (peer time / fp8ext time):" in out and f"wrote {path}" in out


def zoo_rows_fake():
    return [{"M": m, "N": 2048, "K": 5120, "weight": "w", "split": split, "accum": accum,
             "use_fast_accum": accum == "fast", "fp8ext_us": 10.0, "fp8ext_kernels_us": 10.0,
             "torch_rowwise_us": 10.0 * (1.2 if split == "tune" else 0.95), "kernel": "k", "kernels_kernel": "k",
             "same_path": True, "tile_ratio": 1.0, "predicted_us": 9.0, "torch_predicted_us": 9.5}
            for m in (1, 96, 300, 5000) for split in ("tune", "heldout") for accum in ("fast", "precise")]


def test_zoo_record_and_plot(fake_gpu, monkeypatch, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(zoo_suite, "run_zoo", lambda rows, accums, timer, **kw: zoo_rows_fake())
    monkeypatch.setattr(zoo_suite, "Timer", lambda rep_ms: None)
    path, png = tmp_path / "zoo.json", tmp_path / "zoo.png"
    assert main(["--suite", "zoo", "--json", str(path), "--plot", str(png), "--quiet"]) == 0
    record = json.loads(path.read_text())
    assert list(record) == RECORD_KEYS and record["suite"] == "zoo"
    assert record["summary"]["heldout fast all"]["default"]["below 0.97"] == 4
    assert png.stat().st_size > 0 and f"wrote {png}" in capsys.readouterr().out


def test_plots_say_so_without_matplotlib(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert bench.plot_zoo(zoo_rows_fake(), str(tmp_path / "z.png")) is False
    assert bench.plot(peer_rows(), str(tmp_path / "p.png")) is False
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


def test_registered_suite_gets_the_header_and_its_defaults(fake_gpu, monkeypatch, capsys, tmp_path):
    seen = {}

    def probe(args):
        seen.update(rep_ms=args.rep_ms, accum=args.accum)
        return {"method": "m", "summary": {"ratio": 1.23456, "note": "text"}, "rows": [{"x": 1}]}

    monkeypatch.setitem(bench.SUITES, "probe", bench.Suite("probe", probe, "a test suite", defaults={"rep_ms": 7}))
    path = tmp_path / "sub" / "probe.json"
    assert main(["--suite", "probe", "--json", str(path), "--plot", str(tmp_path / "p.png")]) == 0
    assert seen == {"rep_ms": 7, "accum": "fast,precise"}
    record = json.loads(path.read_text())
    assert list(record) == RECORD_KEYS and record["suite"] == "probe" and record["rows"] == [{"x": 1}]
    assert {k: record[k] for k in ("gpu", "torch")} == {"gpu": "Fake GPU", "torch": bench.common.torch.__version__}
    out = capsys.readouterr().out
    assert "probe summary:" in out and "1.235" in out and "text" in out
    assert "--plot: the probe suite has no plot" in out


@pytest.mark.parametrize("given, read", [("both", "fast,precise"), ("precise,fast", "precise,fast"),
                                         ("fast", "fast"), ("precise, both", "precise,fast")])
def test_accum_words_reach_the_suite_as_fast_and_precise(fake_gpu, monkeypatch, given, read):
    seen = {}
    monkeypatch.setitem(bench.SUITES, "probe", bench.Suite("probe", lambda a: seen.update(accum=a.accum) or {
        "method": "m", "summary": {}, "rows": []}, "a test suite"))
    assert main(["--suite", "probe", "--accum", given]) == 0
    assert seen["accum"] == read


@pytest.mark.parametrize("given", ["fsat", "fast,bogus", ""])
def test_an_unknown_accum_is_a_usage_error_not_precise(fake_gpu, capsys, given):
    # Each suite reads any word but "fast" as precise: an unknown one must stop here, before anything is timed.
    with pytest.raises(SystemExit) as e:
        main(["--suite", "large-m", "--accum", given])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--accum" in err and "Traceback" not in err


def test_blockwise_suite_rows_and_summary():
    from fp8ext.bench.suites import blockwise as bw

    tune, held = bw.blockwise_rows("tune"), bw.blockwise_rows("heldout")
    assert len(tune) == len(bw.DEEPSEEK_V3) * len(bw.DEEPSEEK_M) and {r["split"] for r in tune} == {"tune"}
    assert held and {r["split"] for r in held} == {"heldout"}
    assert not {(r["N"], r["K"]) for r in held} & {(n, k) for _, n, k in bw.DEEPSEEK_V3}
    rows = [{"split": "tune", "M": 16, "N": 7168, "K": 2048, "kernel": "k1", "fp8ext_us": 10.0,
             "fp8ext_rowwise_us": 9.0, "torch_blockwise_us": 12.0, "kernels_us": {"k1": 10.0, "k2": 8.0}},
            {"split": "tune", "M": 2048, "N": 7168, "K": 2048, "kernel": "k2", "fp8ext_us": 40.0,
             "fp8ext_rowwise_us": 40.0, "torch_blockwise_us": 30.0, "kernels_us": {"k1": "failed: x", "k2": 40.0}},
            {"split": "heldout", "M": 1, "N": 4096, "K": 4096, "kernel": "k1", "fp8ext_us": 5.0,
             "fp8ext_rowwise_us": 5.0, "torch_blockwise_us": "failed: E"}]
    s = bw.summarize(rows, "")
    assert s["tune M<=128"]["vs torch blockwise"]["geomean"] == pytest.approx(1.2)
    assert s["tune M>=1024"]["vs torch blockwise"]["below 0.90"] == 1
    assert s["tune all"]["dispatch / best kernel"]["worst"][:2] == [1.25, 16]
    assert "vs torch blockwise" not in s["heldout M<=128"]  # its one row failed: no ratio is made up
    # A row where torch's own result broke the float64 bound is no speed comparison: counted, left out.
    wrong = {**rows[1], "M": 4096, "K": 2880, "torch_blockwise_us": 10.0, "torch_blockwise_wrong": True}
    s = bw.summarize(rows + [wrong], "")
    assert s["tune M>=1024"]["torch result wrong"] == 1 and s["tune M>=1024"]["rows"] == 2
    assert s["tune M>=1024"]["vs torch blockwise"]["geomean"] == pytest.approx(0.75)
    assert bw.summarize([], "no block-wise path")["torch._scaled_mm block-wise"] == "unavailable: no block-wise path"


@pytest.mark.parametrize("argv, message", [
    (["--suite", "quick", "--shapes", "16x4096x4096"], "--shapes is not an option of --suite quick (it is of: custom, "
     "blockwise, decode-chain)"),
    (["--suite", "custom", "--split", "heldout", "--shapes", "16x4096x4096"], "--split is not an option of --suite "
     "custom (it is of: zoo, blockwise)"),
    (["--suite", "blockwise", "--split", "tune", "--shapes", "16x4096x4096"], "--shapes and --split choose the rows"),
    (["--suite", "blockwise", "--shapes", "16x4096x4100"], "'16x4096x4100': N and K must be multiples of 16"),
    (["--suite", "custom", "--shapes", "16x4096"], "'16x4096' is not MxNxK"),
    (["--suite", "blockwise", "--shapes", "0x4096x4096"], "M, N and K must be at least 1"),
])
def test_options_that_choose_rows_are_refused_where_they_would_be_ignored(argv, message, capsys):
    """--shapes and --split are read by some suites only: elsewhere the CLI refuses them, before looking for a GPU,
    rather than measure rows other than those asked for; malformed shapes are refused with the item named."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_blockwise_suite_takes_a_models_own_shapes(fake_gpu, monkeypatch, tmp_path):
    from fp8ext.bench.suites import blockwise as bw

    rows = bw.blockwise_rows(None, "3x4096x7168, 2048x576x7168")
    assert rows == [{"M": 3, "N": 4096, "K": 7168, "weight": "--shapes", "split": "custom"},
                    {"M": 2048, "N": 576, "K": 7168, "weight": "--shapes", "split": "custom"}]
    seen = {}

    def fake_run(rows, timer, all_kernels, check, progress, rounds):
        seen.update(rows=rows, all_kernels=all_kernels)
        return [{**r, "kernel": "k1", "fp8ext_us": 10.0, "fp8ext_rowwise_us": 9.0, "torch_blockwise_us": 11.0}
                for r in rows], ""

    monkeypatch.setattr(bw, "run_blockwise", fake_run)
    monkeypatch.setattr(bw, "Timer", lambda rep_ms: None)
    monkeypatch.setattr(bw.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(bw.torch.cuda, "get_device_properties", lambda i: type("P", (), {"multi_processor_count": 132}))
    path = tmp_path / "bw.json"
    assert main(["--suite", "blockwise", "--shapes", "3x4096x7168,2048x576x7168", "--all-kernels", "--quiet",
                 "--json", str(path)]) == 0
    assert seen["rows"] == rows and seen["all_kernels"] is True
    summary = json.loads(path.read_text())["summary"]
    assert summary["custom M<=128"]["vs torch blockwise"]["geomean"] == pytest.approx(1.1)
    assert summary["custom all"]["rows"] == 2 and not any(k.startswith(("tune", "heldout")) for k in summary)


def test_suite_record_names_the_settings_that_change_what_runs(monkeypatch):
    from fp8ext.bench import common

    monkeypatch.setattr(common, "run_record",
                        lambda: {"commit": "c", "gpu": "Fake GPU", "torch": "t", "date": "d"})
    for name in common.RECORDED_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert "settings" not in common.suite_record("model")
    monkeypatch.setenv("FP8EXT_PDL", "0")
    monkeypatch.setenv("FP8EXT_OUT", "/somewhere")  # not a setting of what runs: left out
    record = common.suite_record("model")
    assert record["settings"] == {"FP8EXT_PDL": "0"} and list(record)[-1] == "settings"


def test_host_summary_divides_each_row_by_torchs_own_call():
    """The host suite's ratios: per shape and grad mode over torch._scaled_mm, and the worst of fp8ext's."""
    rows = [{"shape": "backstop", "M": 4, "N": 16, "K": 32, "grad_mode": mode, "fp8ext_us": f, "fp8ext_op_us": 30.0,
             "torch_rowwise_us": 20.0, "torch_op_us": 23.0, "float8_linear_us": 40.0, "bf16_linear_us": 25.0}
            for mode, f in (("grad", 24.0), ("inference_mode", 19.0))]
    s = host_suite.summarize_host(rows)
    assert s["backstop 4x16x32 grad"] == {"fp8ext.scaled_mm / torch._scaled_mm": 1.2,
                                          "torch.ops.fp8ext.scaled_mm / torch._scaled_mm": 1.5,
                                          "torch.ops.aten._scaled_mm / torch._scaled_mm": 1.15,
                                          "Float8Linear / nn.Linear": 1.6}
    assert s["backstop 4x16x32 inference_mode"]["fp8ext.scaled_mm / torch._scaled_mm"] == 0.95
    assert s["fp8ext.scaled_mm / torch._scaled_mm, worst"] == 1.2


def test_zoo_host_inclusive_columns_and_summary(fake_gpu, monkeypatch, tmp_path):
    """--host-inclusive: run_zoo gets a timer without the hold, and the summary has the host-inclusive ratio."""
    seen = {}

    def fake_run(rows, accums, timer, **kw):
        seen["host_timer"] = kw.get("host_timer")
        out = zoo_rows_fake()
        for r in out:
            r.update(fp8ext_host_us=20.0, fp8ext_kernels_host_us=20.0, torch_rowwise_host_us=10.0)
        return out

    monkeypatch.setattr(zoo_suite, "run_zoo", fake_run)
    monkeypatch.setattr(zoo_suite, "Timer", lambda rep_ms, hold=True: ("timer", rep_ms, hold))
    path = tmp_path / "zoo.json"
    assert main(["--suite", "zoo", "--host-inclusive", "--json", str(path), "--quiet"]) == 0
    assert seen["host_timer"][2] is False
    record = json.loads(path.read_text())
    assert record["summary"]["heldout fast all"]["default, host included"]["geomean"] == pytest.approx(0.5)
    assert "as an eager caller waits for it" in record["method"]


def test_the_cpu_demo_writes_its_record_and_names_the_options_it_does_not_use(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "gpu_problem", lambda: "no CUDA GPU")
    out = tmp_path / "demo.json"
    assert main(["--suite", "custom", "--shapes", "16x4096x4096", "--json", str(out)]) == 0
    assert "--shapes not used" in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert record["suite"] == "cpu-demo" and len(record["rows"]) == 6
    assert all(r["within_bound"] for r in record["rows"]) and record["summary"] == {"all within the bound": True}
