"""fp8ext.compile: which of its kernels it offers Inductor for an aten._scaled_mm call and where it offers none, the
switch itself (on, off, a block, a factory set before it, the cache key, a torch without the hook), and the
quantize decomposition: the traced graph before and after, and compiled bits equal to the eager op's (Inductor's CPU
backend here; the GPU tests in test_compile_gpu.py)."""
import pickle

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._inductor import decomposition
from torch.fx.experimental.proxy_tensor import make_fx

import fp8ext
from fp8ext.compile import choices, decompositions

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
CUDA = torch.device("cuda")
needs_kernel_queries = pytest.mark.skipif(not fp8ext.kernel_names(), reason="the choices ask a CUDA build's cost model")


def operand(sizes, strides=None, dtype=E4M3, device=CUDA, offset=0):
    if strides is None:
        strides = torch.empty(sizes, device="meta").stride()
    return (list(sizes), list(strides), offset, dtype, device)


def rowwise(M=16, N=4096, K=4096, a_dtype=E4M3, b_dtype=E4M3, device=CUDA):
    """(a, b, scale_a, scale_b) of a row-wise call as offered_kernels takes them: b column-major (w.t())."""
    return (operand((M, K), dtype=a_dtype, device=device), operand((K, N), (1, K), b_dtype, device),
            operand((M, 1), dtype=torch.float32, device=device), operand((1, N), dtype=torch.float32, device=device))


@needs_kernel_queries
@pytest.mark.parametrize("M", [1, 16, 100])
def test_a_static_rowwise_call_is_offered_the_cost_model_s_best_kernels(M):
    offered = choices.offered_kernels(*rowwise(M), None, torch.bfloat16, True, static=True)
    ranking = fp8ext.selected_kernel(M, 4096, 4096, explain=True)["ranking"]
    assert offered == [r["kernel"] for r in ranking[:choices.TOP_KERNELS]] and offered
    precise = choices.offered_kernels(*rowwise(M), None, torch.float16, False, static=True)
    assert precise and all(fp8ext.kernel_traits(n)["accum"] == "precise" and fp8ext.kernel_traits(n)["out"] == "fp16"
               for n in precise)


@needs_kernel_queries
def test_a_bias_and_a_large_m_are_offered_too():
    # Inductor times the offers against cuBLASLt: fp8ext offers even where its cost model predicts torch faster.
    a, b, sa, sb = rowwise(8192, 8192, 8192)
    assert len(choices.offered_kernels(a, b, sa, sb, operand((8192,), dtype=torch.bfloat16), torch.bfloat16, True,
                                       static=True)) == choices.TOP_KERNELS


@needs_kernel_queries
def test_a_dynamic_shape_is_offered_fp8ext_s_routing():
    assert choices.offered_kernels(*rowwise(37), None, torch.bfloat16, True, static=False) == [""]


@needs_kernel_queries
def test_a_blockwise_call_is_offered_the_blockwise_dispatch_s_kernel():
    M, N, K = 8, 2048, 1536
    G, H = K // 128, N // 128
    a, b = operand((M, K)), operand((K, N), (1, K))
    sa, sb = operand((M, G), (1, M), torch.float32), operand((G, H), (1, G), torch.float32)
    assert choices.offered_kernels(a, b, sa, sb, None, torch.bfloat16, False, static=True) == [
        fp8ext.selected_blockwise_kernel(M, N, K, torch_ok=False)]


@needs_kernel_queries
@pytest.mark.parametrize("case", ["tensor-wise", "e5m2 x e5m2", "K not a multiple of 16", "fp8 output",
                                  "scale_b of another shape", "b row-major", "misaligned a", "on the CPU",
                                  "empty M"])
def test_calls_fp8ext_does_not_compute_are_offered_nothing(case):
    a, b, sa, sb = rowwise()
    out_dtype = torch.bfloat16
    if case == "tensor-wise":
        sa, sb = operand((), dtype=torch.float32), operand((), dtype=torch.float32)
    elif case == "e5m2 x e5m2":
        a, b, sa, sb = rowwise(a_dtype=E5M2, b_dtype=E5M2)
    elif case == "K not a multiple of 16":
        a, b, sa, sb = rowwise(K=40)
    elif case == "fp8 output":
        out_dtype = E4M3
    elif case == "scale_b of another shape":
        sb = operand((4096, 1), dtype=torch.float32)
    elif case == "b row-major":
        b = operand((4096, 4096))
    elif case == "misaligned a":
        a = operand((16, 4096), offset=8)
    elif case == "on the CPU":
        a, b, sa, sb = rowwise(device=torch.device("cpu"))
    else:
        a, b, sa, sb = rowwise(M=0)
    assert choices.offered_kernels(a, b, sa, sb, None, out_dtype, True, static=True) == []


@pytest.fixture
def restore_inductor():
    before = inductor_config.inductor_choices_class
    yield
    fp8ext.compile.disable()
    inductor_config.inductor_choices_class = before


class UserChoices:
    """A user's choices factory, made from a class so that it pickles."""

    def __call__(self):
        from torch._inductor.choices import InductorChoices
        handler = InductorChoices()
        handler.uuid = lambda: "user-choices-1"
        return handler


def test_the_switch_sets_and_restores_the_choices_factory_and_the_decompositions(restore_inductor):
    assert not fp8ext.compile.is_enabled()
    user = UserChoices()
    inductor_config.inductor_choices_class = user
    table = decompositions.table()
    with fp8ext.compile.enabled():
        factory = inductor_config.inductor_choices_class
        assert fp8ext.compile.is_enabled() and factory.previous is user
        handler = factory()
        assert handler.uuid() == f"{choices.own_key()}+user-choices-1"  # the user's key is kept in the key
        assert pickle.loads(pickle.dumps(factory)).key == factory.key  # the FX graph cache pickles it
        assert all(decomposition.select_decomp_table()[op] is fn for op, fn in table.items())
        from torch._inductor.select_algorithm import extern_kernels
        assert hasattr(extern_kernels, choices.EXTERN_NAME)  # what a graph loaded from the cache calls
        fp8ext.compile.enable()  # idempotent
        assert inductor_config.inductor_choices_class is factory
    assert inductor_config.inductor_choices_class is user and not fp8ext.compile.is_enabled()
    assert not any(op in decomposition.select_decomp_table() for op in table)
    fp8ext.compile.disable()  # a second disable changes nothing
    assert inductor_config.inductor_choices_class is user


def test_the_switch_belongs_to_the_thread_that_turned_it_on(restore_inductor):
    """torch 2.14 keeps Inductor's settings per thread, the decomposition table is process-wide: another thread
    turning the switch on or off while it is on would half-apply it, so it raises; the owner turns it off."""
    import threading
    errors, seen_on = [], []

    def other_thread():
        seen_on.append(fp8ext.compile.is_enabled())  # True where torch's settings are process-wide (2.11)
        for what in (fp8ext.compile.enable, fp8ext.compile.disable):
            try:
                what()
            except RuntimeError as e:
                errors.append(str(e))

    fp8ext.compile.enable()
    try:
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    finally:
        fp8ext.compile.disable()
    assert not fp8ext.compile.is_enabled() and not any(op in decomposition.select_decomp_table()
                                                       for op in decompositions.table())
    # enable() there is idempotent where the thread sees the switch on; disable() there always raises
    want = ["fp8ext.compile.disable"] if seen_on[0] else ["fp8ext.compile.enable", "fp8ext.compile.disable"]
    assert [e.split(":")[0] for e in errors] == want
    assert all("the switch is on in another thread" in e for e in errors)


def test_the_handler_adds_offers_to_scaled_mm_alone(restore_inductor, monkeypatch):
    calls = []
    monkeypatch.setattr(choices, "scaled_mm_choices", lambda *args: calls.append(args) or ["fp8ext-choice"])
    with fp8ext.compile.enabled():
        handler = inductor_config.inductor_choices_class()
        monkeypatch.setattr(type(handler), "get_template_configs", lambda self, *a, **k: ["inductor-choice"])
        handler = inductor_config.inductor_choices_class()
        assert handler.get_template_configs("inputs", [], "scaled_mm", {}) == ["inductor-choice", "fp8ext-choice"]
        assert handler.get_template_configs("inputs", [], "mm", {}) == ["inductor-choice"]
    assert len(calls) == 1


def test_a_torch_without_the_hook_gets_one_clear_error(monkeypatch):
    from torch._inductor.choices import InductorChoices
    monkeypatch.delattr(InductorChoices, "get_template_configs")
    with pytest.raises(RuntimeError, match="fp8ext.compile needs InductorChoices.get_template_configs"):
        fp8ext.compile.enable()
    assert not fp8ext.compile.is_enabled()


def layer(K=64, N=32):
    linear = torch.nn.Linear(K, N, bias=True, dtype=torch.bfloat16)
    return fp8ext.Float8Linear.from_linear(linear)


def call_targets(fn, *args):
    graph = make_fx(fn, decomposition_table=decomposition.select_decomp_table())(*args).graph
    return [n.target for n in graph.nodes if n.op == "call_function"]


def test_the_traced_graph_before_and_after_the_switch(restore_inductor):
    f8 = layer()
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        assert call_targets(f8, x) == [torch.ops.fp8ext.linear.default]
        with fp8ext.compile.enabled():
            after = call_targets(f8, x)
    ops = {str(t) for t in after}
    # The quantize in torch ops (Inductor fuses them into the producer), then the GEMM; the checks ran while
    # tracing and are not in the graph.
    assert torch.ops.fp8ext.linear.default not in after and torch.ops.aten.amax.default in after
    assert torch.ops.fp8ext.scaled_mm.default in after and not any("_check_" in op for op in ops)


def nasty_rows(dtype, K=256):
    """Rows for the quantize: random, one all zero, one with a NaN, one huge, one tiny."""
    x = torch.randn(6, K) * 3
    x[1] = 0
    x[2, 7] = float("nan")
    x[3] *= 1e4 if dtype != torch.float16 else 10
    x[4] *= 1e-6
    return x.to(dtype)


def same_bits(a, b):
    """Every value's bits equal, NaN where the other has NaN (of either sign: the NaN row's sign bit is not part of
    the op's contract)."""
    nan = a.float().isnan()
    if not torch.equal(nan, b.float().isnan()):
        return False
    bits = (lambda t: t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32))
    return torch.equal(bits(a)[~nan], bits(b)[~nan])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_compiled_quantize_equals_the_eager_op_bit_for_bit(restore_inductor, dtype):
    x = nasty_rows(dtype)
    torch._dynamo.reset()
    with fp8ext.compile.enabled(), torch.no_grad():
        compiled = torch.compile(lambda x: (torch.ops.fp8ext.quantize_rowwise(x, E4M3, None),
                                            torch.ops.fp8ext.quantize_rowwise(x, E5M2, 2.5)), fullgraph=True)
        got = compiled(x)
    want = (torch.ops.fp8ext.quantize_rowwise(x, E4M3, None), torch.ops.fp8ext.quantize_rowwise(x, E5M2, 2.5))
    for (q, s), (q_ref, s_ref) in zip(got, want):
        assert same_bits(q, q_ref) and same_bits(s, s_ref)


def test_a_compiled_float8_linear_equals_the_eager_layer(restore_inductor):
    f8 = layer()
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with fp8ext.compile.enabled(), torch.no_grad():
        out = torch.compile(f8, fullgraph=True)(x)
    with torch.no_grad():
        assert torch.equal(out, f8(x))


def test_chosen_reads_the_generated_code():
    code = ("buf0 = extern_kernels.fp8ext_scaled_mm_with_kernel(arg0_1, arg1_1, arg2_1, arg3_1, bias=None, "
            "out_dtype=torch.bfloat16, use_fast_accum=True, kernel='pp_64x128x128_c1x1_ov_fast_bf16@H1')\n"
            "buf1 = extern_kernels.fp8ext_scaled_mm_with_kernel(a, b, c, d, bias=None, out_dtype=torch.bfloat16, "
            "use_fast_accum=True, kernel='')\n"
            "extern_kernels._scaled_mm(arg0_1, arg1_1, arg2_1, arg3_1, out_dtype=torch.bfloat16)\n"
            "triton_tem_fused__scaled_mm_0.run(arg0_1, arg1_1, buf2, stream=stream0)\n")
    assert fp8ext.compile.chosen([code]) == ["pp_64x128x128_c1x1_ov_fast_bf16@H1", "fp8ext", "aten",
                                             "triton_tem_fused__scaled_mm_0"]


class NormThenLinear(torch.nn.Module):
    """An RMSNorm feeding a Float8Linear, as in a decoder layer."""

    def __init__(self, K=64, N=32):
        super().__init__()
        self.norm = torch.nn.RMSNorm(K, dtype=torch.bfloat16)
        self.proj = layer(K, N)

    def forward(self, x):
        return self.proj(self.norm(x))


def mismatch(module, x, out, want, switch):
    """What a failed bit-for-bit comparison of a compiled NormThenLinear needs to be traced: the first differing
    element, and whether the compiled norm alone already differs from the eager norm (Inductor's reduction, not
    fp8ext's quantize)."""
    where = tuple((out != want).nonzero()[0].tolist())
    with inductor_config.patch(emulate_precision_casts=True):
        norm_differs = not torch.equal(torch.compile(module.norm)(x), module.norm(x))
    return (f"switch={switch}: {int((out != want).sum())} of {out.numel()} differ, first at {where}: compiled "
            f"{out[where].item()!r}, eager {want[where].item()!r}; the compiled norm alone differs: {norm_differs}; "
            f"x={x.tolist()}")


def test_the_switch_takes_the_quantize_out_of_the_linear_op_and_into_inductor_s_kernels(restore_inductor):
    import re
    from torch._inductor.utils import run_and_get_code
    module, x = NormThenLinear(), torch.randn(4, 64, dtype=torch.bfloat16)
    calls = {}
    with torch.no_grad():
        for switch in (False, True):
            torch._dynamo.reset()
            # Inductor rounds the norm's output to bf16 before the fused quantize only when asked to: then the compiled
            # layer equals the eager one bit for bit.
            with fp8ext.compile.enabled() if switch else torch.no_grad(), \
                    inductor_config.patch(emulate_precision_casts=True):
                out, code = run_and_get_code(torch.compile(module, fullgraph=True), x)
            text = "\n".join(code)
            calls[switch] = {op: len(re.findall(rf"= torch\.ops\.fp8ext\.{op}\.default\(", text))
                             for op in ("linear", "quantize_rowwise", "scaled_mm")}
            want = module(x)
            assert torch.equal(out, want), mismatch(module, x, out, want, switch)
    assert calls[False] == {"linear": 1, "quantize_rowwise": 0, "scaled_mm": 0}
    assert calls[True] == {"linear": 0, "quantize_rowwise": 0, "scaled_mm": 1}


def test_the_compile_suite_keeps_both_compiled_graphs(restore_inductor, monkeypatch):
    """The suite's compile with the switch and the one without each keep their own graph: Dynamo keeps graphs per
    code object, and a reset between the two (run_and_get_code does one) would leave the first wrapper to compile
    again, switch off, when it is timed."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from fp8ext.bench.suites import compile_switch
    monkeypatch.setattr(compile_switch, "MODE", "default")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    a, b, sa, sb = fp8ext.testing.random_operands(16, 64, 64)
    torch._dynamo.reset()
    with_switch, _, _ = compile_switch.compiled(a, b.t(), sa, sb, switch=True)
    without, _, _ = compile_switch.compiled(a, b.t(), sa, sb, switch=False)
    codes = [fn._torchdynamo_orig_callable.__code__ for fn in (with_switch, without)]
    assert codes[0] is not codes[1]
    assert [len(_debug_get_cache_entry_list(code)) for code in codes] == [1, 1]


def test_fp8ext_s_candidates_are_timed_under_a_key_that_holds_fp8ext_s_own(restore_inductor):
    """Inductor's autotune cache files each candidate's time under its hash_key: fp8ext's key (version, package
    source) is in it, so that another fp8ext's kernels of the same names are timed afresh."""
    fp8ext.compile.enable()
    assert choices.own_key() in choices._extern_choice().hash_key()


def test_the_model_section_gives_torchao_s_inductor_options_to_its_runs_alone(monkeypatch):
    """torchao's quantize_ sets Inductor options for the whole process (coordinate-descent tuning among them); the
    compile suite takes them back so that the bf16 and fp8ext runs compile under Inductor's defaults."""
    from fp8ext.bench import compile_models, llama_models

    def quantize(model):
        inductor_config.coordinate_descent_tuning = True  # what torchao's recommended_inductor_config_setter does
        return "quantized"

    monkeypatch.setattr(llama_models, "torchao_variant", quantize)
    was = inductor_config.coordinate_descent_tuning
    model, changed = compile_models._torchao_model(None, inductor_config)
    assert model == "quantized"
    assert inductor_config.coordinate_descent_tuning == was
    assert changed == ({} if was else {"coordinate_descent_tuning": True})


def test_each_model_compile_starts_from_empty_caches(tmp_path, monkeypatch):
    import os
    from fp8ext.bench import compile_models
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    seen = []
    for _ in range(2):
        with compile_models._cold_caches():
            seen.append(os.environ["TORCHINDUCTOR_CACHE_DIR"])
            assert os.listdir(seen[-1]) == []
    assert len({str(tmp_path), *seen}) == 3
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path)
