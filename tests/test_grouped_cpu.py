"""fp8ext.scaled_grouped_mm on CPU: every layout and scaling, group by group, equal to fp8ext.scaled_mm on the
group's slices and within the float64 bound; empty, 1-row and unaligned groups; rows past the last offset; each
error, eager and traced alike; the fake implementation, opcheck, a compiled call and the autograd guard."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fp8ext
from fp8ext.testing import assert_opcheck, check_against_reference
from grouped_cases import (BATCHED, BLOCKWISE, CASES, ROWWISE, WGRAD, batched_call, groups, moe_call,
                           weight_grad_call)
from grouped_validation_cases import CASES as ERROR_CASES
from grouped_validation_cases import MASKED_CASES, MASKED_VALUE_CASES, VALUE_CASES


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("use_fast_accum", [False, True])
def test_each_group_equals_scaled_mm_on_its_slices_and_the_float64_bound(case, use_fast_accum):
    args, kw = CASES[case]()
    out = fp8ext.scaled_grouped_mm(*args, **kw, use_fast_accum=use_fast_accum)
    assert out.dtype == kw["out_dtype"] and out.is_contiguous()
    for g, (part, (a, b, sa, sb, bias)) in enumerate(groups(args, kw)):
        want = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=kw["out_dtype"], use_fast_accum=use_fast_accum)
        assert torch.equal(part(out), want), f"{case}: group {g}"
        if a.numel() and b.numel():
            check_against_reference(part(out), a, b, sa, sb, bias, use_fast_accum=use_fast_accum,
                                    what=f"{case}: group {g}")


def test_rows_of_no_group_are_zero_and_an_empty_k_slice_is_its_bias():
    args, kw = moe_call([3, 4], 32, 32, extra_rows=6)
    out = fp8ext.scaled_grouped_mm(*args, **kw)
    assert torch.equal(out[7:], torch.zeros(6, 32, dtype=torch.bfloat16))
    assert out[:7].abs().sum() > 0
    args, kw = weight_grad_call(8, 32, [16, 0], bias=True)
    out = fp8ext.scaled_grouped_mm(*args, **kw)
    assert torch.equal(out[1], kw["bias"][1].expand(8, 32))


def message_of(fn, args, kwargs) -> str:
    with pytest.raises(RuntimeError) as info:
        fn(*args, **kwargs)
    return str(info.value).splitlines()[0]


# (the op, a case): each op's calls that metadata refuses, and those refused where the values are read
REFUSED = ([(fp8ext.scaled_grouped_mm, c) for c in ERROR_CASES if not c.gpu_only]
           + [(fp8ext.scaled_grouped_mm_masked, c) for c in MASKED_CASES])
REFUSED_VALUES = ([(fp8ext.scaled_grouped_mm, c) for c in VALUE_CASES]
                  + [(fp8ext.scaled_grouped_mm_masked, c) for c in MASKED_VALUE_CASES])


@pytest.mark.parametrize("op, case", REFUSED, ids=lambda x: getattr(x, "id", ""))
def test_each_bad_call_gets_its_message_eager_and_traced(op, case):
    args, kwargs = case.build("cpu")
    assert message_of(op, args, kwargs) == case.message
    with FakeTensorMode() as mode:
        fake = lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
        assert message_of(op, [fake(t) for t in args], {k: fake(v) for k, v in kwargs.items()}) == case.message


@pytest.mark.parametrize("op, case", REFUSED_VALUES, ids=lambda x: getattr(x, "id", ""))
def test_offsets_and_counts_out_of_range_are_refused_where_they_are_read(op, case):
    args, kwargs = case.build("cpu")
    assert message_of(op, args, kwargs) == case.message


@pytest.mark.parametrize("case", list(CASES))
def test_the_fake_output_matches_the_eager_output(case):
    args, kw = CASES[case]()
    eager = fp8ext.scaled_grouped_mm(*args, **kw)
    with FakeTensorMode() as mode:
        fake = fp8ext.scaled_grouped_mm(*(mode.from_tensor(t) for t in args),
                                        **{k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                                           for k, v in kw.items()})
    assert fake.shape == eager.shape and fake.dtype == eager.dtype and fake.stride() == eager.stride()


@pytest.mark.parametrize("case", [ROWWISE, BLOCKWISE, BATCHED, WGRAD])
def test_opcheck(case):
    args, kw = CASES[case]()
    # test_schema is left out: its aliasing check multiplies the inputs, which fp8 tensors do not support on CPU
    assert_opcheck(torch.ops.fp8ext.scaled_grouped_mm.default, (*args, kw.get("offs"), kw.get("bias"),
                                                                 kw["out_dtype"], False))


def test_a_compiled_call_equals_the_eager_call():
    args, kw = CASES[ROWWISE]()
    f = torch.compile(fp8ext.scaled_grouped_mm, backend="aot_eager", fullgraph=True)
    assert torch.equal(f(*args, **kw), fp8ext.scaled_grouped_mm(*args, **kw))


def test_inputs_that_require_grad_are_refused_by_name():
    args, kw = CASES[ROWWISE]()
    args[2].requires_grad_()
    with pytest.raises(RuntimeError, match=r"^fp8ext.scaled_grouped_mm: scale_a: requires grad"):
        fp8ext.scaled_grouped_mm(*args, **kw)


@pytest.mark.parametrize("routing", ["uniform", "zipf", "one"])
@pytest.mark.parametrize("tokens, topk, G", [(1, 8, 256), (1024, 8, 32), (16, 2, 8)])
def test_the_grouped_suite_routes_every_token_to_top_k_experts(routing, tokens, topk, G):
    from fp8ext.bench.suites.grouped import group_sizes
    sizes = group_sizes(tokens, topk, G, routing)
    assert len(sizes) == G and sum(sizes) == tokens * topk and min(sizes) >= 0
    if routing == "one":
        assert sizes[0] == tokens * topk
    else:
        assert max(sizes) <= tokens  # distinct experts per token
    if routing == "zipf" and tokens >= 1024:
        assert max(sizes) > 3 * tokens * topk / G  # skewed: the favourite expert gets far more than its share


@pytest.mark.parametrize("blockwise", [False, True])
@pytest.mark.parametrize("use_fast_accum", [False, True])
def test_a_masked_call_computes_each_group_s_first_rows_as_scaled_mm(blockwise, use_fast_accum):
    (a, b, sa, sb), kw = batched_call(4, 24, 64, 256, blockwise=blockwise, bias=True)
    counts = torch.tensor([24, 0, 1, 13], dtype=torch.int32)
    out = fp8ext.scaled_grouped_mm_masked(a, b, sa, sb, counts, bias=kw["bias"], use_fast_accum=use_fast_accum,
                                          expected_m=8)
    assert out.shape == (4, 24, 64) and out.dtype == torch.bfloat16
    for g, n in enumerate(counts.tolist()):
        want = fp8ext.scaled_mm(a[g, :n], b[g], sa[g, :n] if blockwise else sa[g, :n].view(-1, 1),
                                sb[g] if blockwise else sb[g].view(1, -1), bias=kw["bias"][g],
                                use_fast_accum=use_fast_accum)
        assert torch.equal(out[g, :n], want), f"group {g}"


def test_the_masked_op_passes_opcheck_and_compiles():
    """opcheck compares whole outputs, so its call fills every group (the rows past a count are undefined)."""
    (a, b, sa, sb), _ = batched_call(3, 16, 64, 128)
    full = torch.full((3,), 16, dtype=torch.int32)
    assert_opcheck(torch.ops.fp8ext.scaled_grouped_mm_masked.default, (a, b, sa, sb, full, None, None, False, None))
    counts = torch.tensor([16, 3, 0], dtype=torch.int32)
    f = torch.compile(fp8ext.scaled_grouped_mm_masked, backend="aot_eager", fullgraph=True)
    got, want = f(a, b, sa, sb, counts), fp8ext.scaled_grouped_mm_masked(a, b, sa, sb, counts)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1, :3], want[1, :3])


def test_the_masked_op_names_a_missing_masked_m_where_the_python_guard_does_not_run():
    # Under inference_mode None reaches the C++ op as an undefined tensor; the op names the argument itself.
    (a, b, sa, sb), _ = batched_call(3, 17, 64, 96)
    with torch.inference_mode():
        message = "fp8ext.scaled_grouped_mm_masked: masked_m: expected a tensor, got None"
        with pytest.raises(RuntimeError, match=message):
            torch.ops.fp8ext.scaled_grouped_mm_masked(a, b, sa, sb, None)
