"""The dispatcher's choices, without a GPU: any CUDA build can say which kernel a call would run
(fp8ext.selected_kernel), so CI checks the cost model's picks here."""
import pytest
import torch

import fp8ext
from fp8ext.testing import kernel_dtypes, kernel_max_m

pytestmark = pytest.mark.skipif(not fp8ext.kernel_names() or bool(fp8ext.build_info().get("subset")),
                                reason="needs a CUDA build with every kernel (not CPU-only, not FP8EXT_KERNELS)")
OUT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TORCH = "torch._scaled_mm"


def check_kernel_computes(name, M, out_dtype, fast, a_dtype=torch.float8_e4m3fn):
    assert name is not None and name.split("@")[0] in fp8ext.kernel_names()
    kernel_out, kernel_fast, kernel_a = kernel_dtypes(name)
    assert kernel_out == out_dtype and (kernel_a == a_dtype or fp8ext.kernel_traits(name)["in_a"] == "any")
    assert fast or not kernel_fast  # a precise kernel may serve a fast call, never the reverse
    assert M <= (kernel_max_m(name) or M)


@pytest.mark.parametrize("M", [1, 3, 4, 5, 16, 64, 128, 129, 1024, 16384, 100000])
@pytest.mark.parametrize("N,K", [(4096, 4096), (2736, 1040), (106496, 16384), (16, 16)])
def test_choice_computes_the_call(M, N, K):
    for fast in (True, False):
        for out_dtype in OUT_DTYPES:
            # fp8ext's own pick (torch cannot take the call, e.g. it has a bias) always computes it
            check_kernel_computes(fp8ext.selected_kernel(M, N, K, out_dtype, fast, torch_ok=False), M, out_dtype, fast)
            # with the backstop, torch may take a bf16 call, never another output type
            name = fp8ext.selected_kernel(M, N, K, out_dtype, fast)
            if name == TORCH:
                assert out_dtype == torch.bfloat16
            else:
                check_kernel_computes(name, M, out_dtype, fast)


def test_e5m2_activations_choose_an_e5m2_kernel_or_a_decode_kernel():
    for M in (1, 300):
        name = fp8ext.selected_kernel(M, 4096, 4096, torch.bfloat16, True, torch.float8_e5m2)
        assert name != TORCH  # torch's row-wise path takes e4m3 only
        assert fp8ext.kernel_traits(name)["in_a"] in ("e5m2", "any")
    assert fp8ext.selected_kernel(300, 4096, 4096, torch.float16, True, torch.float8_e5m2) is None


def test_forcing_an_unknown_kernel_raises():
    with pytest.raises(RuntimeError, match="no kernel named 'nope'"):
        with fp8ext.force_kernel("nope"):
            pass


def test_scheduler_options_round_trip_and_bad_ones_raise():
    name = next(k for k in fp8ext.kernel_names() if k.startswith("pp_"))
    for opts in ("@M1", "@N4", "@H2", "@M8"):
        with fp8ext.force_kernel(name + opts):
            assert fp8ext.selected_kernel(4096, 4096, 4096) == name + opts
    with fp8ext.force_kernel(name + "@H8"):  # the defaults are written as the bare name
        assert fp8ext.selected_kernel(4096, 4096, 4096) == name
    for bad in ("@X4", "@N3", "@N16", "@", "@n4"):
        with pytest.raises(RuntimeError, match="not a raster"):
            with fp8ext.force_kernel(name + bad):
                pass
    with pytest.raises(RuntimeError, match="has no tile scheduler"):
        with fp8ext.force_kernel("gemv_m4_precise_bf16@N4"):
            pass


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
def test_capture_never_chooses_a_workspace_kernel(fast):
    # Inside CUDA-graph capture a call may allocate only its output, so no stream-K kernel (they need a
    # workspace); outside capture the model's own choice stands when it needs none.
    from fp8ext.zoo import LLAMA_M, LLAMA_NK
    for N, K in LLAMA_NK + [(2736, 1040), (106496, 16384)]:
        for M in sorted(set(LLAMA_M) | {4, 8, 100, 300}):
            eager = fp8ext.selected_kernel(M, N, K, torch.bfloat16, fast, torch_ok=False)
            captured = fp8ext.selected_kernel(M, N, K, torch.bfloat16, fast, capturing=True, torch_ok=False)
            assert not fp8ext.kernel_traits(captured)["workspace"], (M, N, K, captured)
            check_kernel_computes(captured, M, torch.bfloat16, fast)
            if not fp8ext.kernel_traits(eager)["workspace"]:
                assert captured == eager, (M, N, K)
