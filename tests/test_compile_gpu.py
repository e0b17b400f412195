"""fp8ext.compile on an sm_90 GPU: a compiled torch._scaled_mm runs what Inductor's autotuner chose among its own
candidates and fp8ext's, and equals that candidate's eager result bit for bit; fullgraph, a dynamic M, CUDA graphs
(mode reduce-overhead), the FX graph cache hit in a second process, and the named-kernel op itself."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import fp8ext
from fp8ext.testing import random_blockwise_operands, random_operands

pytestmark = pytest.mark.gpu
WITH_KERNEL = torch.ops.fp8ext._scaled_mm_with_kernel.default if fp8ext.kernel_names() else None


def scaled_mm(a, w, scale_a, scale_b):
    return torch._scaled_mm(a, w.t(), scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=True)


def eager_of(chosen: str, a, b, sa, sb, fast=True):
    """The eager result of what a compiled call chose."""
    if chosen == "aten":
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    if chosen.startswith("triton_"):
        return None  # a Triton template: no eager twin
    return WITH_KERNEL(a, b, sa, sb, None, torch.bfloat16, fast, "" if chosen == "fp8ext" else chosen)


def test_the_named_kernel_op_equals_forcing_it():
    a, b, sa, sb = random_operands(48, 4096, 2048, device="cuda")
    for name in fp8ext.selected_kernel(48, 4096, 2048, explain=True)["ranking"][:3]:
        with fp8ext.force_kernel(name["kernel"]):
            want = fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
        assert torch.equal(WITH_KERNEL(a, b, sa, sb, None, torch.bfloat16, True, name["kernel"]), want)
    assert torch.equal(WITH_KERNEL(a, b, sa, sb, None, torch.bfloat16, True, ""),
                       fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True))
    with pytest.raises(RuntimeError, match="does not compute this call"):
        WITH_KERNEL(a, b, sa, sb, None, torch.float16, True, fp8ext.selected_kernel(48, 4096, 2048))
    blockwise = random_blockwise_operands(48, 2048, 1536, device="cuda")
    name = fp8ext.selected_blockwise_kernel(48, 2048, 1536, torch_ok=False)
    with fp8ext.force_kernel(name):
        want = fp8ext.scaled_mm(*blockwise)
    assert torch.equal(WITH_KERNEL(*blockwise, None, torch.bfloat16, False, name), want)


@pytest.mark.parametrize("mode", ["default", "max-autotune-no-cudagraphs"])
@pytest.mark.parametrize("M", [1, 16, 2048])
def test_a_compiled_scaled_mm_runs_the_chosen_candidate_and_equals_it(M, mode):
    """Under max-autotune the choice among fp8ext's, ATen's and the Triton templates is settled in the scheduler."""
    a, b, sa, sb = random_operands(M, 4096, 4096, device="cuda")
    torch._dynamo.reset()
    with fp8ext.compile.enabled():
        out, code = run_and_get_code(torch.compile(scaled_mm, mode=mode, fullgraph=True), a, b.t(), sa, sb)
    chosen = fp8ext.compile.chosen(code)
    assert len(chosen) == 1
    want = eager_of(chosen[0], a, b, sa, sb)
    assert want is None or torch.equal(out, want), chosen
    if M <= 16:  # decode sizes, where fp8ext's kernels are well ahead of cuBLASLt
        assert chosen[0] not in ("aten",) and not chosen[0].startswith("triton_"), chosen


def test_a_compiled_blockwise_scaled_mm_runs_the_chosen_candidate_and_equals_it():
    """Block-wise scales (1 x 128 groups of a, 128 x 128 blocks of b): fp8ext offers its block-wise dispatch's
    kernel beside ATen's."""
    a, b, sa, sb = random_blockwise_operands(16, 2048, 1536, device="cuda")
    torch._dynamo.reset()
    with fp8ext.compile.enabled():
        compiled = torch.compile(lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
                                 fullgraph=True)
        out, code = run_and_get_code(compiled, a, b, sa, sb)
    chosen = fp8ext.compile.chosen(code)
    assert len(chosen) == 1, code
    want = eager_of(chosen[0], a, b, sa, sb, fast=False)
    assert want is None or torch.equal(out, want), chosen


def test_a_dynamic_m_and_cuda_graphs():
    K = N = 4096
    _, b, _, sb = random_operands(1, N, K, device="cuda")
    torch._dynamo.reset()
    with fp8ext.compile.enabled():
        a, _, sa, _ = random_operands(24, N, K, device="cuda")
        torch._dynamo.mark_dynamic(a, 0)
        torch._dynamo.mark_dynamic(sa, 0)
        dynamic = torch.compile(scaled_mm, fullgraph=True)
        out, code = run_and_get_code(dynamic, a, b.t(), sa, sb)
        chosen = fp8ext.compile.chosen(code)
        for M in (3, 24, 100):
            a, _, sa, _ = random_operands(M, N, K, device="cuda")
            want = eager_of(chosen[0], a, b, sa, sb)
            assert want is None or torch.equal(dynamic(a, b.t(), sa, sb), want), chosen
        torch._dynamo.reset()
        a, _, sa, _ = random_operands(8, N, K, device="cuda")
        graphed = torch.compile(scaled_mm, mode="reduce-overhead", fullgraph=True)
        first, code = run_and_get_code(graphed, a, b.t(), sa, sb)
        outs = [first.clone()] + [graphed(a, b.t(), sa, sb).clone() for _ in range(3)]  # replays
        want = eager_of(fp8ext.compile.chosen(code)[0], a, b, sa, sb)
        assert all(torch.equal(o, outs[0]) for o in outs)
        assert want is None or torch.equal(outs[0], want)


CHILD = textwrap.dedent("""
    import json, sys, torch, fp8ext
    import torch._inductor.select_algorithm as select_algorithm
    from torch._dynamo.utils import counters
    from fp8ext.compile import choices
    from fp8ext.testing import random_operands
    # What actually ran here: lowerings through the autotuner, and fp8ext candidates timed. Inductor's counters cannot
    # tell: a cache hit adds the counts recorded when the graph was compiled (CompiledFxGraph.counter_deltas).
    ran = {"autotuner_calls": 0, "fp8ext_timed": 0}
    selector_call, time_on_gpu = select_algorithm.AlgorithmSelectorCache.__call__, choices._time_on_gpu

    def counted_call(self, *args, **kwargs):
        ran["autotuner_calls"] += 1
        return selector_call(self, *args, **kwargs)

    def counted_time(*args, **kwargs):
        ran["fp8ext_timed"] += 1
        return time_on_gpu(*args, **kwargs)

    select_algorithm.AlgorithmSelectorCache.__call__, choices._time_on_gpu = counted_call, counted_time
    torch.manual_seed(1)
    a, b, sa, sb = random_operands(16, 4096, 4096, device="cuda")
    fp8ext.compile.enable()
    f = torch.compile(lambda a, w, sa, sb: torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16,
                                                            use_fast_accum=True), fullgraph=True)
    out = f(a, b.t(), sa, sb)
    print(json.dumps({**ran, "inductor": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"]),
                      "sum": out.float().sum().item()}))
""")


def test_a_second_process_hits_the_cache_and_times_nothing(tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["autotuner_calls"] >= 1 and first["fp8ext_timed"] >= 1, runs  # the first compile timed fp8ext's
    assert second["autotuner_calls"] == 0 and second["fp8ext_timed"] == 0, runs  # the second lowered nothing
    assert second["aot"].get("autograd_cache_hit", 0) + second["inductor"].get("fxgraph_cache_hit", 0) >= 1, runs
    assert second["sum"] == first["sum"], runs


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_compiled_quantize_on_the_gpu_equals_the_eager_kernel_bit_for_bit(dtype):
    """The decomposition's float64 divisions in Triton give the quantize kernel's bits (zero, NaN, huge, tiny rows)."""
    from test_compile_switch import nasty_rows, same_bits
    x = nasty_rows(dtype, K=4096).cuda()
    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
    quantize = torch.ops.fp8ext.quantize_rowwise
    torch._dynamo.reset()
    with fp8ext.compile.enabled(), torch.no_grad():
        got = torch.compile(lambda x: (quantize(x, e4m3, None), quantize(x, e5m2, 2.5)), fullgraph=True)(x)
    want = (quantize(x, e4m3, None), quantize(x, e5m2, 2.5))
    for (q, s), (q_ref, s_ref) in zip(got, want):
        assert same_bits(q, q_ref) and same_bits(s, s_ref)


def test_a_compiled_norm_and_float8_linear_on_the_gpu_fuse_the_quantize_and_equal_eager():
    """RMSNorm -> Float8Linear under the switch: no fp8ext.linear call is left, one GEMM runs, and with Inductor
    rounding the norm's output to bf16 (emulate_precision_casts) the result equals the eager layer's."""
    import re
    import torch._inductor.config as inductor_config
    from test_compile_switch import NormThenLinear
    module, x = NormThenLinear(K=512, N=256).cuda(), torch.randn(8, 512, dtype=torch.bfloat16, device="cuda")
    torch._dynamo.reset()
    with fp8ext.compile.enabled(), torch.no_grad(), inductor_config.patch(emulate_precision_casts=True):
        out, code = run_and_get_code(torch.compile(module, fullgraph=True), x)
    text = "\n".join(code)
    assert not re.search(r"torch\.ops\.fp8ext\.(linear|quantize_rowwise)\.default\(", text), text
    assert len(fp8ext.compile.chosen(code)) + len(re.findall(r"fp8ext\._scaled_mm_with_kernel\.default\(", text)) == 1
    with torch.no_grad():
        assert torch.equal(out, module(x))
