"""The eager shortcuts of fp8ext.scaled_mm (python/fp8ext/_eager_route.py), to torch's row-wise path and to fp8ext's
kernel: which calls take them, that the route is the dispatch's own answer asked once per shape, that whatever
changes the dispatch turns them off, and on the GPU that their results are the op's, bit for bit, in eager code and
in a CUDA graph."""
import pytest
import torch

import fp8ext
from fp8ext import _eager_route
from fp8ext.testing import random_operands

E4M3, E5M2, BF16 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16
needs_kernels = pytest.mark.skipif(not fp8ext.kernel_names(), reason="force_kernel and autotune need a CUDA build")


@pytest.fixture
def pretend_cuda(monkeypatch):
    """CPU tensors that say they are on CUDA device 0, a route table that asks a stub (torch for every shape) and
    torch._scaled_mm replaced by a recorder: what the shortcut would do, without a GPU."""
    asked, made = [], []
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    monkeypatch.setattr(_eager_route, "_ask", lambda *key: asked.append(key) or True)
    monkeypatch.setattr(torch, "_scaled_mm", lambda *args: made.append(args) or "torch's result")
    monkeypatch.setattr(_eager_route, "_torch_rowwise", None)  # a CUDA build's cuBLASLt call: tested on its own
    monkeypatch.setattr(_eager_route, "_lt_ready", [True])
    _eager_route.forget()
    yield asked, made
    _eager_route.forget()


def operands(M=64, N=256, K=128):
    return random_operands(M, N, K)  # a [M, K] row-major, b = w.t() column-major, scales (M, 1) and (1, N)


def test_a_backstop_call_goes_to_torch_with_the_op_s_arguments_and_its_route_is_asked_once(pretend_cuda):
    asked, made = pretend_cuda
    a, b, sa, sb = operands()
    assert fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True) == "torch's result"
    assert fp8ext.scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=True) == "torch's result"
    assert asked == [(64, 256, 128, True, 0)]
    assert all(args[:4] == (a, b, sa, sb) and args[4:] == (None, None, BF16, True) for args in made)


def test_one_dimensional_scales_reach_torch_as_the_op_passes_them(pretend_cuda):
    _, made = pretend_cuda
    a, b, sa, sb = operands()
    fp8ext.scaled_mm(a, b, sa.view(-1), sb.view(-1))
    (args,) = made
    assert args[2].shape == (64, 1) and args[3].shape == (1, 256)
    assert args[2].data_ptr() == sa.data_ptr() and args[3].data_ptr() == sb.data_ptr()  # views, no copy


def test_a_backstop_call_is_torch_s_cublaslt_call_on_the_call_s_pointers_into_a_new_output(pretend_cuda,
                                                                                          monkeypatch):
    _, made = pretend_cuda
    ran = []
    monkeypatch.setattr(_eager_route, "_torch_rowwise", lambda *args: ran.append(args) or True)
    monkeypatch.setattr(_eager_route, "_torch_rowwise_ready", lambda: True)
    monkeypatch.setattr(_eager_route, "_LT_ALIGN", 1)  # CPU tensors here are not 256-byte aligned
    a, b, sa, sb = operands()
    out = fp8ext.scaled_mm(a, b, sa.view(-1), sb, use_fast_accum=False)
    assert out.shape == (64, 256) and out.dtype == BF16 and out.is_contiguous() and made == []
    assert ran == [(a.data_ptr(), b.data_ptr(), sa.data_ptr(), sb.data_ptr(), out.data_ptr(), 64, 256, 128, False, 0)]


def test_a_backstop_call_cublaslt_cannot_take_goes_to_torch(pretend_cuda, monkeypatch):
    _, made = pretend_cuda
    ran = []
    monkeypatch.setattr(_eager_route, "_torch_rowwise", lambda *args: ran.append(args) or False)  # e.g. capturing
    monkeypatch.setattr(_eager_route, "_torch_rowwise_ready", lambda: True)
    monkeypatch.setattr(_eager_route, "_LT_ALIGN", 1)
    assert fp8ext.scaled_mm(*operands()) == "torch's result" and len(ran) == len(made) == 1
    monkeypatch.setattr(_eager_route, "_LT_ALIGN", 2**40)  # no pointer is that aligned: cuBLASLt is not asked
    assert fp8ext.scaled_mm(*operands()) == "torch's result" and len(ran) == 1 and len(made) == 2


class Subclass(torch.Tensor):
    pass


def padded(t, cols):
    """t in the first `cols` columns of a wider buffer: the same values, a leading dimension past cols."""
    wide = torch.zeros(t.shape[0], cols + 16, dtype=t.dtype)
    wide[:, :cols] = t
    return wide[:, :cols]


VARIANTS = {
    "e5m2 activations": lambda a, b, sa, sb: (a.float().to(E5M2), b, sa, sb, {}),
    "fp16 output": lambda a, b, sa, sb: (a, b, sa, sb, {"out_dtype": torch.float16}),
    "a bias": lambda a, b, sa, sb: (a, b, sa, sb, {"bias": torch.zeros(256, dtype=BF16)}),
    "a padded leading dimension": lambda a, b, sa, sb: (padded(a, 128), b, sa, sb, {}),
    "b row-major": lambda a, b, sa, sb: (a, b.contiguous(), sa, sb, {}),
    "a 3-D a": lambda a, b, sa, sb: (a.unsqueeze(0), b, sa, sb, {}),
    "strided scale_a": lambda a, b, sa, sb: (a, b, torch.rand(64, 2)[:, :1], sb, {}),
    "scale_a not 16-byte aligned": lambda a, b, sa, sb: (a, b, torch.rand(65)[1:], sb, {}),
    "scales of another shape": lambda a, b, sa, sb: (a, b, torch.rand(64, 2), torch.rand(2, 2), {}),
    "tensor-wise scales": lambda a, b, sa, sb: (a, b, torch.tensor(0.5), torch.tensor(2.0), {}),
    "a tensor subclass": lambda a, b, sa, sb: (a.as_subclass(Subclass), b, sa, sb, {}),
    "a float scale_b": lambda a, b, sa, sb: (a, b, sa, sb.double(), {}),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_calls_the_backstop_would_not_pass_to_torch_unchanged_go_to_the_op(pretend_cuda, variant, monkeypatch):
    asked, made = pretend_cuda
    a, b, sa, sb, kwargs = VARIANTS[variant](*operands())
    op_calls = []
    monkeypatch.setattr(fp8ext.ops, "_SCALED_MM", lambda *args: op_calls.append(args) or "the op's result")
    assert fp8ext.scaled_mm(a, b, sa, sb, **kwargs) == "the op's result"
    assert (asked, made, len(op_calls)) == ([], [], 1)


def test_a_kernel_s_call_is_launched_on_the_call_s_pointers_into_a_new_output(pretend_cuda, monkeypatch):
    asked, made = pretend_cuda
    launched = []
    monkeypatch.setattr(_eager_route, "_ask", lambda *key: asked.append(key) or 3)  # the plan of some kernel
    monkeypatch.setattr(_eager_route, "_launch", lambda *args: launched.append(args))
    for M in (64, 1):  # one row: its one scale is read as one value, as the op reads it
        a, b, sa, sb = operands(M=M)
        out = fp8ext.scaled_mm(a, b, sa.view(-1), sb, use_fast_accum=True)
        assert out.shape == (M, 256) and out.dtype == BF16 and out.is_contiguous()
        assert launched[-1] == (3, a.data_ptr(), b.data_ptr(), sa.data_ptr(), sb.data_ptr(), out.data_ptr(), M, 256,
                                128, 0, M > 1)
    assert made == [] and len(asked) == 2


class _Dispatch:
    """What _ask reads of the C++ side, on the CPU: the dispatch's answers per capturing state, and the plans."""

    def __init__(self, monkeypatch, answers, plans):
        self.calls = []
        monkeypatch.setattr(torch.ops.fp8ext, "_selected_kernel", self.selected, raising=False)
        monkeypatch.setattr(_eager_route, "_plan", self.plan)
        monkeypatch.setattr(torch.cuda, "device", lambda device: __import__("contextlib").nullcontext())
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))
        self.answers, self.plans = answers, plans

    def selected(self, M, N, K, out_dtype, use_fast_accum, a_dtype, capturing, torch_ok):
        self.calls.append((capturing, torch_ok))
        return self.answers[capturing]

    def plan(self, name):
        if name not in self.plans:
            raise ValueError(f"no kernel named '{name}' in this build")
        return self.plans[name]


@pytest.mark.parametrize("answers, route", [
    (("torch._scaled_mm", "torch._scaled_mm"), True),
    (("k1", "k1"), 0),
    (("k1", "k2"), False),  # the answer changes under capture: the op decides each call
    (("streamk", "streamk"), False),  # a kernel with a workspace: the op allocates it
    (("reference", "reference"), False),  # no kernel of the build: the op's reference path
])
def test_the_route_is_the_dispatch_s_answer_outside_and_inside_capture(monkeypatch, answers, route):
    dispatch = _Dispatch(monkeypatch, dict(enumerate(answers)), {"k1": 0, "k2": 1, "streamk": -1})
    got = _eager_route._ask(64, 256, 128, True, 0)
    assert got is route if isinstance(route, bool) else (got == route and not isinstance(got, bool))
    assert sorted(dispatch.calls) == [(False, True), (True, True)]


def test_one_row_is_never_offered_to_torch(monkeypatch):
    # torch's row-wise path reads one row's one scale as tensor-wise: the op's dispatch is asked without torch.
    dispatch = _Dispatch(monkeypatch, {False: "k1", True: "k1"}, {"k1": 0})
    assert _eager_route._ask(1, 256, 128, True, 0) == 0
    assert sorted(dispatch.calls) == [(False, False), (True, False)]


def test_a_call_under_a_dispatch_mode_is_the_op_s(pretend_cuda, monkeypatch):
    from torch.utils.flop_counter import FlopCounterMode
    _, made = pretend_cuda
    monkeypatch.setattr(fp8ext.ops, "_SCALED_MM", lambda *args: "the op's result")
    with FlopCounterMode(display=False):
        assert fp8ext.scaled_mm(*operands()) == "the op's result" and made == []


def test_an_input_that_requires_grad_meets_the_op_s_refusal(pretend_cuda, monkeypatch):
    _, made = pretend_cuda
    a, b, sa, sb = operands()
    monkeypatch.setattr(fp8ext.ops, "_SCALED_MM", lambda *args: "the op's result")
    sa.requires_grad_(True)
    assert fp8ext.scaled_mm(a, b, sa, sb) == "the op's result" and made == []
    with torch.no_grad():
        assert fp8ext.scaled_mm(a, b, sa, sb) == "torch's result"


def test_a_shape_the_dispatch_keeps_is_remembered_and_its_calls_are_not_checked_again(pretend_cuda, monkeypatch):
    asked, made = pretend_cuda
    monkeypatch.setattr(_eager_route, "_ask", lambda *key: asked.append(key) or False)
    monkeypatch.setattr(fp8ext.ops, "_SCALED_MM", lambda *args: "the op's result")
    checked = []
    full_check = _eager_route._plain_call
    monkeypatch.setattr(_eager_route, "_plain_call", lambda *args: checked.append(1) or full_check(*args))
    for _ in range(3):
        assert fp8ext.scaled_mm(*operands()) == "the op's result"
    assert len(asked) == 1 and made == [] and len(checked) == 1


@needs_kernels
def test_a_forced_kernel_the_autotuner_and_the_backends_each_reset_the_route(pretend_cuda, monkeypatch):
    asked, made = pretend_cuda
    monkeypatch.setattr(fp8ext.ops, "_SCALED_MM", lambda *args: "the op's result")
    args = operands()
    kernel = next(k for k in fp8ext.kernel_names() if k.endswith("_fast_bf16") and not k.startswith("gemv"))
    assert fp8ext.scaled_mm(*args) == "torch's result" and len(asked) == 1
    with fp8ext.force_kernel(kernel):
        with fp8ext.force_kernel(None):  # nested: still a block open
            assert fp8ext.scaled_mm(*args) == "the op's result"
        assert fp8ext.scaled_mm(*args) == "the op's result"
    assert fp8ext.scaled_mm(*args) == "torch's result" and len(asked) == 2  # asked again after the blocks
    fp8ext.autotune(True)
    try:
        assert fp8ext.scaled_mm(*args) == "the op's result"
    finally:
        fp8ext.autotune(False)
    assert fp8ext.scaled_mm(*args) == "torch's result" and len(asked) == 3
    backends = fp8ext.backends()
    fp8ext.set_backends(backends)
    assert fp8ext.scaled_mm(*args) == "torch's result" and len(asked) == 4
    fp8ext.testing.plant_fault("cc=86")
    try:
        assert fp8ext.scaled_mm(*args) == "the op's result"
    finally:
        fp8ext.testing.plant_fault("")
    assert fp8ext.scaled_mm(*args) == "torch's result" and len(asked) == 5


# ---- On the GPU ----

def backstop_shapes(use_fast_accum, most=4):
    shapes = [(m, n, k) for m in (1525, 1024, 2048, 4096, 8192) for n, k in ((896, 512), (4096, 7168), (8192, 8192))]
    found = [s for s in shapes if all(fp8ext.selected_kernel(*s, use_fast_accum=use_fast_accum,
                                                             capturing=c) == "torch._scaled_mm" for c in (False, True))]
    if not found:
        pytest.skip("no shape here that the dispatch hands to torch")
    return found[:most]


def backstop_shape(use_fast_accum):
    return backstop_shapes(use_fast_accum, 1)[0]


@pytest.fixture
def cublaslt_runs(monkeypatch):
    """The answers of the route's cuBLASLt calls (True: it ran), recorded on the way through."""
    answers, real = [], _eager_route._torch_rowwise
    if real is None:
        pytest.skip("not a CUDA build")
    monkeypatch.setattr(_eager_route, "_torch_rowwise", lambda *args: answers.append(real(*args)) or answers[-1])
    return answers


def cuda_kernels(fn):
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.gpu
@pytest.mark.parametrize("use_fast_accum", [True, False])
def test_the_backstop_s_cublaslt_call_runs_torch_s_kernel_and_gives_its_bits(use_fast_accum, cublaslt_runs):
    for M, N, K in backstop_shapes(use_fast_accum):
        a, b, sa, sb = random_operands(M, N, K, device="cuda")
        _eager_route.forget()
        fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=use_fast_accum)  # the route and the algorithm, asked once
        ours = cuda_kernels(lambda: fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=use_fast_accum))
        torch_s = cuda_kernels(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=use_fast_accum))
        assert ours == torch_s and cublaslt_runs[-2:] == [True, True], (M, N, K, ours, torch_s, cublaslt_runs)
        out = fp8ext.scaled_mm(a, b, sa.view(-1), sb.view(-1), use_fast_accum=use_fast_accum)
        assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=use_fast_accum))


@pytest.mark.gpu
def test_the_backstop_s_cublaslt_call_on_a_side_stream_and_with_unaligned_operands(cublaslt_runs):
    M, N, K = backstop_shape(True)
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    expected = torch._scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # a workspace of its own
        side = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(side, expected) and cublaslt_runs == [True]
    shifted = torch.empty(M * K + 16, dtype=torch.uint8, device="cuda")[16:].view(E4M3).view(M, K)
    shifted.copy_(a)  # 16 bytes past a 256-byte boundary: torch._scaled_mm's own call
    assert shifted.data_ptr() % 256 == 16
    assert torch.equal(fp8ext.scaled_mm(shifted, b, sa, sb, use_fast_accum=True), expected) and len(cublaslt_runs) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("use_fast_accum", [True, False])
def test_the_shortcut_s_results_are_the_op_s_bit_for_bit(use_fast_accum):
    M, N, K = backstop_shape(use_fast_accum)
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    _eager_route.forget()
    out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=use_fast_accum)
    assert _eager_route._routes[(a.shape, b.shape, use_fast_accum, a.get_device())] is True
    with torch.no_grad():
        via_op = torch.ops.fp8ext.scaled_mm(a, b, sa, sb, None, BF16, use_fast_accum)
    assert torch.equal(out, via_op)
    assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=use_fast_accum))


def captured(fn):
    """fn's call captured into a CUDA graph on a side stream: (the graph, the stream, its output)."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = fn()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, stream, out


@pytest.mark.gpu
def test_the_shortcut_in_a_cuda_graph_replays_the_eager_result():
    M, N, K = backstop_shape(True)
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    _eager_route.forget()  # the route is asked inside the capture
    graph, stream, out = captured(lambda: fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True))
    a.copy_(random_operands(M, N, K, device="cuda")[0])
    graph.replay()
    assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=True))


def kernel_shapes(use_fast_accum):
    """Shapes whose route is a direct launch of one of fp8ext's kernels (decode, small and mid M)."""
    shapes = [(m, n, k) for m in (1, 5, 16, 64, 128, 300) for n, k in ((4096, 4096), (512, 512), (6144, 1024))]
    picked = []
    for M, N, K in shapes:
        route = _eager_route._ask(M, N, K, use_fast_accum, torch.cuda.current_device())
        if not isinstance(route, bool) and len(picked) < 6:
            picked.append((M, N, K))
    if not picked:
        pytest.skip("no shape here that the dispatch gives a kernel without a workspace")
    return picked


@pytest.mark.gpu
@pytest.mark.parametrize("use_fast_accum", [True, False])
def test_the_direct_launch_s_results_are_the_op_s_bit_for_bit(use_fast_accum):
    for M, N, K in kernel_shapes(use_fast_accum):
        a, b, sa, sb = random_operands(M, N, K, device="cuda")
        _eager_route.forget()
        outs = [fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=use_fast_accum),
                fp8ext.scaled_mm(a, b, sa.view(-1), sb.view(-1), use_fast_accum=use_fast_accum)]
        route = _eager_route._routes[(a.shape, b.shape, use_fast_accum, a.get_device())]
        assert not isinstance(route, bool), (M, N, K, route)
        with torch.no_grad():
            via_op = torch.ops.fp8ext.scaled_mm(a, b, sa, sb, None, BF16, use_fast_accum)
        assert all(torch.equal(out, via_op) for out in outs), (M, N, K)


@pytest.mark.gpu
def test_the_direct_launch_runs_on_the_current_stream_and_replays_in_a_cuda_graph():
    M, N, K = kernel_shapes(True)[0]
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    _eager_route.forget()  # the route is asked inside the capture
    graph, stream, out = captured(lambda: fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True))
    assert not isinstance(_eager_route._routes[(a.shape, b.shape, True, a.get_device())], bool)
    a.copy_(random_operands(M, N, K, device="cuda")[0])
    graph.replay()
    with torch.no_grad():
        assert torch.equal(out, torch.ops.fp8ext.scaled_mm(a, b, sa, sb, None, BF16, True))
    with torch.cuda.stream(stream):  # eager, on a side stream: ordered after the copy, read after a join
        stream.wait_stream(torch.cuda.current_stream())
        side = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(side, out)
