"""Programmatic dependent launch (csrc/sm90/common/grid_dependency.cuh): the activation quantize and the decode
GEMMs may start before the kernel ahead of them in the stream has finished, and touch nothing but L2 prefetches of
the weight until their wait. These tests write every input with the kernels just before the GEMM, eagerly and inside
CUDA graphs, and check that each result is computed from the new values; and that the outputs do not depend on
whether PDL is on (FP8EXT_PDL=0)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import fp8ext
from fp8ext.testing import (blockwise_kernel_out_dtype, check_against_reference, kernel_dtypes, kernel_max_m,
                            random_blockwise_operands, random_operands)

pytestmark = pytest.mark.gpu

DEV = "cuda"
ROWWISE_DECODE = [n for n in fp8ext.kernel_names() if n.startswith("gemv_")]
BLOCKWISE_DECODE = [n for n in fp8ext.blockwise_kernel_names() if "_gemv_" in n]
N, K = 2736, 7168  # a long weight read per row; N not a multiple of a block's rows


def _max_m(name):
    if name in BLOCKWISE_DECODE:
        return 4 if "_gemv_m4" in name else 32
    return kernel_max_m(name)


def _call_kwargs(name):
    """The out dtype and accumulation a forced kernel computes."""
    if name in BLOCKWISE_DECODE:
        return {"out_dtype": blockwise_kernel_out_dtype(name)}
    out, fast, _ = kernel_dtypes(name)
    return {"out_dtype": out, "use_fast_accum": fast}


def _operands(name, M):
    if name in BLOCKWISE_DECODE:
        return random_blockwise_operands(M, N, K, device=DEV)
    return random_operands(M, N, K, device=DEV)


class Buffers:
    """Inputs that the test rewrites in place before each call: the weight kept as [N, K] (b is its transpose)."""

    def __init__(self, name, a, b, sa, sb):
        self.kwargs = _call_kwargs(name)
        self.a, self.w, self.sa, self.sb = (torch.empty_like(a), torch.empty_like(b.t()), torch.empty_like(sa),
                                            torch.empty_like(sb))
        assert self.sa.stride() == sa.stride() and self.sb.stride() == sb.stride()

    def write(self, a, b, sa, sb, weight_last):
        # The last copy is the kernel right before the GEMM in the stream.
        self.sa.copy_(sa), self.sb.copy_(sb)
        if weight_last:
            self.a.copy_(a), self.w.copy_(b.t())
        else:
            self.w.copy_(b.t()), self.a.copy_(a)

    def call(self):
        return fp8ext.scaled_mm(self.a, self.w.t(), self.sa, self.sb, **self.kwargs)


@pytest.mark.parametrize("weight_last", [True, False], ids=["weight_written_last", "activation_written_last"])
@pytest.mark.parametrize("name", ROWWISE_DECODE + BLOCKWISE_DECODE or ["<no decode kernel built>"])
def test_decode_kernel_reads_what_the_previous_kernel_wrote(name, weight_last):
    for M in sorted({1, _max_m(name)}):
        bufs = Buffers(name, *_operands(name, M))
        with fp8ext.force_kernel(name):
            for turn in range(3):
                a, b, sa, sb = _operands(name, M)
                bufs.write(a, b, sa, sb, weight_last)
                out = bufs.call()
                check_against_reference(out, a, b, sa, sb, use_fast_accum=bufs.kwargs.get("use_fast_accum", False),
                                        what=f"{name} M={M} turn {turn}")


@pytest.mark.parametrize("name", ROWWISE_DECODE + BLOCKWISE_DECODE or ["<no decode kernel built>"])
def test_decode_kernel_in_a_cuda_graph_reads_new_inputs_on_replay(name):
    M = _max_m(name)
    src = [t.clone() for t in _operands(name, M)]
    bufs = Buffers(name, *src)
    with fp8ext.force_kernel(name):
        bufs.write(*src, weight_last=True)
        bufs.call()  # warm up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            bufs.write(*src, weight_last=True)
            out = bufs.call()
    for turn in range(3):
        new = _operands(name, M)
        for s, n in zip(src, new):
            s.copy_(n)
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(out, *new, use_fast_accum=bufs.kwargs.get("use_fast_accum", False),
                                what=f"{name} graph replay {turn}")


@pytest.mark.parametrize("M", [1, 4, 8, 16, 32])
def test_float8linear_decode_equals_quantize_then_gemm_after_a_sync(M):
    # Inside Float8Linear the quantize is the kernel right before the GEMM, and it lets the GEMM start early.
    linear = torch.nn.Linear(4096, 6144, bias=True, device=DEV, dtype=torch.bfloat16)
    layer = fp8ext.nn.Float8Linear.from_linear(linear)
    for turn in range(3):
        x = torch.randn(M, 4096, device=DEV, dtype=torch.bfloat16) * (turn + 1)
        y = layer(x)
        xq, xs = fp8ext.quantize_rowwise(x)
        torch.cuda.synchronize()
        want = fp8ext.scaled_mm(xq, layer.weight.t(), xs, layer.weight_scale, bias=layer.bias,
                                use_fast_accum=layer.use_fast_accum)
        torch.cuda.synchronize()
        assert torch.equal(y, want), f"M={M} turn {turn}"


_SCRIPT = textwrap.dedent("""
    import sys, torch, fp8ext
    torch.manual_seed(1234)
    outs = []
    for M in (1, 8, 32):
        linear = torch.nn.Linear(4096, 6144, device="cuda", dtype=torch.bfloat16)
        layer = fp8ext.nn.Float8Linear.from_linear(linear)
        x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
        outs.append(layer(x).cpu())
    torch.save(outs, sys.argv[1])
""")


def test_outputs_do_not_depend_on_dependent_launch(tmp_path):
    paths = {}
    for pdl in ("1", "0"):
        paths[pdl] = tmp_path / f"pdl{pdl}.pt"
        env = dict(os.environ, FP8EXT_PDL=pdl)
        subprocess.run([sys.executable, "-c", _SCRIPT, str(paths[pdl])], env=env, check=True, timeout=300)
    on, off = torch.load(paths["1"]), torch.load(paths["0"])
    assert len(on) == len(off) == 3
    for a, b in zip(on, off):
        assert torch.equal(a, b)


_FIRST_CALL_IN_CAPTURE = textwrap.dedent("""
    import sys, torch, fp8ext
    from fp8ext.testing import check_against_reference, random_operands
    names = [n for n in fp8ext.kernel_names() if n.startswith("gemv_") and n.endswith("_bf16")]
    assert names
    fp8ext.scaled_mm(*random_operands(64, 256, 256, device="cuda"))  # the op's own first call (M = 64: no GEMV)
    torch.cuda.synchronize()
    for name in names:
        a, b, sa, sb = random_operands(4, 2736, 4096, device="cuda")
        fast = "_fast_" in name
        graph = torch.cuda.CUDAGraph()
        with fp8ext.force_kernel(name), torch.cuda.graph(graph):  # the kernel's first call in this process
            out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(out, a, b, sa, sb, use_fast_accum=fast, what=name)
    print("ok", len(names))
""")


def test_a_decode_kernel_first_called_inside_a_capture():
    # The launch asks the occupancy API once per kernel (first_wave_blocks): that first call may happen while a
    # stream captures, in a fresh process.
    done = subprocess.run([sys.executable, "-c", _FIRST_CALL_IN_CAPTURE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok ")
