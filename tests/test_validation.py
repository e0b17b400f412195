"""Every bad input raises before anything runs, with the exact message of tests/validation_cases.py (which is
also the source of docs/errors.md), in eager mode and while a trace runs the fake implementation."""
import importlib.util
from pathlib import Path

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from torch._subclasses.fake_tensor import FakeTensorMode

import fp8ext
from validation_cases import CASES, good

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "errors.md"


def _raise_message(case, device):
    args, kwargs = case.build(device)
    with pytest.raises(RuntimeError) as info:
        fp8ext.scaled_mm(*args, **kwargs)
    return str(info.value).splitlines()[0]


@pytest.mark.parametrize("case", [c for c in CASES if not c.gpu_only], ids=lambda c: c.id)
def test_rejected_on_cpu(case):
    assert _raise_message(case, "cpu") == case.message


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rejected_on_gpu(case):
    torch.cuda.synchronize()
    assert _raise_message(case, "cuda") == case.message
    torch.cuda.synchronize()  # nothing was left half-launched


def test_error_table_is_generated_from_the_cases():
    spec = importlib.util.spec_from_file_location("gen_error_table", ROOT / "tools" / "gen_error_table.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert DOCS.read_text() == gen.render(), "docs/errors.md is stale: run python tools/gen_error_table.py"


# ---- the same messages from traced calls: the fake implementation runs the C++ checks on metadata ----

def _fake(args, kwargs):
    with FakeTensorMode() as mode:
        fake = lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
        fp8ext.scaled_mm(*map(fake, args), **{k: fake(v) for k, v in kwargs.items()})


def _compile(args, kwargs):
    torch._dynamo.reset()
    torch.compile(fp8ext.scaled_mm, fullgraph=True)(*args, **kwargs)


def _export(args, kwargs):
    tensors = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    others = {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}

    class Call(torch.nn.Module):
        def forward(self, *a, **k):
            return fp8ext.scaled_mm(*a, **k, **others)

    torch.export.export(Call(), tuple(args), tensors)


TRACERS = {"fake": _fake, "compile": _compile, "export": _export}


def _traced_messages(case, device, tracer):
    # torch.compile and torch.export wrap the error raised while tracing; the op's own message is a line of
    # one exception in the chain.
    args, kwargs = case.build(device)
    with pytest.raises(Exception) as info:
        TRACERS[tracer](args, kwargs)
    lines, e = [], info.value
    while e is not None:
        lines += [line.strip() for line in str(e).splitlines()]
        e = e.__cause__ or e.__context__
    return lines


def _traced_params(gpu):
    return [pytest.param(c, t, id=f"{c.id}-{t}", marks=[pytest.mark.gpu] if gpu else [])
            for c in CASES if c.gpu_only == gpu for t in TRACERS]


@pytest.mark.parametrize("case, tracer", _traced_params(gpu=False))
def test_traced_call_raises_the_eager_message_on_cpu(case, tracer):
    assert case.message in _traced_messages(case, "cpu", tracer)


@pytest.mark.parametrize("case, tracer", _traced_params(gpu=True))
def test_traced_call_raises_the_eager_message_on_gpu(case, tracer):
    assert case.message in _traced_messages(case, "cuda", tracer)


def test_dynamic_shapes_are_not_specialised_by_the_checks():
    # The fake implementation reads a symbolic size's example value without a guard: one graph serves every M.
    counter = CompileCounter()
    f = torch.compile(fp8ext.scaled_mm, backend=counter, dynamic=True, fullgraph=True)
    torch._dynamo.reset()
    for m in (32, 80, 8):
        (a, b, sa, sb), _ = good("cpu")
        a = torch.cat([a.float()] * 3)[:m].to(a.dtype)
        sa = torch.rand(m, 1) + 0.5
        torch.testing.assert_close(f(a, b, sa, sb), fp8ext.scaled_mm(a, b, sa, sb), rtol=0, atol=0)
    assert counter.frame_count == 1


def test_case_ids_unique_and_count():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 40
