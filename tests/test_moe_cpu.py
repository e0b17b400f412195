"""fp8ext.convert on mixture-of-experts models (fp8ext.moe.Float8Experts), on CPU: small random Qwen3-MoE and
Mixtral models converted, their experts swapped and their routers kept, outputs close to the unconverted model's;
Float8Experts equal to a loop of fp8ext.scaled_mm over each token's experts on the same quantized inputs; experts
whose shapes the op cannot take, or that compute otherwise, are skipped with the reason; expert id G adds nothing;
bad inputs are refused before any work; a compiled layer equals the eager one."""
import copy
import re

import pytest
import torch

import fp8ext
from fp8ext.moe import Float8Experts

pytest.importorskip("transformers")
from moe_models import tiny  # noqa: E402


@pytest.mark.parametrize("kind, experts", [("qwen3_moe", 8), ("mixtral", 4)])
def test_a_converted_moe_model_swaps_its_experts_keeps_its_routers_and_each_layer_stays_close(kind, experts):
    """Each Float8Experts against the experts it replaced, on the inputs and routing it saw in the converted model.
    Its error against them is FP8's: the weights' rounding (the original experts run on their weights rounded to
    e4m3 measure that part alone) and the activations' (of the same size), so it stays within 3x the weights' part; a
    wrong expert, order or weight would be off by the output's own size. The whole model's logits are not compared:
    FP8 error anywhere flips some top-k routings downstream, which moves them by more than any bound on the GEMMs."""
    model = tiny(kind)
    original = {n: copy.deepcopy(m) for n, m in model.named_modules() if n.endswith("mlp.experts")}
    routers = [m for n, m in model.named_modules() if n.endswith("mlp.gate")]
    report = fp8ext.convert(model)
    assert [g for _, (g, _, _) in report.experts] == [experts, experts]
    assert all(isinstance(model.get_submodule(name), Float8Experts) for name, _ in report.experts)
    assert [m for n, m in model.named_modules() if n.endswith("mlp.gate")] == routers  # the same router objects
    seen = {}
    hooks = [model.get_submodule(name).register_forward_hook(
        lambda mod, args, out, name=name: seen.__setitem__(name, (args, out))) for name, _ in report.experts]
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids).logits
        for hook in hooks:
            hook.remove()
        assert torch.isfinite(logits).all() and len(seen) == 2
        for name, (args, out) in seen.items():
            rounded = copy.deepcopy(original[name])  # its weights rounded to e4m3 on their own, per output row
            for w in (rounded.gate_up_proj, rounded.down_proj):
                q, scale = fp8ext.quantize_rowwise(w.reshape(-1, w.shape[-1]))
                w.copy_((q.float() * scale).view_as(w))
            want = original[name](*args)
            err, weights_part = ((x - want).norm() / want.norm() for x in (out, rounded(*args)))
            assert 0 < weights_part and err < 3 * weights_part, f"{name}: {err:.4f} against {weights_part:.4f}"


def quantize(x):
    return fp8ext.quantize_rowwise(x)


def test_float8_experts_equal_a_loop_of_scaled_mm_over_each_token_s_experts():
    model = tiny("qwen3_moe")
    experts = model.model.layers[0].mlp.experts
    f8 = Float8Experts(experts)
    gen = torch.Generator().manual_seed(2)
    T, k, G = 9, 2, 8
    x = torch.randn(T, 64, generator=gen)
    index = torch.stack([torch.randperm(G, generator=gen)[:k] for _ in range(T)])
    weights = torch.rand(T, k, generator=gen)
    got = f8(x, index, weights)
    q, s = quantize(x)
    want = torch.zeros(T, 64)
    for t in range(T):
        for j in range(k):
            e = int(index[t, j])
            h = fp8ext.scaled_mm(q[t:t + 1], f8.gate_up_weight[e].t(), s[t:t + 1], f8.gate_up_scale[e].view(1, -1),
                                 out_dtype=torch.float32)
            gate, up = h.chunk(2, dim=-1)
            q2, s2 = quantize(f8.act_fn(gate) * up)
            o = fp8ext.scaled_mm(q2, f8.down_weight[e].t(), s2, f8.down_scale[e].view(1, -1), out_dtype=torch.float32)
            want[t] += (o * weights[t, j])[0]
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_the_few_rows_and_the_many_rows_forward_give_the_same_bits(monkeypatch):
    """Float8Experts routes up to FEW_ROWS slots with moe_dispatch (its tokens gathered, then quantized), more with
    torch's sort (each token quantized once, its FP8 rows gathered). Both paths give the same output."""
    f8 = Float8Experts(tiny("qwen3_moe").model.layers[0].mlp.experts)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(11, 64, generator=gen)
    index = torch.stack([torch.randperm(8, generator=gen)[:2] for _ in range(11)])
    weights = torch.rand(11, 2, generator=gen)
    got = {}
    for rows in (0, 10_000):
        monkeypatch.setattr(fp8ext.moe, "FEW_ROWS", rows)
        got[rows] = f8(x, index, weights)
    assert torch.equal(got[0], got[10_000]) and got[0].abs().sum() > 0


def test_an_expert_id_out_of_range_makes_its_token_nan_on_both_paths(monkeypatch):
    """A router that hands an expert id outside [0, G] gets NaN for that token, on both the moe_dispatch path and the
    torch sort path, and the other tokens' outputs as if the bad slots were not there."""
    f8 = Float8Experts(tiny("qwen3_moe").model.layers[0].mlp.experts)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(5, 64, generator=gen)
    index = torch.stack([torch.randperm(8, generator=gen)[:2] for _ in range(5)])
    weights = torch.rand(5, 2, generator=gen)
    want = f8(x, index, weights)
    bad = index.clone()
    bad[1, 0], bad[3, 1] = 9, -1  # G = 8
    for rows in (0, 10_000):
        monkeypatch.setattr(fp8ext.moe, "FEW_ROWS", rows)
        got = f8(x, bad, weights)
        assert got[[1, 3]].isnan().all()
        # close, not equal: on CPU a group's float32 matmul may round differently when its row count changes
        torch.testing.assert_close(got[[0, 2, 4]], want[[0, 2, 4]])


def test_the_fused_silu_quantize_equals_the_activation_then_quantize_rowwise():
    """With SiLU, Float8Experts quantizes act(gate) * up in one op (silu_mul_quantize_rowwise); any other activation
    runs act_fn, the product and quantize_rowwise. On SiLU both give the same output."""
    f8 = Float8Experts(tiny("qwen3_moe").model.layers[0].mlp.experts)
    assert f8.silu
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(6, 64, generator=gen)
    index = torch.stack([torch.randperm(8, generator=gen)[:2] for _ in range(6)])
    weights = torch.rand(6, 2, generator=gen)
    fused = f8(x, index, weights)
    f8.silu = False
    assert torch.equal(f8(x, index, weights), fused)


def test_an_experts_forward_dispatches_no_more_than_5_ops_that_launch_kernels():
    """At decode an experts layer is a chain of small kernels whose number its time follows (fp8ext.moe): the ops
    it dispatches, views and empty allocations left out, stay at the 5 the module docstring counts (SiLU, routing
    weights in the output's dtype): moe_dispatch, two grouped GEMMs, silu_mul_quantize_rowwise, moe_combine."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name not in NO_LAUNCH and not _is_view(func):
                self.names.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    f8 = Float8Experts(tiny("qwen3_moe").model.layers[0].mlp.experts)
    x, index = torch.randn(1, 64, dtype=torch.bfloat16), torch.tensor([[3, 5]])
    weights = torch.rand(1, 2).to(torch.bfloat16)
    with Ops() as ops:
        f8(x, index, weights)
    assert len(ops.names) <= 5, ops.names


NO_LAUNCH = {"aten::empty_like", "aten::empty", "aten::empty_strided"}  # allocations only


def _is_view(func) -> bool:
    return any(a.alias_info is not None and not a.alias_info.is_write for a in func._schema.returns)


def test_experts_of_a_shape_the_op_cannot_take_are_skipped_with_the_reason():
    model = tiny("mixtral")
    experts = model.model.layers[0].mlp.experts
    experts.gate_up_proj = torch.nn.Parameter(experts.gate_up_proj[:, :40])  # I = 20: not a multiple of 16
    experts.down_proj = torch.nn.Parameter(experts.down_proj[:, :, :20])
    report = fp8ext.convert(model)
    assert [name for name, _ in report.experts] == ["model.layers.1.mlp.experts"]
    assert ("model.layers.0.mlp.experts",
            "hidden size 64 and expert intermediate size 20 must be multiples of 16") in report.skipped


def test_a_compiled_experts_layer_equals_the_eager_one():
    f8 = Float8Experts(tiny("qwen3_moe").model.layers[0].mlp.experts)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 64, generator=gen)
    index = torch.stack([torch.randperm(8, generator=gen)[:2] for _ in range(5)])
    weights = torch.rand(5, 2, generator=gen)
    compiled = torch.compile(f8, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x, index, weights), f8(x, index, weights))


def test_a_dtype_cast_of_the_converted_model_keeps_the_experts_fp8_weights():
    model = tiny("mixtral")
    report = fp8ext.convert(model)
    experts = model.get_submodule(report.experts[0][0])
    before = [p.clone() for p in (experts.gate_up_weight, experts.gate_up_scale)]
    model.to(torch.bfloat16)
    assert experts.gate_up_weight.dtype == torch.float8_e4m3fn and experts.down_scale.dtype == torch.float32
    assert torch.equal(experts.gate_up_weight.view(torch.uint8), before[0].view(torch.uint8))
    assert torch.equal(experts.gate_up_scale, before[1])
    with torch.no_grad():
        assert torch.isfinite(model(torch.randint(0, 128, (1, 5))).logits).all()


def test_expert_id_g_adds_nothing_on_both_paths_as_in_transformers_experts(monkeypatch):
    """transformers' expert parallelism routes a slot meant for another rank's expert to id G with weight 0, which
    its experts modules skip; a converted module does too, rather than give the token NaN."""
    experts = tiny("qwen3_moe").model.layers[0].mlp.experts
    f8 = Float8Experts(experts)
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(5, 64, generator=gen)
    index = torch.stack([torch.randperm(8, generator=gen)[:2] for _ in range(5)])
    weights = torch.rand(5, 2, generator=gen)
    other_rank = index.clone()
    other_rank[1, 0], other_rank[3] = 8, 8  # G = 8
    masked = weights.masked_fill(other_rank == 8, 0.0)
    with torch.no_grad():
        # transformers' own module, on valid ids with those slots' weights at 0 (the sum it means): outside expert
        # parallelism its grouped_mm path leaves id G's rows unwritten (it masks them only under EP): NaN at times
        reference = experts(x, index, masked)
    for rows in (0, 10_000):
        monkeypatch.setattr(fp8ext.moe, "FEW_ROWS", rows)
        got = f8(x, other_rank, masked)
        assert torch.equal(got[3], torch.zeros(64)) and got.isfinite().all()
        # close, not equal: on CPU a group's float32 matmul may round differently when its row count changes
        torch.testing.assert_close(got, f8(x, index, masked))
        assert (got - reference).norm() < 0.1 * reference.norm()  # FP8's error, not a missing or extra term


@pytest.mark.parametrize("change, reason", [
    ("gate", "its gating (Clamped._apply_gate) is not act_fn(gate) * up, which Float8Experts computes"),
    ("bias", "its experts have biases"),
    ("transposed", "its weights are stored transposed ([G, H, 2I])"),
    ("interleaved", "its gate and up rows are interleaved, not [gate; up]"),
    ("post_norm", "a norm follows each expert"),
])
def test_experts_computed_otherwise_than_float8experts_does_are_skipped_with_the_reason(change, reason):
    """transformers' experts modules that replace the gating (clamped SwiGLU: DeepSeek-V4, Step-3; float32 gating)
    or carry biases, transposed or interleaved weights, or a norm after each expert would come out silently wrong
    from Float8Experts' act_fn(gate) * up: they stay as they are."""
    model = tiny("qwen3_moe")
    experts = model.model.layers[0].mlp.experts
    if change == "gate":
        class Clamped(type(experts)):
            def _apply_gate(self, gate_up):
                gate, up = gate_up.chunk(2, dim=-1)
                return self.act_fn(gate.clamp(max=1.0)) * up.clamp(-1.0, 1.0)
        experts.__class__ = Clamped
    elif change == "bias":
        experts.gate_up_proj_bias = torch.nn.Parameter(torch.zeros(8, 64))
    else:
        attribute, value = {"transposed": ("is_transposed", True), "interleaved": ("is_concatenated", False),
                            "post_norm": ("has_post_expert_norm", True)}[change]
        setattr(experts, attribute, value)
    report = fp8ext.convert(model)
    assert ("model.layers.0.mlp.experts", reason) in report.skipped
    assert [name for name, _ in report.experts] == ["model.layers.1.mlp.experts"]
    with pytest.raises(ValueError, match=re.escape(f"fp8ext.Float8Experts: {reason}")):
        Float8Experts(experts)


def test_a_model_that_is_an_experts_module_is_reported_skipped():
    experts = tiny("mixtral").model.layers[0].mlp.experts
    report = fp8ext.convert(experts)
    assert report.skipped == [("", "the model itself is a stacked-experts module: use fp8ext.moe.Float8Experts")]


@pytest.mark.parametrize("case, error, message", [
    ("hidden_3d", ValueError, r"fp8ext.Float8Experts: hidden_states: expected \[T, 64\] \(the tokens, flattened\), "
                              r"got \[1, 5, 64\]"),
    ("index_rows", ValueError, r"fp8ext.Float8Experts: top_k_index: expected \[T, k\] with T = 5, got \[4, 2\]"),
    ("weights_shape", ValueError, r"fp8ext.Float8Experts: top_k_weights: expected top_k_index's shape \[5, 2\], "
                                  r"got \[5\]"),
    ("weights_grad", RuntimeError, "fp8ext.Float8Experts: top_k_weights: requires grad"),
])
def test_float8_experts_refuses_bad_inputs_before_any_work(case, error, message, monkeypatch):
    f8 = Float8Experts(tiny("qwen3_moe").model.layers[0].mlp.experts)
    x, index, weights = torch.randn(5, 64), torch.stack([torch.randperm(8)[:2] for _ in range(5)]), torch.rand(5, 2)
    if case == "hidden_3d":
        x = x.view(1, 5, 64)
    elif case == "index_rows":
        index = index[:4]
    elif case == "weights_shape":
        weights = weights[:, 0]
    else:
        weights.requires_grad_()

    def no_work(*args, **kwargs):
        raise AssertionError("dispatched before the inputs were checked")

    monkeypatch.setattr(fp8ext.moe, "moe_dispatch", no_work)
    monkeypatch.setattr(fp8ext.moe, "quantize_rowwise", no_work)
    with pytest.raises(error, match=message):
        f8(x, index, weights)
