"""fp8ext.nn.Float8Linear, fp8ext.convert, fp8ext.f8f8bf16_rowwise and fp8ext.TorchaoConfig: on CPU through the ops'
reference paths, and on an sm_90 GPU under torch.compile and CUDA graphs."""
import copy
import io

import pytest
import torch
from torch import nn

import fp8ext
from fp8ext.nn import Float8Linear

E4M3 = torch.float8_e4m3fn


def linear(K, N, bias=True, dtype=torch.bfloat16, device="cpu"):
    layer = nn.Linear(K, N, bias=bias, dtype=dtype, device=device)
    if bias:
        with torch.no_grad():
            layer.bias.normal_()
    return layer


def expected(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """What Float8Linear computes, spelled out with the two public ops."""
    wq, ws = fp8ext.quantize_rowwise(layer.weight.detach())
    xq, xs = fp8ext.quantize_rowwise(x.reshape(-1, x.shape[-1]))
    bias = None if layer.bias is None else layer.bias.detach().to(x.dtype)
    out = fp8ext.scaled_mm(xq, wq.t(), xs, ws.view(1, -1), bias=bias, out_dtype=x.dtype, use_fast_accum=True)
    return out.view(*x.shape[:-1], -1)


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("lead", [(5,), (2, 3), (2, 1, 3)], ids=["2d", "3d", "4d"])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_matches_its_definition_and_bf16(lead, x_dtype, bias):
    layer = linear(64, 48, bias=bias)
    f8 = Float8Linear.from_linear(layer)
    assert f8.weight.dtype == E4M3 and f8.weight.shape == (48, 64) and f8.weight_scale.shape == (48,)
    assert f8.bias is None if not bias else f8.bias.dtype == torch.bfloat16
    x = torch.randn(*lead, 64).to(x_dtype)
    with torch.inference_mode():
        out = f8(x)
        ref = layer.to(torch.float32)(x.float())
    assert out.dtype == x_dtype and out.shape == (*lead, 48)
    assert torch.equal(out, expected(layer.to(torch.bfloat16), x))
    # Two FP8 roundings of 2^-4 relative each, summed over K = 64 random terms: well inside 10% of the row norm.
    err = (out.float() - ref).norm(dim=-1) / ref.norm(dim=-1)
    assert bool((err < 0.1).all()), err.max()


def test_state_dict_round_trip_is_bit_identical():
    f8 = Float8Linear.from_linear(linear(32, 16), use_fast_accum=True)
    buf = io.BytesIO()
    torch.save(f8.state_dict(), buf)
    assert set(f8.state_dict()) == {"weight", "weight_scale", "bias"}
    fresh = Float8Linear(32, 16, bias=True)
    fresh.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
    x = torch.randn(7, 32).bfloat16()
    with torch.no_grad():
        assert torch.equal(fresh(x), f8(x))
    assert torch.equal(fresh.weight.view(torch.uint8), f8.weight.view(torch.uint8))


def test_shape_and_dtype_errors():
    with pytest.raises(ValueError, match=r"fp8ext.Float8Linear: in_features = 40 is not a positive multiple of 16"):
        Float8Linear(40, 16)
    with pytest.raises(ValueError, match=r"out_features = 24 is not a positive multiple of 16"):
        Float8Linear.from_linear(nn.Linear(32, 24))
    f8 = Float8Linear(32, 16)
    with pytest.raises(ValueError, match=r"x: expected the last dimension to be in_features = 32, got shape \(4, 48\)"):
        f8(torch.randn(4, 48))
    with pytest.raises(ValueError, match=r"x: expected dtype torch.bfloat16, torch.float16 or torch.float32, got "
                                         r"torch.float64"):
        f8(torch.randn(4, 32).double())


def test_grad_mode_is_refused_with_the_fix():
    f8 = Float8Linear.from_linear(linear(32, 16))
    x = torch.randn(4, 32, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"x: requires grad, but fp8ext.linear is not differentiable"):
        f8(x)
    with torch.no_grad():
        assert not f8(x).requires_grad


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(64, 64)
        self.odd = nn.Linear(64, 40)
        self.attn = nn.MultiheadAttention(64, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(64, 128, bias=False), nn.GELU(), nn.Linear(128, 64))


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.lm_head = nn.Linear(64, 32, bias=False)


def test_convert_report_and_in_place_swap():
    model = Tiny().bfloat16()
    report = fp8ext.convert(model)
    swapped = dict(report.swapped)
    skipped = dict(report.skipped)
    for i in (0, 1):
        assert swapped[f"layers.{i}.q_proj"] == (64, 64) and swapped[f"layers.{i}.mlp.0"] == (128, 64)
        assert isinstance(model.layers[i].q_proj, Float8Linear) and isinstance(model.layers[i].mlp[2], Float8Linear)
        assert "out_features = 40" in skipped[f"layers.{i}.odd"]
        assert "MultiheadAttention" in skipped[f"layers.{i}.attn.out_proj"]
    assert skipped["lm_head"] == "lm_head (skip_lm_head=True)" and isinstance(model.lm_head, nn.Linear)
    assert len(report.swapped) == 6 and "6 Linear layers now FP8" in str(report)
    # A second pass finds nothing new to swap.
    again = fp8ext.convert(model)
    assert again.swapped == [] and len(again.skipped) == len(report.skipped)


def test_convert_filter_lm_head_and_shared_layers():
    model = Tiny().bfloat16()
    model.layers[1].q_proj = model.layers[0].q_proj  # one layer under two names
    report = fp8ext.convert(model, filter_fn=lambda m, fqn: "mlp" not in fqn, skip_lm_head=False)
    names = [n for n, _ in report.swapped]
    assert names == ["layers.0.q_proj", "layers.1.q_proj", "lm_head"]
    assert model.layers[0].q_proj is model.layers[1].q_proj
    assert dict(report.skipped)["layers.0.mlp.0"] == "filter_fn returned False"


def test_converted_model_tracks_the_bf16_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 128)).bfloat16()
    x = torch.randn(3, 5, 128).bfloat16()
    with torch.inference_mode():
        ref = model(x).float()
        fp8ext.convert(model)
        out = model(x).float()
    assert (out - ref).norm() / ref.norm() < 0.08


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_on_cpu(dynamic):
    torch._dynamo.reset()
    f8 = Float8Linear.from_linear(linear(64, 32))
    compiled = torch.compile(f8, fullgraph=True, dynamic=dynamic)
    with torch.inference_mode():
        for M in (16, 40):
            x = torch.randn(2, M, 64).bfloat16()
            assert torch.equal(compiled(x), f8(x))


# ---- f8f8bf16_rowwise: FBGEMM's argument convention ----

def fbgemm_inputs(M=17, N=48, K=64):
    xq, xs = fp8ext.quantize_rowwise(torch.randn(M, K).bfloat16())
    wq, ws = fp8ext.quantize_rowwise(torch.randn(N, K).bfloat16())
    return xq, wq, xs.view(M), ws.view(N)


def test_f8f8bf16_rowwise_is_scaled_mm():
    xq, wq, xs, ws = fbgemm_inputs()
    bias = torch.randn(48).bfloat16()
    want = fp8ext.scaled_mm(xq, wq.t(), xs.view(-1, 1), ws.view(1, -1), bias=bias, out_dtype=torch.bfloat16,
                            use_fast_accum=True)
    for x_scale, w_scale in ((xs, ws), (xs.view(-1, 1), ws.view(1, -1)), (xs, ws.view(-1, 1))):
        assert torch.equal(fp8ext.f8f8bf16_rowwise(xq, wq, x_scale, w_scale, bias=bias), want)
    out = torch.empty(17, 48, dtype=torch.bfloat16)
    assert fp8ext.f8f8bf16_rowwise(xq, wq, xs, ws, bias=bias, output=out) is out and torch.equal(out, want)
    f32_bias = fp8ext.f8f8bf16_rowwise(xq, wq, xs, ws, bias=bias.float())
    assert torch.equal(f32_bias, want)



def test_f8f8bf16_rowwise_takes_leading_dimensions_as_rows():
    # FBGEMM's convention: XQ [..., K] is [M, K] with M the product of the leading dimensions, the result [..., N].
    xq, wq, xs, ws = fbgemm_inputs(M=2 * 3 * 5)
    want = fp8ext.f8f8bf16_rowwise(xq, wq, xs, ws)
    xq3 = xq.view(2, 15, 64)
    for x_scale in (xs, xs.view(-1, 1), xs.view(2, 15), xs.view(2, 15, 1)):
        got = fp8ext.f8f8bf16_rowwise(xq3, wq, x_scale, ws)
        assert got.shape == (2, 15, 48) and torch.equal(got.view(30, 48), want)
    out = torch.empty(2, 3, 5, 48, dtype=torch.bfloat16)
    assert fp8ext.f8f8bf16_rowwise(xq.view(2, 3, 5, 64), wq, xs, ws, output=out) is out
    assert torch.equal(out.view(30, 48), want)
    with pytest.raises(ValueError, match=r"x_scale: expected shape \(M,\), \(M, 1\), \(2, 15\) or \(2, 15, 1\) "
                                         r"with M = 30, got \(15, 2\)"):
        fp8ext.f8f8bf16_rowwise(xq3, wq, xs.view(15, 2), ws)
    with pytest.raises(ValueError, match=r"output: expected a torch.bfloat16 tensor of shape \(2, 15, 48\)"):
        fp8ext.f8f8bf16_rowwise(xq3, wq, xs, ws, output=torch.empty(30, 48, dtype=torch.bfloat16))

@pytest.mark.parametrize("bad,pattern", [
    ("wq_transposed", r"fp8ext.f8f8bf16_rowwise: WQ: expected shape \[N, K\] with K = 64"),
    ("x_scale", r"x_scale: expected shape \(M,\) or \(M, 1\) with M = 17, got \(1, 17\)"),
    ("w_scale_dtype", r"w_scale: expected dtype torch.float32, got torch.bfloat16"),
    ("output_dtype", r"output: expected a torch.bfloat16 tensor of shape \(17, 48\)"),
    ("output_shape", r"output: expected a torch.bfloat16 tensor of shape \(17, 48\) on cpu, got torch.bfloat16 of "
                     r"shape \(48, 17\)"),
    ("bias_dtype", r"bias: expected dtype torch.bfloat16 or torch.float32, got torch.float16"),
])
def test_f8f8bf16_rowwise_errors(bad, pattern):
    xq, wq, xs, ws = fbgemm_inputs()
    kwargs = {}
    if bad == "wq_transposed":
        wq = wq.t()
    elif bad == "x_scale":
        xs = xs.view(1, -1)
    elif bad == "w_scale_dtype":
        ws = ws.bfloat16()
    elif bad == "output_dtype":
        kwargs["output"] = torch.empty(17, 48)
    elif bad == "output_shape":
        kwargs["output"] = torch.empty(48, 17, dtype=torch.bfloat16)
    else:
        kwargs["bias"] = torch.randn(48).half()
    with pytest.raises(ValueError, match=pattern):
        fp8ext.f8f8bf16_rowwise(xq, wq, xs, ws, **kwargs)


# ---- torchao ----

def test_torchao_config_swaps_linears():
    pytest.importorskip("torchao")
    from torchao.quantization import quantize_
    model = Tiny().bfloat16()
    x = torch.randn(2, 64).bfloat16()
    quantize_(model, fp8ext.TorchaoConfig())
    assert isinstance(model.layers[0].q_proj, Float8Linear) and isinstance(model.lm_head, Float8Linear)
    assert isinstance(model.layers[0].odd, nn.Linear)  # 40 outputs: left as it is
    with torch.inference_mode():
        assert model.layers[0].mlp(x).shape == (2, 64)
    # the layers convert would skip are left as they are, rather than refused halfway through quantize_
    mixed = nn.Sequential(nn.Linear(64, 64).bfloat16(), nn.Linear(64, 64).double())
    quantize_(mixed, fp8ext.TorchaoConfig())
    assert [type(m) for m in mixed] == [Float8Linear, nn.Linear]


def test_fp8ext_imports_without_torchao():
    import subprocess
    import sys
    code = ("import sys; sys.modules['torchao'] = None; import fp8ext, torch\n"
            "try:\n    fp8ext.TorchaoConfig\nexcept ImportError as e:\n    print('ImportError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ImportError fp8ext.TorchaoConfig needs torchao"), out


# ---- on an sm_90 GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_forward_matches_cpu_definition(x_dtype):
    layer = linear(1024, 2048)
    f8 = Float8Linear.from_linear(layer.cuda())
    x = torch.randn(4, 33, 1024).to(x_dtype)
    with torch.inference_mode():
        out = f8(x.cuda())
    # The same FP8 operands and scales as on CPU (quantize_rowwise is bit-exact across devices); the GEMMs differ
    # in their float32 summation order only.
    ref = expected(layer.cpu(), x)
    assert out.dtype == x_dtype and out.shape == (4, 33, 2048)
    torch.testing.assert_close(out.cpu().float(), ref.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [False, True])
def test_gpu_compile_fullgraph(dynamic):
    torch._dynamo.reset()
    f8 = Float8Linear.from_linear(linear(1024, 2048, device="cuda"))
    compiled = torch.compile(f8, fullgraph=True, dynamic=dynamic)
    with torch.inference_mode():
        for M in (8, 300):
            x = torch.randn(M, 1024, device="cuda").bfloat16()
            assert torch.equal(compiled(x), f8(x))


@pytest.mark.gpu
def test_gpu_cuda_graph_replay_allocates_nothing_new():
    f8 = Float8Linear.from_linear(linear(4096, 1024, device="cuda"))
    x = torch.randn(16, 4096, device="cuda").bfloat16()
    with torch.inference_mode():
        side = torch.cuda.Stream()  # warm up off the capture stream, as torch.cuda.graphs recommends
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            f8(x)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = f8(x)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        for _ in range(3):
            x.copy_(torch.randn(16, 4096, device="cuda").bfloat16())
            after_input = torch.cuda.memory_stats()["allocation.all.allocated"]
            graph.replay()
            torch.cuda.synchronize()
            assert torch.cuda.memory_stats()["allocation.all.allocated"] == after_input  # replay allocates nothing
            # Eager calls may pick a kernel that capture excludes (stream-K): equal up to summation order.
            torch.testing.assert_close(out, f8(x), rtol=1e-2, atol=1e-2)
        assert torch.cuda.memory_stats()["allocation.all.allocated"] > before  # (the eager calls did allocate)


# ---- convert(fuse_siblings=True): q/k/v and gate/up as one GEMM each ----

class Attention(nn.Module):
    """Calls its projections as Hugging Face's Llama attention does: q, k and v on the same input object."""

    def __init__(self, d=64, kv=32, bias=False):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d, bias), nn.Linear(d, kv, bias), nn.Linear(d, kv, bias)
        self.o_proj = nn.Linear(d, d, bias)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.o_proj(q * torch.cat([k, v], -1))


class Mlp(nn.Module):
    def __init__(self, d=64, hidden=128):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(d, hidden), nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Decoder(nn.Module):
    def __init__(self, bias=False):
        super().__init__()
        self.attn, self.mlp = Attention(bias=bias), Mlp()

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


def fused_and_plain(bias=False, **kwargs):
    torch.manual_seed(0)
    model = Decoder(bias=bias).bfloat16()
    plain, fused = copy.deepcopy(model), copy.deepcopy(model)
    fp8ext.convert(plain)
    return plain, fused, fp8ext.convert(fused, fuse_siblings=True, **kwargs)


@pytest.mark.parametrize("bias", [False, True])
def test_fuse_siblings_computes_what_the_plain_conversion_does(bias):
    plain, fused, report = fused_and_plain(bias)
    assert report.fused == [(["attn.q_proj", "attn.k_proj", "attn.v_proj"], (128, 64)),
                            (["mlp.gate_proj", "mlp.up_proj"], (256, 64))]
    assert len(report.swapped) == 7 and "2 sibling groups fused" in str(report)
    assert isinstance(fused.attn.q_proj, fp8ext.nn.SiblingLinear) and isinstance(fused.attn.o_proj, Float8Linear)
    # Per-row weight scales: the fused weight is the layers' own FP8 weights, stacked.
    assert torch.equal(fused.attn.q_proj.fused.weight,
                       torch.cat([plain.attn.q_proj.weight, plain.attn.k_proj.weight, plain.attn.v_proj.weight]))
    x = torch.randn(3, 5, 64).bfloat16()
    with torch.inference_mode():
        torch.testing.assert_close(fused(x).float(), plain(x).float(), rtol=1e-2, atol=1e-2)
    assert fused.attn.q_proj.group._out is None  # let go once every sibling has taken its part
    with torch.no_grad():
        torch.testing.assert_close(fused(x).float(), plain(x).float(), rtol=1e-2, atol=1e-2)
    # Past MAX_FUSED_ROWS each sibling runs on its own rows of the fused weight: the plain layers' very ops.
    big = torch.randn(fp8ext.nn.FusedSiblings.MAX_FUSED_ROWS + 1, 64).bfloat16()
    with torch.inference_mode():
        assert torch.equal(fused(big), plain(big))
    assert fused.attn.q_proj.group._out is None


def test_a_sibling_with_another_or_a_changed_input_computes_its_own():
    plain, fused, _ = fused_and_plain()
    x, y = torch.randn(4, 64).bfloat16(), torch.randn(4, 64).bfloat16()
    with torch.no_grad():
        q = fused.attn.q_proj(x)
        torch.testing.assert_close(q.float(), plain.attn.q_proj(x).float(), rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(fused.attn.k_proj(y).float(), plain.attn.k_proj(y).float(), rtol=1e-2, atol=1e-2)
        fused.attn.q_proj(x)
        x.mul_(3)  # the version counter moves: v must not reuse the result for the old x
        torch.testing.assert_close(fused.attn.v_proj(x).float(), plain.attn.v_proj(x).float(), rtol=1e-2, atol=1e-2)


def test_siblings_that_do_not_all_qualify_are_not_fused():
    _, _, report = fused_and_plain(filter_fn=lambda m, fqn: fqn != "attn.k_proj")
    assert [names for names, _ in report.fused] == [["mlp.gate_proj", "mlp.up_proj"]]
    model = Decoder().bfloat16()
    model.mlp.up_proj = nn.Linear(64, 128, bias=False).bfloat16()  # bias on one sibling only
    assert fp8ext.convert(model, fuse_siblings=True).fused == [
        (["attn.q_proj", "attn.k_proj", "attn.v_proj"], (128, 64))]


def test_fused_state_dict_round_trip_and_compile():
    _, fused, _ = fused_and_plain()
    assert "attn.q_proj.fused.weight" in fused.state_dict() and "attn.k_proj.weight" not in fused.state_dict()
    buf = io.BytesIO()
    torch.save(fused.state_dict(), buf)
    other = Decoder().bfloat16()
    fp8ext.convert(other, fuse_siblings=True)
    buf.seek(0)
    other.load_state_dict(torch.load(buf))
    x = torch.randn(2, 7, 64).bfloat16()
    with torch.inference_mode():
        want = fused(x)
        assert torch.equal(other(x), want)
        torch._dynamo.reset()
        assert torch.equal(torch.compile(fused, fullgraph=True, backend="aot_eager")(x), want)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 4, 16])
def test_gpu_fused_siblings_are_bitwise_the_plain_layers_with_one_kernel(M):
    # With one decode kernel forced, each output column is the same sum whatever the weight's height.
    plain, fused, _ = fused_and_plain()
    plain, fused = plain.cuda(), fused.cuda()
    x = torch.randn(M, 64, device="cuda").bfloat16()
    with torch.inference_mode(), fp8ext.force_kernel("gemv_tc_m32_r16_s8_fast_bf16"):
        assert torch.equal(fused(x), plain(x))


@pytest.mark.gpu
def test_gpu_fused_siblings_in_a_cuda_graph():
    _, fused, _ = fused_and_plain()
    fused = fused.cuda()
    x = torch.randn(8, 64, device="cuda").bfloat16()
    with torch.inference_mode(), fp8ext.force_kernel("gemv_tc_m32_r16_s8_fast_bf16"):
        fused(x)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fused(x)
        for _ in range(3):
            x.copy_(torch.randn_like(x))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, fused(x))


def test_the_forward_reads_swapped_and_parametrized_parameters():
    # forward reads its parameters from the module's dict (nn.Module.__getattr__ is a third of its host time);
    # torch.func.functional_call's swapped tensors and a parametrization must still be what it computes with.
    from torch.nn.utils import parametrize
    torch.manual_seed(3)
    layer = Float8Linear.from_linear(linear(64, 32))
    other = Float8Linear.from_linear(linear(64, 32))
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    swapped = {name: getattr(other, name) for name in ("weight", "weight_scale", "bias")}
    assert torch.equal(torch.func.functional_call(layer, swapped, (x,)), other(x))
    assert not torch.equal(layer(x), other(x))

    class Doubled(nn.Module):
        def forward(self, s):
            return s * 2

    parametrize.register_parametrization(layer, "weight_scale", Doubled())
    parametrize.register_parametrization(layer, "bias", Doubled())
    assert "weight_scale" not in layer._parameters and "bias" not in layer._parameters
    plain = Float8Linear(64, 32)
    plain.load_state_dict({"weight": layer.weight, "weight_scale": layer.weight_scale, "bias": layer.bias})
    assert torch.equal(layer(x), plain(x))


def test_a_column_major_weight_and_a_strided_input_work_as_in_nn_linear():
    """nn.Linear takes a weight in any layout and inputs of any strides; so does the converted layer (the weight is
    quantized from a contiguous copy, an input with a strided last dimension is copied), with the same result as the
    contiguous ones. x.flatten(2).transpose(1, 2) is the vision models' pattern."""
    layer = linear(64, 48)
    model = nn.Sequential(linear(64, 64), layer)
    want = expected(model[0], torch.ones(1, 64))
    with torch.no_grad():
        model[0].weight = nn.Parameter(model[0].weight.detach().t().contiguous().t())  # same values, column-major
    report = fp8ext.convert(model)
    assert [name for name, _ in report.swapped] == ["0", "1"]
    assert torch.equal(model[0](torch.ones(1, 64)), want)
    x = torch.randn(2, 64, 5, dtype=torch.bfloat16).transpose(1, 2)  # [B, HW, C], C strided
    assert x.stride(-1) != 1
    assert torch.equal(model[1](x), model[1](x.contiguous()))
