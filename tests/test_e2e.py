"""fp8ext.e2e (the model suite of fp8ext.bench): its comparison logic on CPU, on a tiny Llama (the ops' CPU paths
stand in for the kernels), a repeatable decode step, and its refusal without an sm_90 GPU."""
import pytest
import torch

pytest.importorskip("transformers")
from fp8ext import e2e  # noqa: E402
from fp8ext.nn import Float8Linear  # noqa: E402
from fp8ext.testing import torch_cpu_takes_rowwise_scales  # noqa: E402

# The comparison runs torch._scaled_mm row-wise as a peer: on CPU only where this torch takes row-wise scales.
needs_cpu_rowwise = pytest.mark.skipif(not torch_cpu_takes_rowwise_scales(),
                                       reason="this torch's CPU torch._scaled_mm takes per-tensor scales only")


@needs_cpu_rowwise
def test_tiny_comparison_on_cpu():
    result = e2e.compare("tiny", layers=2, vocab=256, device="cpu", prefill_shapes=[(2, 16)], decode_batches=[2],
                         ctx=8, timed=False, torchao=False)
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
def test_peer_matches_float8linear():
    f8 = Float8Linear.from_linear(torch.nn.Linear(64, 32, dtype=torch.bfloat16))
    x = torch.randn(3, 5, 64).bfloat16()
    with torch.inference_mode():
        torch.testing.assert_close(e2e.TorchRowwiseLinear(f8)(x), f8(x), rtol=1e-2, atol=1e-2)


def test_decode_step_repeats():
    # Timing and CUDA graphs call the step again and again: it must write the same cache slot every time.
    model = e2e.build_model("tiny", 1, 256, "cpu")
    with torch.inference_mode():
        step = e2e.decode_step(model, 2, 8, 256, "cpu")
        first = step().clone()
        for _ in range(3):
            torch.testing.assert_close(step(), first, rtol=0, atol=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_in_one_line_without_a_gpu(capsys):
    assert e2e.main([]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fp8ext.bench --suite model: needs an H100/H200 (sm_90)")
