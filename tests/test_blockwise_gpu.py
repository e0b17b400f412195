"""Block-wise scaled fp8ext.scaled_mm on the GPU: every block-scaled kernel by name against float64 and bit exact,
the default dispatch, CUDA graphs, opcheck and torch.compile, torch._scaled_mm on the same tensors and the torch
backstop; the fused quantize's kernel against the CPU path."""
import re
import warnings

import pytest
import torch

import fp8ext
from fp8ext.testing import (assert_opcheck, blockwise_kernel_out_dtype, check_against_reference,
                            random_blockwise_operands, reference)

from blockwise_cases import (E4M3, OPCHECK_SAMPLES, OPCHECK_UTILS, QUANT_SHAPES, activations, built_kernels,
                             exact_blockwise_operands, padded_weight_scales, same_quantization)


DEV = "cuda"
GPU_SHAPES = [(1, 256, 256), (3, 576, 7168), (16, 7168, 2048), (17, 384, 512), (64, 4096, 7232),
              (127, 1536, 7168), (200, 256, 384), (1000, 7168, 2048)]


@pytest.mark.gpu
def test_build_has_blockwise_kernels_for_every_out_dtype():
    names = fp8ext.blockwise_kernel_names()
    assert names, "a CUDA build without block-scaled kernels"
    assert {blockwise_kernel_out_dtype(n) for n in names} == {torch.bfloat16, torch.float16, torch.float32}


@pytest.mark.gpu
@pytest.mark.parametrize("name", built_kernels() or ["<none built>"])
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
def test_every_kernel_against_float64(name, M, N, K):
    if ("_gemv_m4_" in name and M > 4) or ("_gemv_tc_" in name and M > 32):
        pytest.skip("a decode kernel computes M <= 4 (gemv_m4) or M <= 32 (gemv_tc)")
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    out_dtype = blockwise_kernel_out_dtype(name)
    bias = torch.randn(N, device=DEV).to(out_dtype) if M % 2 else None
    with fp8ext.force_kernel(name):
        out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=False, what=f"{name} {M}x{N}x{K}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", built_kernels() or ["<none built>"])
def test_every_kernel_bit_exact_small_integers(name):
    if blockwise_kernel_out_dtype(name) != torch.float32 and "_gemv_tc_" not in name:
        pytest.skip("bit-exactness is checked on fp32 output (the bf16-only gemv_tc: on bf16 output)")
    a, b, sa, sb = exact_blockwise_operands(4 if "_gemv_m4_" in name else 24 if "_gemv_tc_" in name else 40, 272,
                                            384, device=DEV)
    out_dtype = blockwise_kernel_out_dtype(name)
    with fp8ext.force_kernel(name):
        out = fp8ext.scaled_mm(a, b, sa, sb, out_dtype=out_dtype)
    # The exact sum is an fp32 value here, so rounding it once to the output type is the only rounding allowed.
    assert torch.equal(out, reference(a, b, sa, sb).to(out_dtype))


def _overlap_twin(name):
    """The CUTLASS-mainloop kernel an `_ov_` kernel must match bit for bit: the same name without `_ov` (and without
    a swizzle `_swN`), else the same tile and schedule in a 1x1 cluster (a cluster or a swizzle changes which SM
    computes a tile, not the arithmetic)."""
    names = built_kernels()
    twin = re.sub(r"_sw\d+_", "_", name.replace("_ov_", "_"))
    if twin not in names:
        twin = re.sub(r"_c\dx\d_", "_c1x1_", twin)
    return twin if twin in names else None


@pytest.mark.gpu
@pytest.mark.parametrize("name", [k for k in built_kernels() if "_ov_" in k] or ["<none built>"])
@pytest.mark.parametrize("M,N,K", [(17, 384, 112), (40, 272, 384), (300, 640, 1008), (1000, 1152, 7168)])
def test_overlapped_mainloop_is_bit_identical_to_cutlass(name, M, N, K):
    # overlap_blockwise_mainloop.cuh reorders when the scaling runs, not what it computes: on random operands
    # (1, 3, 8 and 56 K tiles, so every path of its two-tile loop; K and M residues) it must equal CUTLASS's.
    twin = _overlap_twin(name)
    if twin is None:
        pytest.skip(f"no CUTLASS-mainloop twin of {name} in this build")
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    bias = torch.randn(N, device=DEV).to(torch.bfloat16)
    with fp8ext.force_kernel(name):
        out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias)
    with fp8ext.force_kernel(twin):
        ref = fp8ext.scaled_mm(a, b, sa, sb, bias=bias)
    assert torch.equal(out, ref), f"{name} differs from {twin}"


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 7, 16, 31, 64, 100, 128, 384, 2048, 4100])
def test_default_dispatch_against_float64(M):
    a, b, sa, sb = random_blockwise_operands(M, 2048, 1536, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what=f"dispatch M={M}")
    assert fp8ext.selected_blockwise_kernel(M, 2048, 1536) in fp8ext.blockwise_kernel_names() + ["torch._scaled_mm"]


@pytest.mark.gpu
def test_gemv_is_forced_only_where_it_computes():
    a, b, sa, sb = random_blockwise_operands(5, 256, 256, device=DEV)
    with fp8ext.force_kernel("bw_gemv_m4_bf16"), pytest.raises(RuntimeError, match="computes M <= 4, not M = 5"):
        fp8ext.scaled_mm(a, b, sa, sb)
    # The dispatch picks a decode kernel only where it computes (the CUDA-core gemv up to M = 4, the tensor-core
    # one up to 32), and at M = 1 on a large weight, where it is far faster than any tile kernel.
    assert fp8ext.selected_blockwise_kernel(5, 256, 256) != "bw_gemv_m4_bf16"
    assert "_gemv_" not in fp8ext.selected_blockwise_kernel(33, 4096, 7168)
    assert "_gemv_" in fp8ext.selected_blockwise_kernel(1, 4096, 7168)


@pytest.mark.gpu
def test_contiguous_and_torch_scale_layouts_agree():
    a, b, sa, sb = random_blockwise_operands(33, 1024, 1024, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    assert torch.equal(fp8ext.scaled_mm(a, b, sa.contiguous(), padded_weight_scales(sb)), out)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [4, 256])
def test_cuda_graph_replay(M):
    a, b, sa, sb = random_blockwise_operands(M, 1024, 2048, device=DEV)
    fp8ext.scaled_mm(a, b, sa, sb)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8ext.scaled_mm(a, b, sa, sb)
    for _ in range(2):
        a2, b2, sa2, sb2 = random_blockwise_operands(M, 1024, 2048, device=DEV)
        for dst, src in ((a, a2), (b, b2), (sa, sa2), (sb, sb2)):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what="graph replay")


@pytest.mark.gpu
@pytest.mark.parametrize("sample", list(OPCHECK_SAMPLES))
def test_opcheck_cuda(sample):
    make, kwargs = OPCHECK_SAMPLES[sample]
    args = [t.to(DEV) for t in make()]
    kwargs = {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    assert_opcheck(torch.ops.fp8ext.scaled_mm.default, args, kwargs, test_utils=OPCHECK_UTILS)


@pytest.mark.gpu
def test_compile_fullgraph_cuda():
    x = torch.randn(64, 2048, device=DEV, dtype=torch.bfloat16)
    wq, sw = fp8ext.quantize_blockwise(torch.randn(1024, 2048, device=DEV), block=(128, 128))

    def f(x):
        xq, sx = fp8ext.quantize_blockwise(x)
        return fp8ext.scaled_mm(xq, wq.t(), sx, sw.t())

    eager, compiled = f(x), torch.compile(f, fullgraph=True)(x)
    # Inductor fuses the quantize's ops into its own kernels; an FP8 rounding may land the other way now and then.
    assert ((compiled.float() - eager.float()).norm() / eager.float().norm()).item() < 2.0**-6


@pytest.mark.gpu
def test_matches_torch_scaled_mm_blockwise():
    # Same tensors, torch's layouts. Where this torch's _scaled_mm has no block-wise path, the test says so.
    a, b, sa, sb = random_blockwise_operands(256, 1024, 2048, device=DEV)
    try:
        ref = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm takes no block-wise scales here: {str(e).splitlines()[0]}")
    out = fp8ext.scaled_mm(a, b, sa, sb)
    check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what="fp8ext next to torch blockwise")
    # Both round the same sums to bf16: they agree to about bf16's precision, with the layouts read alike.
    assert ((out.float() - ref.float()).norm() / ref.float().norm()).item() < 2.0**-7


def _torch_blockwise_or_skip():
    if not torch.__version__.startswith("2.11."):
        pytest.skip("the block-wise backstop is on with torch 2.11 only, the release it was measured with")
    a, b, sa, sb = random_blockwise_operands(128, 256, 256, device=DEV)
    try:
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm takes no block-wise scales here: {str(e).splitlines()[0]}")


# Large problems, where cuBLASLt's block-wise kernels beat fp8ext's on every tuning row: the dispatch must hand at
# least one of them to torch.
BACKSTOP_SHAPES = [(4096, 7168, 7168), (16384, 7168, 2048), (4096, 36864, 7168), (1024, 24576, 1536)]


def _backstop_shape():
    shape = next((s for s in BACKSTOP_SHAPES if fp8ext.selected_blockwise_kernel(*s) == "torch._scaled_mm"), None)
    assert shape is not None, "the block-wise dispatch hands none of the large problems to torch"
    return shape


@pytest.mark.gpu
def test_backstop_runs_torch_on_the_same_tensors():
    _torch_blockwise_or_skip()
    M, N, K = _backstop_shape()
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    # The very call torch makes, on the same tensors (torch takes no fast accumulation with block-wise scales).
    assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))
    rows = torch.randperm(M, device=DEV)[:64]
    check_against_reference(out[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what="block-wise backstop")
    # What torch cannot take as given runs on a kernel, within the same bound: a bias, scales not in torch's
    # layouts, an M that is not a multiple of 4. Had any of them reached torch, torch would have refused it and
    # the backstop would be off now (test_backstop_refused_by_torch_falls_back_to_the_kernels).
    bias = torch.randn(N, device=DEV).to(torch.bfloat16)
    assert fp8ext.selected_blockwise_kernel(M, N, K, torch_ok=False) in fp8ext.blockwise_kernel_names()
    cases = {"bias": ((a, b, sa, sb), bias),
             "scales in other layouts": ((a, b, sa.contiguous(), padded_weight_scales(sb)), None),
             "M - 2": ((a[:-2], b, sa[:-2], sb), None)}
    some = torch.randperm(M - 2, device=DEV)[:64]
    for what, ((a_, b_, sa_, sb_), bias_) in cases.items():
        got = fp8ext.scaled_mm(a_, b_, sa_, sb_, bias=bias_)
        check_against_reference(got[some], a_[some], b_, sa_[some], sb_, bias_, use_fast_accum=False,
                                what=f"block-wise, {what}")
    assert fp8ext.selected_blockwise_kernel(M, N, K) == "torch._scaled_mm"
    # And nothing goes to torch with the backstop off.
    backends = fp8ext.backends()
    try:
        fp8ext.set_backends("fp8ext")
        assert fp8ext.selected_blockwise_kernel(M, N, K) in fp8ext.blockwise_kernel_names()
        own = fp8ext.scaled_mm(a, b, sa, sb)
        check_against_reference(own[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what="backstop off")
    finally:
        fp8ext.set_backends(backends)


@pytest.mark.gpu
def test_backstop_in_cuda_graph():
    _torch_blockwise_or_skip()
    M, N, K = _backstop_shape()
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    assert fp8ext.selected_blockwise_kernel(M, N, K, capturing=True) == "torch._scaled_mm"
    fp8ext.scaled_mm(a, b, sa, sb)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8ext.scaled_mm(a, b, sa, sb)
    a2, b2, sa2, sb2 = random_blockwise_operands(M, N, K, device=DEV)
    for dst, src in ((a, a2), (b, b2), (sa, sa2), (sb, sb2)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))


@pytest.fixture
def plant():
    yield fp8ext.testing.plant_fault
    fp8ext.testing.plant_fault("")  # also turns the backstop back on after a refusal


@pytest.mark.gpu
@pytest.mark.parametrize("K", [7104, 4032])
def test_backstop_with_a_partial_last_k_group(K):
    # K % 128 = 64 and 64 with K / 128 rounded up a multiple of 4 (56, 32): torch computes these right (measured on
    # the H200), and the backstop may take them.
    _torch_blockwise_or_skip()
    M, N = 4096, 7168
    if fp8ext.selected_blockwise_kernel(M, N, K) != "torch._scaled_mm":
        pytest.skip(f"the dispatch runs {M}x{N}x{K} on a kernel")
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    rows = torch.randperm(M, device=DEV)[:64]
    check_against_reference(out[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what=f"backstop K={K}")


@pytest.mark.gpu
def test_backstop_never_hands_torch_a_shape_it_gets_wrong():
    # torch 2.11 returns a wrong result, without an error, where K / 128 is not a multiple of 4 (here 23 groups).
    M, N, K = 4096, 7168, 2880
    assert fp8ext.selected_blockwise_kernel(M, N, K) in fp8ext.blockwise_kernel_names()
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    rows = torch.randperm(M, device=DEV)[:64]
    check_against_reference(out[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what="K / 128 = 23")


@pytest.mark.gpu
def test_backstop_refused_by_torch_falls_back_to_the_kernels(plant, capfd):
    # A torch whose block-wise checks differ from 2.11's refuses a call the backstop admitted: fp8ext warns once,
    # computes the call on its kernels, and hands torch no more block-wise calls.
    _torch_blockwise_or_skip()
    M, N, K = _backstop_shape()
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    plant("blockwise=refused")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fp8ext.scaled_mm(a, b, sa, sb)
    # A C++ warning reaches Python's warnings module where torch installs its handler, else torch prints it to
    # stderr.
    said = " ".join(str(w.message) for w in caught) + capfd.readouterr().err
    assert said.count("torch._scaled_mm refused a block-wise call") == 1, said[-2000:]
    rows = torch.randperm(M, device=DEV)[:64]
    check_against_reference(out[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what="after a refusal")
    assert fp8ext.selected_blockwise_kernel(M, N, K) in fp8ext.blockwise_kernel_names()
    plant("")
    assert fp8ext.selected_blockwise_kernel(M, N, K) == "torch._scaled_mm"
    # Out of memory is the caller's, not a refusal.
    plant("blockwise=oom")
    with pytest.raises(torch.OutOfMemoryError, match="planted by fp8ext._testing_fault"):
        fp8ext.scaled_mm(a, b, sa, sb)
    assert fp8ext.selected_blockwise_kernel(M, N, K) == "torch._scaled_mm"


@pytest.mark.gpu
def test_forced_kernel_kinds_do_not_mix():
    a, b, sa, sb = random_blockwise_operands(16, 256, 256, device=DEV)
    row = fp8ext.kernel_names()[0]
    with fp8ext.force_kernel(row), pytest.raises(RuntimeError, match="does not compute this block-wise call"):
        fp8ext.scaled_mm(a, b, sa, sb)
    ra, rb = a, b
    rsa, rsb = torch.rand(16, 1, device=DEV), torch.rand(1, 256, device=DEV)
    with fp8ext.force_kernel(fp8ext.blockwise_kernel_names()[0]), \
            pytest.raises(RuntimeError, match="takes block-wise scales and does not compute this call"):
        fp8ext.scaled_mm(ra, rb, rsa, rsb)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fp8", [E4M3, torch.float8_e5m2])
@pytest.mark.parametrize("M,K", QUANT_SHAPES + [(1000, 7168), (4, 29568), (6, 1040)])
def test_quantize_blockwise_kernel_equals_the_cpu_path(M, K, dtype, fp8):
    x = activations(M, K, dtype, device=DEV)
    got = torch.ops.fp8ext.quantize_blockwise(x, fp8)
    assert got[0].device.type == "cuda" and got[1].device.type == "cuda"
    same_quantization(got, torch.ops.fp8ext.quantize_blockwise(x.cpu(), fp8))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_quantize_blockwise_kernel_rows_apart_and_unaligned(dtype):
    # Rows a vector access apart (one load a lane) and rows that are not (four loads a lane), and a base pointer
    # off the vector's alignment: the same bits as the CPU path.
    wide = activations(37, 1030, dtype, device=DEV)
    for x in (wide[:, :1024], wide[:, 2:514], wide[:, 4:516], wide[:1, 2:514]):
        same_quantization(torch.ops.fp8ext.quantize_blockwise(x), torch.ops.fp8ext.quantize_blockwise(x.cpu()))


@pytest.mark.gpu
def test_quantize_blockwise_kernel_in_graphs_compile_and_opcheck():
    # opcheck compares eager and traced outputs with torch's allclose, where NaN != NaN: finite inputs there.
    torch.library.opcheck(torch.ops.fp8ext.quantize_blockwise.default, (torch.randn(8, 7168, device=DEV).bfloat16(),))
    x = activations(8, 7168, torch.bfloat16, device=DEV)
    fp8ext.quantize_blockwise(x)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q, s = fp8ext.quantize_blockwise(x)
    for _ in range(2):
        x.copy_(activations(8, 7168, torch.bfloat16, device=DEV))
        graph.replay()
        torch.cuda.synchronize()
        same_quantization((q, s), torch.ops.fp8ext.quantize_blockwise(x.cpu()))
    compiled = torch.compile(lambda t: fp8ext.quantize_blockwise(t), fullgraph=True)
    same_quantization(compiled(x), torch.ops.fp8ext.quantize_blockwise(x))
