"""Robustness round 3: a careful user's first hour, on a machine without a GPU with the CUDA wheel installed. One
test per finding of the issue that the Python side fixes, named for it, and one that holds the eager and traced
paths to the same exception for the inputs where they differed (7, 8 and 15).

On torch.library.opcheck (finding 16): fp8ext's ops pass its test_faketensor, test_autograd_registration and
test_aot_dispatch_dynamic, the subset the op tests run (OPCHECK_UTILS in tests/test_op_cpu.py, test_linear.py,
tests/blockwise_cases.py). opcheck's default test_utils add test_schema, whose SchemaCheckMode compares every input
before and after the call with torch.allclose, which has no FP8 kernel: scaled_mm and linear, which take FP8
tensors, fail it for that reason alone. The quantize ops, whose inputs are float, pass the full default set.
"""
import logging
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import fp8ext
from fp8ext.nn import Float8Linear
from fp8ext.testing import random_fp8, random_operands

E4M3 = torch.float8_e4m3fn
M, N, K = 32, 48, 64
needs_kernel_queries = pytest.mark.skipif(not fp8ext.kernel_names(), reason="needs a CUDA build of fp8ext")


def fp8_weight(n=N, k=K):
    w, s = fp8ext.quantize_rowwise(torch.randn(n, k))
    return w, s.view(n)


# ---- one test per finding ----

@needs_kernel_queries
def test_finding01_kernel_queries_refuse_empty_and_negative_shapes():
    # In a subprocess: before the fix, M = 0 killed the process (SIGFPE in the cost model).
    code = """if True:
        import torch, fp8ext
        for call in ("fp8ext.selected_kernel(0, 4096, 4096)", "fp8ext.selected_kernel(16, 0, 4096)",
                     "fp8ext.selected_kernel(16, 4096, 0)", "fp8ext.selected_kernel(0, 4096, 4096, explain=True)",
                     "fp8ext.selected_kernel(-16, 4096, 4096)", "fp8ext.selected_kernel(16, -16, 4096, explain=True)",
                     "fp8ext.selected_blockwise_kernel(0, 4096, 4096)"):
            try:
                print(call, '->', repr(eval(call)))
            except ValueError as e:
                print(call, '-> ValueError:', e)
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.returncode
    lines = r.stdout.splitlines()
    assert len(lines) == 7, r.stdout
    empty = ("fp8ext.scaled_mm answers a call with an empty dimension without launching a kernel (an empty result, "
             "or zeros plus the bias for K = 0), so no kernel is selected for it")
    assert lines[0] == f"fp8ext.selected_kernel(0, 4096, 4096) -> ValueError: fp8ext.selected_kernel: M, N, K = " \
                       f"0, 4096, 4096: {empty}"
    for line in lines[1:4] + lines[6:]:
        assert line.endswith(empty), line
    assert lines[4].endswith("ValueError: fp8ext.selected_kernel: M = -16: expected 0 <= M <= 2^31 - 1")
    assert lines[5].endswith("ValueError: fp8ext.selected_kernel: N = -16: expected 0 <= N <= 2^31 - 1")


def test_finding05_dtype_cast_of_converted_model_keeps_the_fp8_weight():
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 32)).bfloat16()
    fp8ext.convert(model)
    x = torch.randn(3, 64).bfloat16()
    weights = [(m.weight.view(torch.uint8).clone(), m.weight_scale.clone()) for m in (model[0], model[2])]
    with torch.no_grad():
        want = model(x)
    # Casts that hold the bias exactly (bf16 to wider), then one that may round it.
    for cast in (lambda m: m.to(torch.bfloat16), lambda m: m.float(), lambda m: m.double(),
                 lambda m: m.to("cpu", torch.float32), lambda m: m.half()):
        with torch.no_grad():
            assert torch.equal(model(x), want)
        cast(model)
        for m, (w, s) in zip((model[0], model[2]), weights):
            assert m.weight.dtype == E4M3 and torch.equal(m.weight.view(torch.uint8), w)
            assert m.weight_scale.dtype == torch.float32 and torch.equal(m.weight_scale, s)
    assert model[0].bias.dtype == torch.float16  # the bias follows the casts
    with torch.no_grad():
        assert model(x.half()).dtype == torch.float16


def test_finding06_convert_keeps_ties_or_leaves_the_tied_layer():
    class TiedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(32, 64)
            self.proj = nn.Linear(64, 64)
            self.lm_head = nn.Linear(64, 32, bias=False)
            self.lm_head.weight = self.embed.weight

        def forward(self, ids):
            return self.lm_head(self.proj(self.embed(ids)))

    model = TiedLM().bfloat16()
    report = fp8ext.convert(model, skip_lm_head=False)
    assert [n for n, _ in report.swapped] == ["proj"]
    assert dict(report.skipped)["lm_head"] == ("weight shared with embed.weight, which stays as it is (swapping "
                                               "would untie them; give the layer its own copy to swap it)")
    assert model.lm_head.weight is model.embed.weight

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 32), nn.Linear(64, 32)
            self.b.weight = self.a.weight  # one Parameter, two layers (their biases are their own)

        def forward(self, x):
            return self.a(x) + self.b(x)

    def converted():
        m = TwoHeads().bfloat16()
        return m, fp8ext.convert(m)

    model, report = converted()
    assert isinstance(model.a, Float8Linear) and isinstance(model.b, Float8Linear)
    assert model.a.weight is model.b.weight and model.a.weight_scale is model.b.weight_scale
    assert model.a.bias is not model.b.bias
    assert report.tied == [["a.weight", "b.weight"]] and "1 tied parameter kept tied" in str(report)
    # A state dict round trip into another converted copy: the same bits, and still one weight.
    other, _ = converted()
    other.load_state_dict(model.state_dict())
    assert other.a.weight is other.b.weight
    x = torch.randn(5, 64).bfloat16()
    with torch.no_grad():
        assert torch.equal(other(x), model(x))
    # A Linear that filter_fn keeps holds the weight: the other stays too.
    model = TwoHeads().bfloat16()
    report = fp8ext.convert(model, filter_fn=lambda m, name: name != "a")
    assert report.swapped == [] and model.a.weight is model.b.weight
    assert dict(report.skipped)["b"].startswith("weight shared with a.weight, which stays as it is")


def test_finding10_quantize_blockwise_refuses_grad_on_every_path():
    message = r"fp8ext.quantize_blockwise: x: requires grad, but fp8ext.quantize_blockwise is not differentiable"
    for shape, block in (((256, 256), (128, 128)), ((8, 200), (1, 128)), ((8, 256), (1, 128))):
        x = torch.randn(*shape, requires_grad=True)
        with pytest.raises(RuntimeError, match=message):
            fp8ext.quantize_blockwise(x, block)
        with torch.no_grad():
            q, s = fp8ext.quantize_blockwise(x, block)
        assert not q.requires_grad and not s.requires_grad


@needs_kernel_queries
def test_finding11_kernel_queries_refuse_what_scaled_mm_refuses():
    for args, message in (((16, 40, 4096), "N = 40 is not a multiple of 16"),
                          ((16, 4096, 40), "K = 40 is not a multiple of 16"),
                          ((16, 4096, 4096, torch.int8), "out_dtype: expected torch.bfloat16, torch.float16 or "
                                                         "torch.float32, got torch.int8"),
                          ((2**31, 4096, 4096), r"M = 2147483648: expected 0 <= M <= 2\^31 - 1")):
        with pytest.raises(ValueError, match=r"fp8ext.selected_kernel: " + message):
            fp8ext.selected_kernel(*args)
    with pytest.raises(ValueError, match=r"fp8ext.selected_kernel: a_dtype: expected torch.float8_e4m3fn or "
                                         r"torch.float8_e5m2, got torch.int8"):
        fp8ext.selected_kernel(16, 4096, 4096, a_dtype=torch.int8)
    with pytest.raises(ValueError, match=r"fp8ext.selected_blockwise_kernel: N = 40 is not a multiple of 16"):
        fp8ext.selected_blockwise_kernel(16, 40, 4096)
    # Without a GPU both answer for an H200 (selected_blockwise_kernel asked the driver for an SM count).
    assert isinstance(fp8ext.selected_blockwise_kernel(64, 7168, 2048), str)
    assert isinstance(fp8ext.selected_kernel(64, 7168, 2048), str)


def test_finding12_float8linear_sizes_and_the_bias_dtype_of_a_round_trip():
    for sizes, message in (((-16, 64), "in_features = -16"), ((64, -32), "out_features = -32")):
        with pytest.raises(ValueError, match=f"fp8ext.Float8Linear: {message} is not a positive multiple of 16"):
            Float8Linear(*sizes)
    layer = nn.Linear(64, 32)
    with torch.no_grad():
        layer.bias.normal_()
    f8 = Float8Linear.from_linear(layer)
    assert f8.bias.dtype == torch.float32 and torch.equal(f8.bias, layer.bias)
    fresh = Float8Linear(64, 32)  # bias_dtype left at its default, bfloat16
    fresh.load_state_dict(f8.state_dict())
    assert fresh.bias.dtype == torch.float32 and torch.equal(fresh.bias, layer.bias)
    x = torch.randn(3, 64)
    with torch.no_grad():
        assert torch.equal(fresh(x), f8(x))
    # A state dict whose weight is not FP8 (the unconverted model's) is refused, not cast to FP8 without a scale.
    with pytest.raises(RuntimeError, match=r"fp8ext.Float8Linear: weight: expected dtype torch.float8_e4m3fn in "
                                           r"the state dict, got torch.float32"):
        fresh.load_state_dict(layer.state_dict(), strict=False)


def test_finding13_f8f8bf16_rowwise_names_bad_arguments_with_value_error():
    xq, xs = fp8ext.quantize_rowwise(torch.randn(17, K).bfloat16())
    wq, ws = fp8_weight()
    for kwargs, message in (({"bias": torch.zeros(N + 16, dtype=torch.bfloat16)},
                             r"bias: expected shape \(N,\) with N = 48, got \(64,\)"),
                            ({"bias": torch.zeros(1, N, dtype=torch.bfloat16)},
                             r"bias: expected shape \(N,\) with N = 48, got \(1, 48\)"),
                            ({"XQ": xq.bfloat16()}, "XQ: expected dtype torch.float8_e4m3fn or torch.float8_e5m2, "
                                                    "got torch.bfloat16")):
        args = {"XQ": xq, "WQ": wq, "x_scale": xs.view(-1), "w_scale": ws, **kwargs}
        with pytest.raises(ValueError, match="fp8ext.f8f8bf16_rowwise: " + message):
            fp8ext.f8f8bf16_rowwise(**args)


def test_finding08_ops_refuse_none_in_cpp_where_the_python_guard_does_not_run():
    # Under inference_mode the Python autograd guard is skipped and None reaches the C++ op as an undefined tensor:
    # it said "strides() called on an undefined Tensor" from inside torch. The op now names the argument itself.
    # (An op whose only tensor argument is None cannot be dispatched at all: torch refuses it before any kernel.)
    a, b, sa, sb = random_operands(M, N, K)
    with torch.inference_mode():
        for args, arg in (((None, b, sa, sb), "a"), ((a, None, sa, sb), "b"), ((a, b, None, sb), "scale_a"),
                          ((a, b, sa, None), "scale_b")):
            with pytest.raises(RuntimeError, match=f"fp8ext.scaled_mm: {arg}: expected a tensor, got None"):
                torch.ops.fp8ext.scaled_mm(*args)


def test_finding13_linear_names_its_own_bias_layout():
    # A strided or misaligned bias was left to the GEMM's checks, whose message named "fp8ext.scaled_mm: bias".
    x = torch.randn(M, K).bfloat16()
    w, ws = fp8_weight()
    strided = torch.randn(2 * N).bfloat16()[::2]
    with pytest.raises(RuntimeError, match="fp8ext.linear: bias: expected a contiguous tensor, got stride 2"):
        fp8ext.linear(x, w, ws, strided)
    with pytest.raises(RuntimeError, match="fp8ext.linear: bias: the data pointer must be 16-byte aligned"):
        fp8ext.linear(x, w, ws, torch.randn(N + 1).bfloat16()[1:])


def misaligned(t: torch.Tensor, source: str = "frombuffer", bytes_past: int = 1) -> torch.Tensor:
    """A copy of ``t`` over foreign memory whose address is ``bytes_past`` bytes past a 16-byte boundary, with
    storage offset 0: torch.frombuffer over a bytearray, or torch.from_numpy of a slice of a numpy array."""
    n = t.numel() * t.element_size()
    if source == "frombuffer":
        buf = bytearray(n + 32)
        base = torch.frombuffer(buf, dtype=torch.uint8).data_ptr()
        raw = torch.frombuffer(buf, dtype=torch.uint8, offset=(16 - base % 16) % 16 + bytes_past, count=n)
    else:
        arr = np.zeros(n + 32, dtype=np.uint8)
        start = (16 - arr.ctypes.data % 16) % 16 + bytes_past
        raw = torch.from_numpy(arr[start:start + n])
    out = raw.view(t.dtype).view(t.shape)
    out.copy_(t)
    assert out.storage_offset() == 0 and out.data_ptr() % 16 == bytes_past
    return out


AT = "the data pointer must be 16-byte aligned, got an address"  # the start of scaled_mm's and linear's message


def test_finding07_linear_names_a_misaligned_weight():
    x = torch.randn(4, K).bfloat16()
    w, ws = fp8_weight()
    with pytest.raises(RuntimeError) as info:
        fp8ext.linear(x, misaligned(w), ws)
    assert str(info.value) == f"fp8ext.linear: weight: {AT} 1 bytes past a 16-byte boundary (storage_offset 0)"


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_finding14_a_rejected_traced_call_logs_no_traceback():
    a, b, sa, sb = random_operands(M, N, K)
    records = _Records()
    torch_logger = logging.getLogger("torch._subclasses.fake_tensor")  # FakeTensorMode's, which does not propagate
    torch_logger.addHandler(records)
    try:
        torch._dynamo.reset()
        with pytest.raises(RuntimeError, match=r"fp8ext.scaled_mm: scale_a: expected one value"):
            torch.compile(fp8ext.scaled_mm, backend="eager", fullgraph=True)(a, b, torch.ones(M + 1, 1), sb)
        with FakeTensorMode() as mode, pytest.raises(RuntimeError, match=r"fp8ext.quantize_rowwise: x: K = 40"):
            fp8ext.quantize_rowwise(mode.from_tensor(torch.randn(4, 40)))
        with FakeTensorMode() as mode, pytest.raises(RuntimeError, match=r"fp8ext.linear: weight: expected dtype"):
            fp8ext.linear(*(mode.from_tensor(t) for t in (torch.randn(4, K), torch.randn(N, K), torch.ones(N))))
    finally:
        torch_logger.removeHandler(records)
    assert [r.getMessage() for r in records.records] == []


def test_finding16_opcheck_claims_name_the_subset_that_passes():
    # test_schema fails on FP8 inputs for torch's reasons, not fp8ext's ...
    a, b, sa, sb = random_operands(16, 32, 64)
    with pytest.raises(Exception, match="test_schema"):
        torch.library.opcheck(torch.ops.fp8ext.scaled_mm.default, (a, b, sa, sb))
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    result = torch.library.opcheck(torch.ops.fp8ext.scaled_mm.default, (a, b, sa, sb), test_utils=utils)
    assert all(v == "SUCCESS" for v in result.values()), result
    # ... and where fp8ext says its ops pass opcheck, it says which part.
    for doc in (fp8ext.__doc__, fp8ext.ops.__doc__):
        assert "test_schema" in doc and "opcheck" in doc


# ---- findings 7, 8 and 15: eager and traced calls raise the same exception ----

def _scaled_mm_call(**changes):
    a, b, sa, sb = random_operands(M, N, K)
    args = {"a": a, "b": b, "scale_a": sa, "scale_b": sb, "bias": None}
    args.update({name: make(args) for name, make in changes.items()})
    return fp8ext.scaled_mm, tuple(args.values())


def _linear_call(**changes):
    w, ws = fp8_weight()
    args = {"x": torch.randn(4, K).bfloat16(), "weight": w, "weight_scale": ws, "bias": None}
    args.update({name: make(args) for name, make in changes.items()})
    return fp8ext.linear, tuple(args.values())


AGREEMENT = {
    "07_a_frombuffer": (lambda: _scaled_mm_call(a=lambda c: misaligned(c["a"])), RuntimeError,
                        f"fp8ext.scaled_mm: a: {AT} 1 bytes past a 16-byte boundary (storage_offset 0)"),
    "07_a_numpy_slice": (lambda: _scaled_mm_call(a=lambda c: misaligned(c["a"], "numpy", 8)), RuntimeError,
                         f"fp8ext.scaled_mm: a: {AT} 8 bytes past a 16-byte boundary (storage_offset 0)"),
    "07_b_view_of_numpy_slice": (
        lambda: _scaled_mm_call(b=lambda c: misaligned(random_fp8(2 * N, K), "numpy", 4)[N:].t()),
        RuntimeError, f"fp8ext.scaled_mm: b: {AT} 4 bytes past a 16-byte boundary (storage_offset {N * K})"),
    "07_bias_frombuffer": (
        lambda: _scaled_mm_call(bias=lambda c: misaligned(torch.randn(N).bfloat16(), bytes_past=2)), RuntimeError,
        f"fp8ext.scaled_mm: bias: {AT} 2 bytes past a 16-byte boundary (storage_offset 0)"),
    "07_aligned_offset_over_misaligned_storage": (
        lambda: _scaled_mm_call(a=lambda c: misaligned(random_fp8(1, 2 * M * K), bytes_past=8)[0, 8:8 + M * K]
                                .view(M, K)), None, None),
    "07_linear_weight": (lambda: _linear_call(weight=lambda c: misaligned(c["weight"])), RuntimeError,
                         f"fp8ext.linear: weight: {AT} 1 bytes past a 16-byte boundary (storage_offset 0)"),
    "08_a_none": (lambda: _scaled_mm_call(a=lambda c: None), RuntimeError,
                  "fp8ext.scaled_mm: a: expected a tensor, got None"),
    "08_scale_b_none": (lambda: _scaled_mm_call(scale_b=lambda c: None), RuntimeError,
                        "fp8ext.scaled_mm: scale_b: expected a tensor, got None"),
    "08_linear_weight_scale_none": (lambda: _linear_call(weight_scale=lambda c: None), RuntimeError,
                                    "fp8ext.linear: weight_scale: expected a tensor, got None"),
    "15_scale_ub_tensor": (lambda: (fp8ext.quantize_rowwise, (torch.randn(4, K), None, torch.tensor(1.0))),
                           TypeError, "fp8ext.quantize_rowwise: scale_ub: expected a Python float or None, got a "
                                      "tensor of shape (); pass float(scale_ub) (which reads it on the host)"),
}


def _outcome(run):
    """(exception type, first line of its message) of fp8ext's error, or (None, None) if the call returned.
    torch.compile raises an error of its own (TorchRuntimeError) for one that an op raised while it traced the
    call, which its message quotes and its context chain holds: fp8ext's error is the first in the chain whose
    message starts with "fp8ext."."""
    try:
        run()
    except Exception as raised:  # noqa: BLE001 (the type is what is compared)
        e = raised
        while e is not None and not str(e).startswith("fp8ext."):
            e = e.__cause__ or e.__context__
        e = raised if e is None else e
        return type(e), str(e).splitlines()[0]
    return None, None


def _eager(fn, args):
    return _outcome(lambda: fn(*args))


def _fake(fn, args):
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args]
        return _outcome(lambda: fn(*fake))


def _compiled(fn, args):
    torch._dynamo.reset()
    return _outcome(lambda: torch.compile(fn, backend="eager")(*args))


@pytest.mark.parametrize("case", list(AGREEMENT))
def test_finding07_08_15_fake_and_compile_raise_what_eager_raises(case):
    make, error, message = AGREEMENT[case]
    fn, args = make()
    assert _eager(fn, args) == (error, message)
    assert _fake(fn, args) == (error, message)
    assert _compiled(fn, args) == (error, message)
