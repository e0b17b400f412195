"""The model, quantize, linear and decode-chain suites without a GPU: registered, refusing cleanly, and their arithmetic (tokens/s,
top-1 agreement, bandwidth, ratios, summaries) on small synthetic inputs; the model comparison runs end to end on
a tiny Llama on CPU, its timings from a scripted clock."""
import json

import pytest
import torch

import fp8ext.bench as bench
from fp8ext.bench import cli, llama_models, main, timing
from fp8ext.bench.common import ratio, split_failures, timed_or_failed
from fp8ext.bench.suites import decode_chain as chain_suite, linear as linear_suite, model as model_suite
from fp8ext.bench.suites import moe as moe_suite, quantize as quantize_suite
from fp8ext.testing import torch_cpu_takes_rowwise_scales

needs_cpu_rowwise = pytest.mark.skipif(not torch_cpu_takes_rowwise_scales(),
                                       reason="the torch._scaled_mm row-wise peer: this torch's CPU path takes "
                                              "per-tensor scales only")

NEW_SUITES = ["model", "quantize", "linear"]


@pytest.mark.parametrize("name", NEW_SUITES)
def test_registered_and_refuse_without_an_sm90_gpu(name, monkeypatch, capsys, tmp_path):
    assert name in bench.SUITES and not bench.SUITES[name].cpu_demo
    monkeypatch.setattr(cli, "gpu_problem", lambda: "no CUDA GPU")
    assert main(["--suite", name, "--json", str(tmp_path / "out.json")]) == 1
    err = capsys.readouterr().err
    assert err == f"fp8ext.bench --suite {name}: needs an H100/H200 (sm_90) and a CUDA build of fp8ext (no CUDA GPU)\n"
    assert not (tmp_path / "out.json").exists()


def test_ratio_and_failures():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio("failed: X", 2.0) is None and ratio(1.0, 0.0) is None and ratio(None, 1.0) is None
    ok, errors = split_failures({"good": lambda: 1, "bad": lambda: 1 / 0})
    assert list(ok) == ["good"] and errors == {"bad": "failed: ZeroDivisionError: division by zero"}


class FakeTimer:
    def __init__(self):
        self.seen = []

    def interleaved(self, fns, rounds, failed):
        self.seen.append(list(fns))
        failed["c"] = MemoryError("in its second turn")
        return {n: 10.0 * (i + 1) for i, n in enumerate(fns) if n != "c"}


def test_timed_or_failed_keeps_the_order_and_records_the_failures():
    t = FakeTimer()
    times = timed_or_failed(t, {"a": lambda: 1, "b": lambda: [][0], "c": lambda: 2}, rounds=2)
    assert t.seen == [["a", "c"]]
    assert list(times) == ["a", "b", "c"] and times["a"] == 10.0
    assert times["b"].startswith("failed: IndexError") and times["c"] == "failed: MemoryError: in its second turn"


# ---- model ---------------------------------------------------------------------------------------------------

def test_tokens_per_s_and_top1():
    assert model_suite.tokens_per_s(2048, 10.0) == pytest.approx(204800.0)
    assert model_suite.tokens_per_s(8, "failed: X") is None
    ref = torch.tensor([[[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]], [[0.0, 0.0, 3.0], [0.0, 1.0, 0.0]]])
    out = ref.clone()
    out[1, 1] = torch.tensor([5.0, 0.0, 0.0])  # one of four positions disagrees
    assert model_suite.top1_agreement(out, ref) == 0.75 and model_suite.top1_agreement(ref, ref) == 1.0


def test_speedups():
    s = model_suite.speedups({"bf16": 10.0, "fp8ext": 5.0, "torch_rowwise": 6.0, "torchao": "failed: E"})
    assert s == {"vs_bf16": {"fp8ext": 2.0, "torch_rowwise": pytest.approx(10 / 6)},
                 "fp8ext_vs_torch_rowwise": pytest.approx(1.2)}


def scripted_forwards(monkeypatch, clock):
    """Timer.samples with its CUDA events scripted: each of a turn's calls of fn takes clock(fn) ms."""
    def samples(self, fn, rep_ms=None, warmup_ms=None, calls=None):
        assert (self.flush, self.hold, self.sync) == (False, False, True)  # Timer.forwards: whole forwards
        return [1e3 * clock(fn) for _ in range(calls)]

    monkeypatch.setattr(timing.Timer, "samples", samples)


def test_time_ms_interleaves_and_records_a_failing_variant(monkeypatch):
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b"), "bad": lambda: 1 / 0}
    clock = iter(range(100))
    scripted_forwards(monkeypatch, lambda fn: (fn(), float(next(clock)))[1])
    times = model_suite.time_ms(fns, iters=4, rounds=2)
    # One call each to find the failure, then turns of 2: a a b b, then b b a a; ms from the timer's us.
    assert calls == ["a", "b", "a", "a", "b", "b", "b", "b", "a", "a"]
    assert times["a"] == 3.5 and times["b"] == 3.5 and times["bad"].startswith("failed: ZeroDivisionError")


@pytest.fixture
def tiny_timed(monkeypatch):
    """compare() on a tiny Llama on CPU with timing on: a scripted clock for CUDA events, no CUDA graph capture;
    fp8ext's forwards take half of bf16's time."""
    pytest.importorskip("transformers")

    def fake_clock(fn):
        fn()
        # A prefill fn holds its model as a default argument, a decode step in its closure; fp8ext's variant is the
        # model with Float8Linear layers and no TorchRowwiseLinear.
        held = [*(fn.__defaults__ or ()), *(c.cell_contents for c in fn.__closure__ or ())]
        model = next(x for x in held if isinstance(x, torch.nn.Module))
        mods = {type(m).__name__ for m in model.modules()}
        return 1.0 if "Float8Linear" in mods and "TorchRowwiseLinear" not in mods else 2.0

    scripted_forwards(monkeypatch, fake_clock)
    monkeypatch.setattr(llama_models, "cuda_graph", lambda step: step)
    return model_suite.compare("tiny", layers=1, vocab=256, device="cpu", prefill_shapes=[(1, 32), (2, 16)],
                               decode_batches=[2], ctx=8, timed=True, iters=2, rounds=2, torchao=False)


@needs_cpu_rowwise
def test_tiny_model_comparison_timed_on_cpu(tiny_timed, tmp_path):
    res = tiny_timed
    assert res["variants"] == ["bf16", "fp8ext", "fp8ext_fused", "torch_rowwise"]
    assert res["variant_errors"] == {"torchao": "not requested (--no-torchao)"}
    pre, dec = res["prefill"][0], res["decode"][0]
    assert pre["top1_positions"] == 32 and res["prefill"][1]["top1_positions"] == 32
    assert all(0.5 <= t <= 1.0 for t in pre["top1_agreement"].values())
    assert set(pre["rel_err"]["fp8ext"]) == {"hidden", "logits"}
    assert pre["eager"]["tokens_per_s"]["bf16"] == pytest.approx(32 / 2e-3)
    assert pre["eager"]["speedup"]["vs_bf16"]["fp8ext"] == 2.0
    assert dec["graph"]["tokens_per_s"]["fp8ext"] == pytest.approx(2 / 1e-3), dec
    rows = model_suite.flat_rows([res])
    assert {(r["phase"], r["mode"]) for r in rows} == {("prefill", "eager"), ("decode", "eager"), ("decode", "graph")}
    summary = model_suite.summarize([res])
    assert summary["tiny prefill 1x32 fp8ext/bf16 tok/s"] == 2.0
    assert summary["tiny decode graph b=2 fp8ext/bf16 tok/s"] == 2.0
    assert summary["tiny decode graph b=2 fp8ext_fused/bf16 tok/s"] == 2.0
    assert dec["graph"]["speedup"]["fp8ext_fused_vs_fp8ext"] == 1.0
    assert summary["tiny fp8ext vs torchao (geomean)"] == "not requested (--no-torchao)"
    assert summary["tiny fp8ext vs torch_rowwise (geomean)"] == 2.0
    json.dumps(res)  # the record is JSON-able
    pytest.importorskip("matplotlib")
    assert model_suite.plot(rows, str(tmp_path / "m.png")) and (tmp_path / "m.png").stat().st_size > 0


@needs_cpu_rowwise
def test_tiny_model_compiled_modes(monkeypatch):
    """--compile: prefill under torch.compile and the compiled decode step as a CUDA graph, for the variants asked
    for. Dynamo traces the real models (backend "eager": no code generation on CPU); the clock is scripted."""
    pytest.importorskip("transformers")
    compiled_models = []

    def compile_eager(model):
        compiled_models.append(model)
        return torch.compile(model, backend="eager", dynamic=False, fullgraph=False)

    def fake_clock(fn):
        fn()
        return 1.0

    monkeypatch.setattr(llama_models, "compile_model", compile_eager)
    scripted_forwards(monkeypatch, fake_clock)
    monkeypatch.setattr(llama_models, "cuda_graph", lambda step: step)
    torch._dynamo.reset()
    res = model_suite.compare("tiny", layers=1, vocab=256, device="cpu", prefill_shapes=[(1, 32)],
                              decode_batches=[2], ctx=8, timed=True, compiled=True, iters=2, rounds=1,
                              torchao=False, compile_variants=["bf16", "fp8ext"])
    assert len(compiled_models) == 2
    pre, dec = res["prefill"][0], res["decode"][0]
    assert set(pre["compiled"]["ms"]) == {"bf16", "fp8ext"} and pre["compiled"]["speedup"]["vs_bf16"]["fp8ext"] == 1.0
    assert set(dec["compiled_graph"]["ms"]) == {"bf16", "fp8ext"}, dec["compiled_graph"]
    assert all(isinstance(ms, float) for ms in dec["compiled_graph"]["ms"].values()), dec["compiled_graph"]
    modes = {(r["phase"], r["mode"]) for r in model_suite.flat_rows([res])}
    assert {("prefill", "compiled"), ("decode", "compiled_graph")} <= modes
    summary = model_suite.summarize([res])
    assert summary["tiny decode compiled graph b=2 fp8ext/bf16 tok/s"] == 1.0
    assert summary["tiny prefill compiled 1x32 fp8ext/bf16 tok/s"] == 1.0
    torch._dynamo.reset()


def test_phases_choose_what_compare_runs(monkeypatch):
    """--phases decode runs no prefill shape (each --compile shape costs a compilation); a typo is refused."""
    import argparse

    seen = []
    monkeypatch.setattr(model_suite, "compare", lambda config, *a, **kw: seen.append(kw) or {
        "config": config, "prefill": [], "decode": []})
    args = argparse.Namespace(config="8b", layers=2, vocab=256, ctx=8, compile=False, iters=2, model_rounds=1,
                              no_torchao=True, compile_variants="bf16,fp8ext", no_fused=False, quiet=True,
                              phases="decode", attention="sdpa_packed_gqa")
    model_suite.model(args)
    assert seen[-1]["prefill_shapes"] == () and list(seen[-1]["decode_batches"]) == list(model_suite.DECODE_BATCHES)
    assert seen[-1]["attention"] == "sdpa_packed_gqa"
    args.phases = "prefill, decode"
    model_suite.model(args)
    assert list(seen[-1]["prefill_shapes"]) == list(model_suite.PREFILL) and seen[-1]["decode_batches"]
    args.phases = "decoding"
    with pytest.raises(SystemExit, match="--phases"):
        model_suite.model(args)


def test_compiled_summary_names_each_fp8_variant():
    entry = {"ms": {"bf16": 2.0, "fp8ext": 1.6, "fp8ext_fused": 1.5},
             "speedup": {"vs_bf16": {"fp8ext": 1.25, "fp8ext_fused": 1.333}}}
    res = {"config": "8b", "prefill": [], "decode": [{"batch": 8, "compiled_graph": entry}]}
    summary = model_suite.summarize([res])
    assert summary["8b decode compiled graph b=8 fp8ext/bf16 tok/s"] == 1.25
    assert summary["8b decode compiled graph b=8 fp8ext_fused/bf16 tok/s"] == 1.333


def test_plot_leaves_out_the_panels_not_measured(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [{"config": "8b", "phase": "decode", "shape": f"batch {b}", "mode": mode, "variant": v, "ms": 1.0,
             "tokens_per_s": 10.0 * b, "vs_bf16": 1.0} for b in (1, 8) for mode in ("graph", "compiled_graph")
            for v in ("bf16", "fp8ext_fused")]
    assert model_suite.plot(rows, str(tmp_path / "decode.png")) and (tmp_path / "decode.png").stat().st_size > 0
    assert model_suite.plot([], str(tmp_path / "none.png")) is False and not (tmp_path / "none.png").exists()


def test_model_summary_with_failures():
    results = [{"config": "70b", "error": "failed: OutOfMemoryError: x"},
               {"config": "8b", "variant_errors": {"torchao": "failed: ImportError: no torchao"},
                "prefill": [{"batch": 1, "seq": 2048, "error": "failed: RuntimeError: y"}], "decode": []}]
    s = model_suite.summarize(results)
    assert s["70b"] == "failed: OutOfMemoryError: x"
    assert s["8b prefill 1x2048 fp8ext/bf16 tok/s"] == "failed: RuntimeError: y"
    assert s["8b fp8ext vs torchao (geomean)"] == "failed: ImportError: no torchao"
    assert model_suite.flat_rows(results) == []


def test_torchao_failure_is_recorded_not_raised(monkeypatch):
    pytest.importorskip("transformers")

    def broken(model):
        raise ImportError("No module named 'torchao'")

    monkeypatch.setattr(llama_models, "torchao_variant", broken)
    model = llama_models.build_model("tiny", 1, 256, "cpu")
    models, report, errors = llama_models.variants(model, torchao=True)
    assert list(models) == ["bf16", "fp8ext", "fp8ext_fused", "torch_rowwise"] and report["swapped"] == 7
    assert report["fused_groups"] == 2  # q/k/v and gate/up of the one layer
    assert errors == {"torchao": "failed: ImportError: No module named 'torchao'"}
    models, report, errors = llama_models.variants(model, torchao=False, fused=False)
    assert list(models) == ["bf16", "fp8ext", "torch_rowwise"] and "fused_groups" not in report
    assert errors["fp8ext_fused"] == "not requested (--no-fused)"


def test_packed_gqa_attention_computes_what_sdpa_does_at_decode(monkeypatch):
    """--attention sdpa_packed_gqa: the decode step's logits equal transformers' sdpa's (same weights), and its
    packed path ran: one query token, the query heads viewed as rows of the KV heads (4 heads over 2 KV heads)."""
    pytest.importorskip("transformers")
    from fp8ext.bench.common import rel_err

    packed = []
    real = llama_models.sdpa_packed_gqa

    def spy(module, query, key, *args, **kwargs):
        out = real(module, query, key, *args, **kwargs)
        packed.append((query.shape[2], key.shape[1]))
        return out

    monkeypatch.setattr(llama_models, "sdpa_packed_gqa", spy)
    logits = {}
    with torch.inference_mode():
        for attention in ("sdpa", "sdpa_packed_gqa"):
            model = llama_models.build_model("tiny", 2, 256, "cpu", attention=attention)
            logits[attention] = llama_models.decode_step(model, 3, 16, 256, "cpu")().float()
    assert (1, 2) in packed  # the decode step: one query token, 2 KV heads
    assert rel_err(logits["sdpa_packed_gqa"], logits["sdpa"]) < 1e-2
    with pytest.raises(ValueError, match="attention: expected one of"):
        llama_models.build_model("tiny", 1, 256, "cpu", attention="flash")


def test_linears_omitted_replaces_only_the_fp8_layers_and_copies_no_weight():
    from fp8ext.nn import Float8Linear, convert

    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16),
                                torch.nn.Linear(16, 8))  # the last one is left in float (8 is not a multiple of 16)
    fp8ext_report = convert(model)
    assert len(fp8ext_report.swapped) == 2
    before = {n: p.clone() for n, p in model.state_dict().items()}
    free = llama_models.linears_omitted(model)
    assert [type(m).__name__ for m in free] == ["_Omitted", "ReLU", "_Omitted", "Linear"]
    assert all(isinstance(model[i], Float8Linear) for i in (0, 2))  # the original is untouched
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())
    assert not any(t.dtype == torch.float8_e4m3fn for t in free.state_dict().values())
    assert free(torch.randn(5, 3, 32)).shape == (5, 3, 8)
    assert free[3].weight.data_ptr() != model[3].weight.data_ptr()  # the rest is a real copy


@needs_cpu_rowwise
def test_tiny_comparison_on_cpu():
    # The comparison untimed, on CPU (the ops' CPU paths stand in for the kernels): every FP8 variant close to bf16.
    pytest.importorskip("transformers")
    result = model_suite.compare("tiny", layers=2, vocab=256, device="cpu", prefill_shapes=[(2, 16)],
                                 decode_batches=[2], ctx=8, timed=False, torchao=False)
    # 2 layers x (q, k, v, o, gate, up, down); lm_head stays bf16.
    assert result["convert"]["swapped"] == 14 and result["convert"]["skipped"] == [["lm_head",
                                                                                   "lm_head (skip_lm_head=True)"]]
    (pre,), (dec,) = result["prefill"], result["decode"]
    assert set(pre["rel_err"]) == set(dec["rel_err"]) == {"fp8ext", "fp8ext_fused", "torch_rowwise"}
    assert result["convert"]["fused_groups"] == 4  # q/k/v and gate/up of each layer
    for errs in (*pre["rel_err"].values(), *dec["rel_err"].values()):
        assert all(0 < e < 0.2 for e in errs.values()), errs
    # The peer and the fused siblings use the same FP8 weights and the same activation formula: the FP8 variants
    # agree closely.
    for other in ("torch_rowwise", "fp8ext_fused"):
        assert abs(pre["rel_err"]["fp8ext"]["hidden"] - pre["rel_err"][other]["hidden"]) < 0.02, other


@needs_cpu_rowwise
def test_torch_rowwise_peer_matches_float8linear():
    from fp8ext.bench.common import TorchRowwiseLinear
    from fp8ext.nn import Float8Linear

    f8 = Float8Linear.from_linear(torch.nn.Linear(64, 32, dtype=torch.bfloat16))
    x = torch.randn(3, 5, 64).bfloat16()
    with torch.inference_mode():
        torch.testing.assert_close(TorchRowwiseLinear(f8)(x), f8(x), rtol=1e-2, atol=1e-2)


def test_decode_step_repeats():
    # Timing and CUDA graphs call the step again and again: it must write the same cache slot every time.
    pytest.importorskip("transformers")
    model = llama_models.build_model("tiny", 1, 256, "cpu")
    with torch.inference_mode():
        step = llama_models.decode_step(model, 2, 8, 256, "cpu")
        first = step().clone()
        for _ in range(3):
            torch.testing.assert_close(step(), first, rtol=0, atol=0)


def test_model_summary_reports_the_decode_ceiling():
    graph = model_suite.timing_entry({"bf16": 10.0, "fp8ext": 8.0, model_suite.CEILING: 6.0}, 1)
    results = [{"config": "8b", "prefill": [], "decode": [{"batch": 1, "graph": graph}]}]
    s = model_suite.summarize(results)
    assert s["8b decode graph b=1 fp8ext/bf16 tok/s"] == 1.25
    assert s["8b decode graph b=1 ceiling (linears_omitted)/bf16 tok/s"] == pytest.approx(10 / 6, abs=1e-3)


# ---- quantize -------------------------------------------------------------------------------------------------

def test_bandwidth_arithmetic():
    assert quantize_suite.bytes_moved(8192, 8192, torch.bfloat16) == 8192 * 8192 * 3 + 8192 * 4
    assert quantize_suite.bytes_moved(4, 16, torch.float32) == 4 * 16 * 5 + 16
    row = quantize_suite.bandwidth_row(8192, 8192, torch.bfloat16,
                                       {"fp8ext_us": 100.0, "copy_us": 90.0, "torch_us": "failed: E"})
    assert row["fraction_of_copy"] == pytest.approx(0.9)
    assert row["fp8ext_gbps"] == pytest.approx(row["bytes_moved"] / 100e-6 / 1e9) and row["torch_gbps"] is None


def test_quantize_summary():
    rows = [quantize_suite.bandwidth_row(8192, 8192, torch.bfloat16, {"fp8ext_us": 100.0, "copy_us": 90.0}),
            quantize_suite.bandwidth_row(16384, 8192, torch.bfloat16, {"fp8ext_us": 100.0, "copy_us": 80.0}),
            quantize_suite.bandwidth_row(8192, 8192, torch.float32, {"fp8ext_us": 100.0, "copy_us": 50.0}),
            quantize_suite.small_m_row(1, 4096, {"empty_us": 5.0, "fp8ext_us": 5.5, "torch_us": 20.0,
                                                 "copy_us": 6.25}),
            quantize_suite.small_m_row(16, 8192, {"empty_us": 5.0, "fp8ext_us": 5.0, "torch_us": 20.0})]
    assert rows[3]["ratio_to_empty"] == pytest.approx(1.1) and rows[3]["torch_ratio_to_empty"] == 4.0
    s = quantize_suite.summarize(rows)
    assert s["bf16 min fraction of copy"] == pytest.approx(0.8)  # the fp32 row is information only
    assert s["bandwidth acceptance (>= 0.85)"] is False
    assert s["small M max ratio to empty"] == pytest.approx(1.1) and s["small M worst (M, K)"] == "1x4096"
    assert s["small M acceptance (<= 1.2)"] is True
    assert s["small M copy of the same bytes: min ratio to empty"] == pytest.approx(1.25)
    assert s["small M max ratio to the copy"] == pytest.approx(0.88)
    rows[4] = quantize_suite.small_m_row(16, 8192, {"empty_us": 5.0, "fp8ext_us": "failed: E"})
    assert quantize_suite.summarize(rows)["small M acceptance (<= 1.2)"] == "incomplete"


def test_quantize_blockwise_part_arithmetic():
    # One scale per 1 x 128 group: 7168 / 128 = 56 of them a row.
    assert quantize_suite.bytes_moved(16, 7168, torch.bfloat16, 56) == 16 * 7168 * 3 + 16 * 56 * 4
    rows = [{"part": "blockwise", "M": 16, "K": 7168, "speedup_over_composed": 6.0, "fraction_of_copy": 0.5}]
    s = quantize_suite.summarize_blockwise(rows)
    assert s == {"blockwise 16x7168: fused / torch ops speed-up, fraction of copy": [6.0, 0.5]}


# ---- linear ---------------------------------------------------------------------------------------------------

def test_linear_rows_and_summary():
    rows = []
    for model in ("8b", "70b"):
        for M in linear_suite.MS:
            fp8 = 10.0 if M >= 2048 else 5.0
            rows.append(linear_suite.row_of(model, "o", 4096, 4096, M,
                                            {"bf16_us": 14.0 if M >= 2048 else 9.0, "fp8ext_us": fp8,
                                             "torch_rowwise_us": 11.0}))
    rows[-1] = linear_suite.row_of("70b", "down", 28672, 8192, 8192, {"bf16_us": 1.0, "fp8ext_us": "failed: E"})
    s = linear_suite.summarize(rows)
    assert s["8b M>=2048 geomean bf16/fp8ext"] == 1.4 and s["8b M>=2048 acceptance (>= 1.3)"] is True
    assert s["70b M<=16 geomean bf16/fp8ext"] == 1.8 and s["70b M<=16 acceptance (>= 1.6)"] is True
    assert s["70b M>=2048 acceptance (>= 1.3)"] == "incomplete" and s["failed rows"] == 1
    assert "8b M<=16 acceptance (>= 1.6)" not in s
    assert len(s["worst bf16/fp8ext"]) == 3 and s["worst bf16/fp8ext"][0] == "8b o M=2048: 1.400"


# ---- decode-chain ---------------------------------------------------------------------------------------------

def test_decode_chain_default_shapes_are_the_unfused_llama_layers():
    nk = list(dict.fromkeys((n, k) for _, n, k in chain_suite.DEFAULT_SHAPES))
    assert nk == [(14336, 4096), (4096, 14336), (4096, 4096), (1024, 4096),
                  (28672, 8192), (8192, 28672), (8192, 8192), (1024, 8192)]
    assert {m for m, _, _ in chain_suite.DEFAULT_SHAPES} == {1, 8}


def test_decode_chain_rows_and_summary():
    rows = [chain_suite.row_of(1, 4096, 4096, "a", {"a": 10.0, "b": 8.0, "c": "failed: E"}),
            chain_suite.row_of(8, 4096, 4096, "b", {"a": 10.0, "b": 10.2}),
            chain_suite.row_of(1, 1024, 4096, "torch._scaled_mm", {"a": 5.0})]
    assert rows[0]["best"] == "b" and rows[0]["pick_over_best"] == 1.25
    assert rows[1]["best"] == "a" and rows[1]["pick_over_best"] == pytest.approx(1.02)
    assert rows[2]["pick_over_best"] is None
    s = chain_suite.summarize(rows)
    assert s["geomean pick / fastest"] == pytest.approx((1.25 * 1.02) ** 0.5, abs=1e-3)
    assert s["picks within 4% of the fastest"] == 1 and s["pick not timed (backstop or failure)"] == 1
    assert s["worst picks"][0] == "1x4096x4096 a: 1.250 (b)"


def test_moe_summary_divides_measured_times_only():
    res = {"variants": ["bf16", "fp8ext", "fp8ext_loop", "fp8ext_fused"],
           "prefill": [{"batch": 1, "seq": 8, "top1_agreement": {"fp8ext": 0.9},
                        "eager": {"ms": {"bf16": 2.0, "fp8ext": 1.0, "fp8ext_loop": "failed: RuntimeError: x",
                                         "fp8ext_fused": 0.8}}}],
           "decode": [{"batch": b, "graph": {"ms": {"bf16": 3.0 * b, "fp8ext": 2.0, "fp8ext_fused": "failed: x"}},
                       "eager": {"ms": {"fp8ext_loop": 4.0, "fp8ext": 1.0}}} for b in (1, 4)]}
    s = moe_suite.summarize(res)
    assert s["prefill 1x8 fp8ext_fused/bf16 tok/s"] == 2.5
    assert s["decode graph b=1 fp8ext_fused/bf16 tok/s"] == "not measured"
    assert "decode graph fp8ext_fused/bf16, geomean over batches" not in s
    assert s["prefill 1x8 fp8ext/bf16 tok/s"] == 2.0
    assert s["prefill 1x8 fp8ext/fp8ext_loop"] == "not measured"
    assert s["prefill 1x8 top-1 agreement fp8ext"] == 0.9
    assert (s["decode graph b=1 fp8ext/bf16 tok/s"], s["decode graph b=4 fp8ext/bf16 tok/s"]) == (1.5, 6.0)
    assert s["decode eager b=4 fp8ext/fp8ext_loop"] == 4.0
    assert s["decode graph fp8ext/bf16, geomean over batches"] == 3.0
