"""The eager shortcut to torch's row-wise path (python/fp8ext/_torch_route.py): which calls take it, that the route
is the dispatch's own answer asked once per shape, that whatever changes the dispatch turns it off, and on the GPU
that its results are the op's, bit for bit, in eager code and in a CUDA graph."""
import pytest
import torch

import fp8ext
from fp8ext import _torch_route
from fp8ext.testing import random_operands

E4M3, E5M2, BF16 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16
needs_kernels = pytest.mark.skipif(not fp8ext.kernel_names(), reason="force_kernel and autotune need a CUDA build")


@pytest.fixture
def pretend_cuda(monkeypatch):
    """CPU tensors that say they are on CUDA device 0, a route table that asks a stub (torch for every shape) and
    torch._scaled_mm replaced by a recorder: what the shortcut would do, without a GPU."""
    asked, made = [], []
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    monkeypatch.setattr(_torch_route, "_ask", lambda *key: asked.append(key) or True)
    monkeypatch.setattr(torch, "_scaled_mm", lambda *args: made.append(args) or "torch's result")
    _torch_route.forget()
    yield asked, made
    _torch_route.forget()


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


def test_one_row_is_left_to_the_op(pretend_cuda, monkeypatch):
    # One row has one scale: the op reads it as tensor-wise, which is not the row-wise route.
    asked, made = pretend_cuda
    monkeypatch.setattr(fp8ext.ops, "_SCALED_MM", lambda *args: "the op's result")
    assert fp8ext.scaled_mm(*operands(M=1)) == "the op's result" and asked == made == []


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
    monkeypatch.setattr(_torch_route, "_ask", lambda *key: asked.append(key) or False)
    monkeypatch.setattr(fp8ext.ops, "_SCALED_MM", lambda *args: "the op's result")
    checked = []
    full_check = _torch_route._backstop_call
    monkeypatch.setattr(_torch_route, "_backstop_call", lambda *args: checked.append(1) or full_check(*args))
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

def backstop_shape(use_fast_accum):
    shapes = [(m, n, k) for m in (1024, 2048, 4096, 8192) for n, k in ((896, 512), (4096, 7168), (8192, 8192))]
    shape = next((s for s in shapes if all(fp8ext.selected_kernel(*s, use_fast_accum=use_fast_accum,
                                                                  capturing=c) == "torch._scaled_mm"
                                           for c in (False, True))), None)
    if shape is None:
        pytest.skip("no shape here that the dispatch hands to torch")
    return shape


@pytest.mark.gpu
@pytest.mark.parametrize("use_fast_accum", [True, False])
def test_the_shortcut_s_results_are_the_op_s_bit_for_bit(use_fast_accum):
    M, N, K = backstop_shape(use_fast_accum)
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    _torch_route.forget()
    out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=use_fast_accum)
    assert _torch_route._routes[(a.shape, b.shape, use_fast_accum, a.get_device())] is True
    with torch.no_grad():
        via_op = torch.ops.fp8ext.scaled_mm(a, b, sa, sb, None, BF16, use_fast_accum)
    assert torch.equal(out, via_op)
    assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=use_fast_accum))


@pytest.mark.gpu
def test_the_shortcut_in_a_cuda_graph_replays_the_eager_result():
    M, N, K = backstop_shape(True)
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    _torch_route.forget()  # the route is asked inside the capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
    torch.cuda.current_stream().wait_stream(stream)
    a.copy_(random_operands(M, N, K, device="cuda")[0])
    graph.replay()
    assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=True))
