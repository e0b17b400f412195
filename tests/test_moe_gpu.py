"""fp8ext.convert on a mixture-of-experts model on the GPU: a small random Qwen3-MoE in bfloat16, converted, each
Float8Experts (two grouped GEMMs) within FP8's error of the experts it replaced on the inputs it saw; its forward
never waits for the GPU and replays in a CUDA graph; expert id G (another rank's expert) adds nothing."""
import copy

import pytest
import torch

import fp8ext

pytest.importorskip("transformers")
from moe_models import tiny  # noqa: E402

pytestmark = pytest.mark.gpu


def converted():
    model = tiny("qwen3_moe").to("cuda", torch.bfloat16)
    original = {n: copy.deepcopy(m) for n, m in model.named_modules() if n.endswith("mlp.experts")}
    report = fp8ext.convert(model)
    return model, original, report


def test_each_experts_layer_stays_within_fp8_error_on_the_gpu():
    model, original, report = converted()
    seen = {}
    for name, _ in report.experts:
        model.get_submodule(name).register_forward_hook(lambda m, a, o, name=name: seen.__setitem__(name, (a, o)))
    with torch.no_grad():
        model(torch.randint(0, 128, (2, 12), device="cuda"))
        for name, (args, out) in seen.items():
            rounded = copy.deepcopy(original[name])
            for w in (rounded.gate_up_proj, rounded.down_proj):
                q, scale = fp8ext.quantize_rowwise(w.reshape(-1, w.shape[-1]))
                w.copy_((q.float() * scale).view_as(w))
            want = original[name](*args).float()
            err, weights_part = ((x.float() - want).norm() / want.norm() for x in (out, rounded(*args)))
            # + 0.01: both sides also round their intermediate and output to bf16 (2^-8 each)
            assert err < 3 * weights_part + 0.01, f"{name}: {err:.4f} against {weights_part:.4f}"


def test_an_experts_layer_never_waits_for_the_gpu_and_replays_in_a_cuda_graph():
    model, _, report = converted()
    experts = model.get_submodule(report.experts[0][0])
    x = torch.randn(6, 64, device="cuda", dtype=torch.bfloat16)
    index = torch.stack([torch.randperm(8, device="cuda")[:2] for _ in range(6)])
    weights = torch.rand(6, 2, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = experts(x, index, weights)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            experts(x, index, weights)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = experts(x, index, weights)
        graph.replay()
    assert torch.equal(captured, want)


def test_expert_id_g_adds_nothing_on_the_gpu_as_in_transformers_experts(monkeypatch):
    """transformers' expert parallelism routes slots meant for other ranks' experts to id G with weight 0; the CUDA
    route and combine kernels skip them, on both dispatch paths, as the experts module it replaced does."""
    model, original, report = converted()
    name = report.experts[0][0]
    experts, reference = model.get_submodule(name), original[name]
    gen = torch.Generator(device="cuda").manual_seed(9)
    x = torch.randn(6, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    index = torch.stack([torch.randperm(8, device="cuda", generator=gen)[:2] for _ in range(6)])
    valid = index.clone()
    index[1, 0], index[4] = 8, 8  # G = 8
    weights = torch.rand(6, 2, device="cuda", dtype=torch.bfloat16, generator=gen).masked_fill(index == 8, 0.0)
    with torch.no_grad():
        # transformers' module on valid ids with those slots' weights at 0 (the sum it means): outside expert
        # parallelism its grouped_mm path leaves id G's rows unwritten (it masks them only under EP)
        want = reference(x, valid, weights).float()
        for rows in (0, 10_000):  # the torch-sort path, then moe_dispatch
            monkeypatch.setattr(fp8ext.moe, "FEW_ROWS", rows)
            got = experts(x, index, weights).float()
            assert got.isfinite().all() and torch.equal(got[4], torch.zeros_like(got[4]))
            assert (got - want).norm() < 0.1 * want.norm()  # FP8's error, not a missing or extra term
