"""fp8ext.compile: the post-grad pass that rewrites aten._scaled_mm into fp8ext.scaled_mm, on graphs built here (no
GPU): which nodes it takes and which it leaves to Inductor, that a rewritten graph computes eager fp8ext's result,
and the switch itself (on, off, a block, a user's pass kept, the cache key)."""
import pytest
import torch
import torch._inductor.config as inductor_config
from torch._subclasses.fake_tensor import FakeTensorMode

import fp8ext
from fp8ext.compile import rewrite_scaled_mm
from fp8ext.testing import (random_blockwise_operands, random_fp8, random_operands, random_scales,
                            torch_cpu_takes_rowwise_scales)

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
needs_kernel_queries = pytest.mark.skipif(not fp8ext.kernel_names(), reason="the decision asks a CUDA build's cost model")
SCALED_MM = torch.ops.aten._scaled_mm.default


def graph_of(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, scale_result=None, use_fast_accum=True):
    """A post-grad-like graph of one aten._scaled_mm call: placeholders and the node carry fake values, as Inductor's
    do, and the output's value is what torch._scaled_mm would return (its shape, the given dtype)."""
    graph = torch.fx.Graph()
    mode = FakeTensorMode()
    inputs = {}
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias),
                    ("scale_result", scale_result)):
        if t is not None:
            node = graph.placeholder(name)
            node.meta["val"] = mode.from_tensor(t)
            inputs[name] = node
    node = graph.call_function(SCALED_MM, (inputs["a"], inputs["b"], inputs["scale_a"], inputs["scale_b"]),
                               {"bias": inputs.get("bias"), "scale_result": inputs.get("scale_result"),
                                "out_dtype": out_dtype, "use_fast_accum": use_fast_accum})
    with mode:
        node.meta["val"] = torch.empty(a.shape[0], b.shape[1], dtype=out_dtype or a.dtype)
    graph.output(node)
    return graph, [t for t in (a, b, scale_a, scale_b, bias, scale_result) if t is not None]


def targets(graph):
    return [n.target for n in graph.nodes if n.op == "call_function"]


@needs_kernel_queries
@pytest.mark.parametrize("M", [1, 16, 100])
def test_rowwise_call_fp8ext_runs_is_rewritten_and_computes_eager_fp8ext(M):
    N, K = 4096, 4096
    assert fp8ext.selected_kernel(M, N, K) != "torch._scaled_mm"  # decode sizes: fp8ext's kernels (an H200's pick)
    a, b, sa, sb = random_operands(M, N, K)
    bias = torch.randn(N).bfloat16()
    graph, args = graph_of(a, b, sa, sb, bias=bias)
    assert rewrite_scaled_mm(graph) == 1
    assert targets(graph) == [torch.ops.fp8ext.scaled_mm.default]
    out = torch.fx.GraphModule(torch.nn.Module(), graph)(*args)
    assert torch.equal(out, fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True))


@needs_kernel_queries
def test_blockwise_call_fp8ext_runs_is_rewritten():
    M, N, K = 8, 2048, 1536
    assert fp8ext.selected_blockwise_kernel(M, N, K) != "torch._scaled_mm"
    a, b, sa, sb = random_blockwise_operands(M, N, K)
    graph, args = graph_of(a, b, sa, sb, use_fast_accum=False)
    assert rewrite_scaled_mm(graph) == 1
    out = torch.fx.GraphModule(torch.nn.Module(), graph)(*args)
    assert torch.equal(out, fp8ext.scaled_mm(a, b, sa, sb))


@needs_kernel_queries
def test_a_call_the_cost_model_gives_to_torch_stays_aten():
    # Large M on a weight where cuBLASLt is predicted faster: the node stays for Inductor to lower (and, under
    # max-autotune, to weigh against its Triton templates).
    shape = next(((M, N, K) for M in (4096, 8192, 16384) for N, K in ((4096, 4096), (28672, 4096), (8192, 8192))
                  if fp8ext.selected_kernel(M, N, K) == "torch._scaled_mm"), None)
    if shape is None:
        pytest.skip("the cost model gives none of these large shapes to torch")
    a, b, sa, sb = random_operands(*shape)
    graph, _ = graph_of(a, b, sa, sb)
    assert rewrite_scaled_mm(graph) == 0 and targets(graph) == [SCALED_MM]


def _rowwise(M=16, N=256, K=256, a_dtype=E4M3, b_dtype=E4M3):
    a = random_fp8(M, K, a_dtype)
    b = random_fp8(N, K, b_dtype).t()
    return a, b, random_scales(M, shape=(M, 1)), random_scales(N, shape=(1, N))


@pytest.mark.parametrize("case", ["tensor-wise", "e5m2 x e5m2", "K not a multiple of 16", "fp8 output",
                                  "scale_result", "scale_b of another shape"])
def test_calls_fp8ext_does_not_take_stay_aten(case):
    a, b, sa, sb = _rowwise()
    kwargs = {}
    if case == "tensor-wise":
        sa, sb = random_scales(1, shape=()), random_scales(1, shape=())
    elif case == "e5m2 x e5m2":
        a, b, sa, sb = _rowwise(a_dtype=E5M2, b_dtype=E5M2)
    elif case == "K not a multiple of 16":
        a, b, sa, sb = _rowwise(K=40)
    elif case == "fp8 output":
        kwargs["out_dtype"] = None  # torch._scaled_mm then returns a's dtype, which fp8ext does not write
    elif case == "scale_result":
        kwargs["scale_result"] = random_scales(1, shape=())
    else:
        sb = random_scales(256, shape=(256, 1))
    graph, _ = graph_of(a, b, sa, sb, **kwargs)
    assert rewrite_scaled_mm(graph) == 0 and targets(graph) == [SCALED_MM]


def test_the_switch_sets_and_restores_inductor_s_post_grad_pass():
    assert not fp8ext.compile.is_enabled()
    before = inductor_config.post_grad_custom_post_pass
    try:
        seen = []

        from torch._inductor.custom_graph_pass import CustomGraphPass

        class UserPass(CustomGraphPass):
            def __call__(self, graph):
                seen.append(graph)

            def uuid(self):
                return "user-pass-1"

        user = UserPass()
        inductor_config.post_grad_custom_post_pass = user
        with fp8ext.compile.enabled():
            installed = inductor_config.post_grad_custom_post_pass
            assert fp8ext.compile.is_enabled() and installed is not user
            graph, _ = graph_of(*_rowwise(), out_dtype=None)
            installed(graph)
            assert seen == [graph]  # the user's pass still runs, first
            key = installed.uuid()
            assert key and key == fp8ext.compile._make_pass(user).uuid() and "user-pass-1" in key
            assert fp8ext.compile._make_pass(None).uuid() != key  # a different chain is a different graph
        assert inductor_config.post_grad_custom_post_pass is user and not fp8ext.compile.is_enabled()
        fp8ext.compile.enable()
        fp8ext.compile.enable()  # idempotent
        fp8ext.compile.disable()
        assert inductor_config.post_grad_custom_post_pass is user
    finally:
        fp8ext.compile.disable()
        inductor_config.post_grad_custom_post_pass = before


def test_a_torch_without_custom_passes_gets_one_clear_error(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_custom_graph_pass(name, *args, **kwargs):
        if name == "torch._inductor.custom_graph_pass":
            raise ImportError("No module named 'torch._inductor.custom_graph_pass'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_custom_graph_pass)
    with pytest.raises(RuntimeError, match="fp8ext.compile needs torch._inductor.custom_graph_pass.CustomGraphPass"):
        fp8ext.compile.enable()
    assert not fp8ext.compile.is_enabled()


@needs_kernel_queries
def test_a_compiled_function_runs_fp8ext_and_equals_eager_fp8ext():
    # End to end through Inductor (on the CPU here: the rewritten node falls back to fp8ext's CPU implementation):
    # the weight is transposed inside the graph, as a model does, and a dynamic M goes through fp8ext too.
    from torch._inductor.utils import run_and_get_code

    def f(a, w, scale_a, scale_b):
        return torch._scaled_mm(a, w.t(), scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=True)

    a, b, sa, sb = random_operands(16, 1024, 1024)
    w = b.t()
    torch._dynamo.reset()
    with fp8ext.compile.enabled():
        out, code = run_and_get_code(torch.compile(f), a, w, sa, sb)
        assert any("fp8ext.scaled_mm" in c for c in code)
        assert torch.equal(out, fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True))
        torch._dynamo.reset()
        dynamic = torch.compile(f, dynamic=True)
        for M in (3, 40):
            a, _, sa, _ = random_operands(M, 1024, 1024)
            assert torch.equal(dynamic(a, w, sa, sb),
                               fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True))
    torch._dynamo.reset()
    if torch_cpu_takes_rowwise_scales():  # switched off it is torch's _scaled_mm again, where the CPU has it
        _, code = run_and_get_code(torch.compile(f), a, w, sa, sb)
        assert not any("fp8ext.scaled_mm" in c for c in code)
