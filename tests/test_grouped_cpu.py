"""fp8ext.scaled_grouped_mm on CPU: every layout and scaling, group by group, equal to fp8ext.scaled_mm on the
group's slices and within the float64 bound; empty, 1-row and unaligned groups; rows past the last offset; each
error, eager and traced alike; the fake implementation, opcheck, a compiled call and the autograd guard."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fp8ext
from fp8ext.testing import assert_opcheck, check_against_reference
from grouped_cases import BATCHED, BLOCKWISE, CASES, ROWWISE, WGRAD, groups, moe_call, weight_grad_call
from grouped_validation_cases import CASES as ERROR_CASES
from grouped_validation_cases import VALUE_CASES


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


@pytest.mark.parametrize("case", [c for c in ERROR_CASES if not c.gpu_only], ids=lambda c: c.id)
def test_each_bad_call_gets_its_message_eager_and_traced(case):
    args, kwargs = case.build("cpu")
    assert message_of(fp8ext.scaled_grouped_mm, args, kwargs) == case.message
    with FakeTensorMode() as mode:
        fake = lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
        assert message_of(fp8ext.scaled_grouped_mm, [fake(t) for t in args],
                          {k: fake(v) for k, v in kwargs.items()}) == case.message


@pytest.mark.parametrize("case", VALUE_CASES, ids=lambda c: c.id)
def test_offsets_out_of_order_past_the_end_or_off_16_are_refused_where_they_are_read(case):
    args, kwargs = case.build("cpu")
    assert message_of(fp8ext.scaled_grouped_mm, args, kwargs) == case.message


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
