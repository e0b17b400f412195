"""fp8ext.linear's eager kernel route (python/fp8ext/_eager_route.py, linear_call): which calls the direct launch
takes, what it launches, and on the GPU that its results are the op's, bit for bit, for fp8ext.linear and
Float8Linear, 2-D and 3-D, with and without a bias, in eager code and in a CUDA graph."""
import pytest
import torch

import fp8ext
from fp8ext import _eager_route
from fp8ext.nn import Float8Linear

E4M3, BF16 = torch.float8_e4m3fn, torch.bfloat16


def layer_args(shape=(2, 3, 128), N=256, dtype=BF16, bias=False, device="cpu"):
    """x, weight [N, K] e4m3, weight_scale (N,), bias: random, never zeros."""
    K = shape[-1]
    x = torch.randn(*shape, dtype=dtype, device=device)
    weight = (torch.randn(N, K, device=device) * 8).to(E4M3)
    weight_scale = torch.rand(N, device=device) * 0.01 + 0.001
    return x, weight, weight_scale, (torch.randn(N, dtype=dtype, device=device) if bias else None)


@pytest.fixture
def pretend_cuda(monkeypatch):
    """CPU tensors that say they are on CUDA device 0, a route table that asks a stub (the plan 2 for every shape),
    and the launch and the op replaced by recorders."""
    asked, launched, op_calls = [], [], []
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    monkeypatch.setattr(_eager_route, "_ask", lambda *key: asked.append(key) or 2)
    monkeypatch.setattr(_eager_route, "_linear_launch", lambda *args: launched.append(args) or True)
    monkeypatch.setattr(_eager_route, "_torch_rowwise_ready", lambda: False)  # torch's route: tested on its own
    monkeypatch.setattr(fp8ext.ops, "_LINEAR", lambda *args: op_calls.append(args) or "the op's result")
    monkeypatch.setattr(fp8ext.nn, "_LINEAR", lambda *args: op_calls.append(args) or "the op's result")
    _eager_route.forget()
    yield asked, launched, op_calls
    _eager_route.forget()


@pytest.mark.parametrize("bias", [False, True])
def test_a_kernel_route_launches_the_quantize_and_the_gemm_on_the_call_s_pointers(pretend_cuda, bias):
    asked, launched, op_calls = pretend_cuda
    x, w, ws, b = layer_args(bias=bias)
    for _ in range(2):
        out = fp8ext.linear(x, w, ws, b)
        assert out.shape == (2, 3, 256) and out.dtype == BF16 and out.is_contiguous()
    (plan, x_ptr, code, M, K, buffer, w_ptr, ws_ptr, b_ptr, out_ptr, N, device, fast) = launched[-1]
    assert (plan, x_ptr, code, M, K, w_ptr, ws_ptr, N, device, fast) == (2, x.data_ptr(), 0, 6, 128, w.data_ptr(),
                                                                           ws.data_ptr(), 256, 0, True)
    assert b_ptr == (b.data_ptr() if bias else 0) and out_ptr == out.data_ptr() and buffer not in (0, out_ptr)
    assert asked == [(6, 256, 128, True, 0, BF16, bias)] and op_calls == []  # asked once per shape


def test_float8linear_takes_it_and_a_route_to_torch_is_left_to_the_op_without_cublaslt(pretend_cuda, monkeypatch):
    asked, launched, op_calls = pretend_cuda
    layer = Float8Linear.from_linear(torch.nn.Linear(128, 256, bias=False, dtype=BF16))
    x = torch.randn(5, 128, dtype=BF16)
    assert layer(x).shape == (5, 256) and len(launched) == 1
    monkeypatch.setattr(_eager_route, "_ask", lambda *key: True)  # torch's: the op quantizes and hands it on
    _eager_route.forget()
    assert layer(x) == "the op's result" and len(launched) == 1 and len(op_calls) == 1


def test_a_route_to_torch_is_the_quantize_and_torch_s_cublaslt_call(pretend_cuda, monkeypatch):
    asked, launched, op_calls = pretend_cuda
    monkeypatch.setattr(_eager_route, "_ask", lambda *key: True)
    monkeypatch.setattr(_eager_route, "_torch_rowwise_ready", lambda: True)
    monkeypatch.setattr(_eager_route, "_LT_ALIGN", 1)  # CPU tensors here are not 256-byte aligned
    x, w, ws, _ = layer_args()
    out = fp8ext.linear(x, w, ws, None, use_fast_accum=False)
    assert out.shape == (2, 3, 256) and launched[-1][0] == _eager_route._TORCH_PLAN and launched[-1][-1] is False
    # with a bias, or another dtype than bf16, torch's route is the op's
    for args in (layer_args(bias=True), layer_args(dtype=torch.float16)):
        assert fp8ext.linear(*args) == "the op's result"
    monkeypatch.setattr(_eager_route, "_linear_launch", lambda *args: False)  # under capture: nothing launched
    assert fp8ext.linear(x, w, ws, None, use_fast_accum=False) == "the op's result" and len(op_calls) == 3


def _strided(t):
    wide = torch.randn(t.shape[0], t.shape[1] + 16, dtype=t.dtype)
    wide[:, :t.shape[1]] = t
    return wide[:, :t.shape[1]]


VARIANTS = {
    "x not contiguous": lambda x, w, ws, b: (_strided(x.reshape(6, 128)), w, ws, b),
    "float64 x": lambda x, w, ws, b: (x.double(), w, ws, b),
    "e5m2 weight": lambda x, w, ws, b: (x, w.float().to(torch.float8_e5m2), ws, b),
    "weight rows padded": lambda x, w, ws, b: (x, (torch.randn(256, 144) * 8).to(E4M3)[:, :128], ws, b),
    "scales of another shape": lambda x, w, ws, b: (x, w, torch.rand(256, 2), b),
    "scales not aligned": lambda x, w, ws, b: (x, w, torch.rand(257)[1:], b),
    "a bias of another dtype": lambda x, w, ws, b: (x, w, ws, torch.randn(256)),
    "a 4-D x": lambda x, w, ws, b: (x.unsqueeze(0), w, ws, b),
    "K not matching": lambda x, w, ws, b: (x[..., :112].contiguous(), w, ws, b),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_calls_the_direct_launch_does_not_take_go_to_the_op(pretend_cuda, variant):
    asked, launched, op_calls = pretend_cuda
    args = VARIANTS[variant](*layer_args())
    assert _eager_route.linear_call(*args, True) is None
    assert (asked, launched) == ([], [])


def test_an_input_that_requires_grad_meets_the_op_s_refusal(pretend_cuda):
    _, launched, _ = pretend_cuda
    x, w, ws, b = layer_args()
    x.requires_grad_(True)
    assert fp8ext.linear(x, w, ws) == "the op's result" and launched == []
    with torch.no_grad():
        fp8ext.linear(x, w, ws)
    assert len(launched) == 1


# ---- On the GPU ----

def linear_cases():
    shapes = [(1, 4096), (16, 4096), (2, 5, 1024), (64, 512)]
    return [(s, N, dtype, bias) for s in shapes for N in (1024, 6144) for dtype in (BF16, torch.float16)
            for bias in (False, True)]


@pytest.mark.gpu
def test_the_direct_linear_s_results_are_the_op_s_bit_for_bit():
    taken = 0
    for shape, N, dtype, bias in linear_cases():
        x, w, ws, b = layer_args(shape, N, dtype, bias, device="cuda")
        _eager_route.forget()
        out = fp8ext.linear(x, w, ws, b)
        route = _eager_route._linear_routes[(x.shape, w.shape, b is None, dtype, True, x.get_device())]
        taken += not isinstance(route, bool)
        with torch.no_grad():
            via_op = torch.ops.fp8ext.linear(x, w, ws, b, True)
        assert torch.equal(out, via_op), (shape, N, dtype, bias, route)
    assert taken >= len(linear_cases()) // 2  # most of these shapes are fp8ext's kernels'


@pytest.mark.gpu
def test_float8linear_by_the_direct_launch_in_a_cuda_graph_replays_the_eager_result():
    layer = Float8Linear.from_linear(torch.nn.Linear(4096, 1024, bias=True, device="cuda", dtype=BF16))
    x = torch.randn(1, 4, 4096, device="cuda", dtype=BF16)
    _eager_route.forget()
    with torch.no_grad():
        want = layer(x)
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            out = layer(x)
        torch.cuda.current_stream().wait_stream(stream)
        assert not isinstance(_eager_route._linear_routes[(x.shape, layer.weight.shape, False, BF16, True, 0)], bool)
        x.copy_(torch.randn_like(x))
        graph.replay()
        assert torch.equal(out, torch.ops.fp8ext.linear(x, layer.weight, layer.weight_scale, layer.bias, True))
        assert not torch.equal(out, want)  # the replay read the new x


@pytest.mark.gpu
@pytest.mark.parametrize("use_fast_accum", [True, False])
def test_a_route_to_torch_gives_the_op_s_bits_in_eager_code_and_in_a_cuda_graph(use_fast_accum):
    shapes = [(m, n, k) for m in (1525, 2048, 4096) for n, k in ((896, 512), (4096, 7168), (8192, 8192))]
    picked = [s for s in shapes if all(fp8ext.selected_kernel(*s, use_fast_accum=use_fast_accum, capturing=c)
                                       == "torch._scaled_mm" for c in (False, True))][:2]
    if not picked or _eager_route._torch_rowwise is None or not _eager_route._torch_rowwise_ready():
        pytest.skip("no shape here that the dispatch hands to torch, or no cuBLASLt call to mirror")
    for M, N, K in picked:
        x, w, ws, _ = layer_args((M, K), N, device="cuda")
        _eager_route.forget()
        with torch.no_grad():
            out = fp8ext.linear(x, w, ws, None, use_fast_accum)
            assert _eager_route._linear_routes[(x.shape, w.shape, True, BF16, use_fast_accum, 0)] == -2
            assert torch.equal(out, torch.ops.fp8ext.linear(x, w, ws, None, use_fast_accum)), (M, N, K)
            graph = torch.cuda.CUDAGraph()  # captured: cuBLASLt's workspace is not taken there, the op runs
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
                captured = fp8ext.linear(x, w, ws, None, use_fast_accum)
            torch.cuda.current_stream().wait_stream(stream)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(captured, out), (M, N, K)
