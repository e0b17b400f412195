"""Production robustness on the GPU (issue 3): threads and streams, torch.compile modes, CUDA graphs over every
dispatch path, and numerics at the edges (NaN rows, inf/0 scales against torch._scaled_mm)."""
import threading

import pytest
import torch

import fp8ext
from fp8ext.testing import check_against_reference, random_operands

pytestmark = pytest.mark.gpu
DEV = "cuda"
E4M3 = torch.float8_e4m3fn


def inputs(M, N, K):
    return random_operands(M, N, K, device=DEV)


def test_threads_on_their_own_streams():
    shapes = [(1, 4096, 4096), (64, 2736, 1040), (300, 1040, 2736), (2048, 1040, 1040)]
    errors = []

    def work(M, N, K, seed):
        try:
            torch.manual_seed(seed)
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(5):
                    a, b, sa, sb = inputs(M, N, K)
                    out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
                    stream.synchronize()
                    check_against_reference(out, a, b, sa, sb, use_fast_accum=True, what=f"thread {M}x{N}x{K}")
        except Exception as e:  # collected and asserted in the main thread
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(*s, i)) for i, s in enumerate(shapes * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# Shapes that land on each kind of kernel: GEMV, swapped pingpong, stream-K candidates, large tiles.
GRAPH_CASES = [(1, 4096, 4096, True), (16, 2736, 1040, True), (128, 4096, 14336, True), (2048, 4096, 4096, True),
               (1024, 8192, 8192, False), (64, 1040, 2736, False)]


@pytest.mark.parametrize("M,N,K,fast", GRAPH_CASES)
def test_graph_capture_every_path(M, N, K, fast):
    a, b, sa, sb = inputs(M, N, K)
    bias = torch.randn(N, device=DEV).bfloat16()
    fp8ext.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=fast)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    allocs_before = torch.cuda.memory_stats()["allocation.all.allocated"]
    with torch.cuda.graph(graph):
        out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=fast)
    allocs = torch.cuda.memory_stats()["allocation.all.allocated"] - allocs_before
    assert allocs == 1, f"{allocs} allocations inside capture ({fp8ext.selected_kernel(M, N, K, use_fast_accum=fast)})"
    for _ in range(2):
        a2, b2, sa2, sb2 = inputs(M, N, K)
        a.copy_(a2), b.copy_(b2), sa.copy_(sa2), sb.copy_(sb2)
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=fast, what=f"graph {M}x{N}x{K}")


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_reduce_overhead(dynamic):
    torch._dynamo.reset()
    f = torch.compile(lambda a, b, sa, sb: fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True),
                      mode="reduce-overhead", fullgraph=True, dynamic=dynamic)
    for M in (16, 48, 16):
        a, b, sa, sb = inputs(M, 1040, 2736)
        for _ in range(3):  # warm-up runs, then graph replays
            out = f(a, b, sa, sb).clone()
        check_against_reference(out, a, b, sa, sb, use_fast_accum=True, what=f"reduce-overhead M={M}")


@pytest.mark.parametrize("M", [1, 17, 300])
def test_nan_in_a_row_stays_in_that_row(M):
    N, K = 1040, 2736
    a, b, sa, sb = inputs(M, N, K)
    row = M // 2
    a_bits = a.view(torch.uint8).clone()
    a_bits[row, 5] = 0x7F  # e4m3 NaN
    a = a_bits.view(E4M3)
    for fast in (True, False):
        out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)
        assert out[row].isnan().all()
        others = torch.cat([out[:row], out[row + 1:]])
        assert not others.isnan().any()


def test_inf_and_zero_scales_match_torch():
    M, N, K = 64, 1040, 1040
    a, b, sa, sb = inputs(M, N, K)
    sa[3, 0], sa[7, 0] = float("inf"), 0.0
    sb[0, 11] = float("inf")
    for fast in (True, False):
        ours = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast).float()
        theirs = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast).float()
        assert torch.equal(ours.isnan(), theirs.isnan())
        assert torch.equal(ours.isinf(), theirs.isinf())
        assert torch.equal(torch.sign(ours[ours.isinf()]), torch.sign(theirs[theirs.isinf()]))
