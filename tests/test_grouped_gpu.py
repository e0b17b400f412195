"""fp8ext.scaled_grouped_mm on the GPU (sm_90a, bf16 output): every layout through every grouped kernel (row-wise
and block-wise scales) against float64 group by group, and bit exact on small integers; empty, 1-row and unaligned
groups, rows past the last offset, empty K slices; no host synchronisation, CUDA graphs replayed with new offsets,
opcheck and torch.compile; torch._scaled_grouped_mm on the same tensors; each error with its CPU message."""
import re
from pathlib import Path

import pytest
import torch

import fp8ext
from fp8ext.testing import assert_opcheck, check_against_reference
from grouped_cases import (batched_call, ends, groups, moe_call, on, sliced_scales, torch_scale_layout,
                           weight_grad_call)
from grouped_validation_cases import CASES as ERROR_CASES

DEV = "cuda"
pytestmark = pytest.mark.gpu

# Groups of a few rows (the swapped 128 x 32 kernel) and of a hundred and more (the 128 x 128 or 128 x 256 one), each
# with empty, 1-row and unaligned groups; and one large group among many small ones (the split kernels).
INC = Path(__file__).resolve().parent.parent / "csrc" / "sm90" / "grouped" / "grouped_dispatch.inc"
LIMITS = dict(re.findall(r"kSplitMaxGroupRows_(\w+) = (\d+);", INC.read_text()))
assert len(set(LIMITS.values())) == 1, LIMITS  # one limit for every family, as the cases below assume
SPLIT_ROWS = int(next(iter(LIMITS.values())))  # larger groups run on a split kernel's large tile
# 30 groups of 17.7 rows or fewer on average, 27 of them of 0-5 rows: with the groups of SPLIT_ROWS + 10 and
# SPLIT_ROWS rows, the 10-row one too large for the small tile but not half the rows (small tile); with a group of
# 4 * SPLIT_ROWS instead, that one on the large tile. And a group of SPLIT_ROWS + 1 among no other rows.
FEW = [0, 3, 1, 0, 2, 1, 5, 0, 1, 2, 0, 1, 0, 4, 1, 0, 2, 1, 0, 1, 0, 2, 1, 3, 0, 1, 2]
SKEWED = {"a large group among others": FEW[:12] + [SPLIT_ROWS + 10] + FEW[12:] + [SPLIT_ROWS, 7],
          "a dominant group": FEW[:20] + [4 * SPLIT_ROWS] + FEW[20:] + [SPLIT_ROWS, 9],
          "one group": [0] * 29 + [SPLIT_ROWS + 1]}
assert all(sum(s) / len(s) <= 17.7 and sum(s) > SPLIT_ROWS for s in SKEWED.values())
GPU_CASES = {
    "2d3d decode-sized groups": lambda: moe_call([5, 0, 1, 37, 16, 3, 0, 9], 256, 512, bias=True),
    "2d3d large groups": lambda: moe_call([300, 0, 1, 129, 77, 255], 512, 256, extra_rows=7),
    "2d3d one group": lambda: moe_call([1000], 384, 1024),
    # every row in one group, too few for a 128 x 128 tile on each SM: the split-K kernels, K in slices
    "2d3d one large group, long K": lambda: moe_call([0] * 15 + [200], 512, 4096, bias=True, extra_rows=3),
    "3d3d small M": lambda: batched_call(4, 17, 256, 256, bias=True),
    "3d3d large M": lambda: batched_call(3, 200, 128, 384),
    "2d2d small M, an empty K slice": lambda: weight_grad_call(24, 128, [32, 0, 96, 16], bias=True),
    "2d2d large M": lambda: weight_grad_call(256, 256, [128, 512, 0, 64]),
    "2d3d block-wise, decode-sized groups": lambda: moe_call([5, 0, 1, 37, 16, 3], 384, 512, blockwise=True,
                                                             bias=True),
    "2d3d block-wise, large groups": lambda: moe_call([300, 0, 1, 129, 77], 272, 640, blockwise=True, extra_rows=3),
    "3d3d block-wise": lambda: batched_call(3, 65, 256, 384, blockwise=True),
    # scale_a as quantize_blockwise returns it, at K and N past a 128 block; one K group (K <= 128) in either layout
    "2d3d block-wise, torch's scale layout": lambda: torch_scale_layout(
        moe_call([5, 0, 1, 37, 16, 3], 272, 2064, blockwise=True, bias=True)),
    "3d3d block-wise, torch's scale layout": lambda: torch_scale_layout(batched_call(3, 65, 256, 384, blockwise=True)),
    "2d3d block-wise, one K group": lambda: moe_call([5, 0, 1, 37], 256, 112, blockwise=True),
    "2d3d block-wise, one K group, torch's scale layout": lambda: torch_scale_layout(
        moe_call([5, 0, 1, 37], 256, 128, blockwise=True)),
    # scales sliced from wider tensors (NaN past the slice): rows of scale_a and of each weight's scales apart
    "2d3d block-wise, sliced scales": lambda: sliced_scales(
        moe_call([5, 0, 1, 37, 16, 3], 384, 640, blockwise=True, bias=True)),
    "3d3d block-wise, sliced scales": lambda: sliced_scales(batched_call(3, 65, 256, 384, blockwise=True)),
    # At most GEMV_ROWS rows in all: the grouped decode kernel, most groups empty (a slot per group that holds rows,
    # found on the device) and rows past the last offset.
    "2d3d decode, few rows among many groups": lambda: moe_call([0] * 20 + [2, 0, 1] + [0] * 30 + [2, 1] + [0] * 9,
                                                                 384, 640, bias=True, extra_rows=2),
    "2d3d decode, 8 rows, long K": lambda: moe_call([3, 0, 4, 1], 256, 2048),
    "2d3d block-wise decode, few rows among many groups": lambda: moe_call(
        [0] * 20 + [2, 0, 1] + [0] * 30 + [2, 1] + [0] * 9, 384, 640, blockwise=True, bias=True, extra_rows=2),
    "2d3d block-wise decode, 8 rows, long K": lambda: moe_call([3, 0, 4, 1], 272, 2064, blockwise=True),
    # Few rows per group on average but more than SPLIT_ROWS in all: the split kernels, one group past SPLIT_ROWS.
    "2d3d skewed groups": lambda: moe_call(SKEWED["a dominant group"], 256, 512, bias=True, extra_rows=5),
    "2d3d block-wise, skewed groups": lambda: moe_call(SKEWED["a large group among others"], 384, 640,
                                                       blockwise=True),
}


GEMV_ROWS = 8  # a row-wise call of at most this many rows in all runs the grouped decode kernel (kGemvMaxRows)


def kernel_names():
    return set(torch.ops.fp8ext._grouped_kernel_names())


# Each 128 x 128 and 128 x 256 row-wise grouped kernel and an fp8ext.scaled_mm kernel of the same tile and
# accumulation (the cluster shape and schedule change which SMs share a load and which warps hold a tile, not a sum):
# the same bits, group by group.
SAME_TILE = {"grp_coop_128x128x128_c1x1_fast_bf16": "pp_128x128x128_c1x2_fast_bf16",
             "grp_coop_128x256x128_c1x1_fast_bf16": "coop_128x256x128_c2x1_fast_bf16",
             "grp_coop_128x128x128_c1x1_precise_bf16": "coop_128x128x128_c1x2_precise_bf16"}


GEMV_SHAPES = ("m32_r16_s2",)  # the grouped decode kernels


def test_the_build_has_every_grouped_kernel():
    assert kernel_names() == {f"grp_{k}_{a}_bf16" for k in ("swap_pp_128x32x128_c1x1", "coop_128x128x128_c1x1",
                                                            "split", "splitk") for a in ("fast", "precise")} | {
        "grp_bw_swap_coop_128x32x128_c1x1_bf16", "grp_bw_coop_128x128x128_c1x1_bf16", "grp_bw_split_bf16",
        "grp_coop_128x256x128_c1x1_fast_bf16"} | {
        f"grp_gemv_tc_{v}_{a}_bf16" for v in GEMV_SHAPES for a in ("fast", "precise")} | {
        f"grp_bw_gemv_tc_{v}_bf16" for v in GEMV_SHAPES}


def named(args, kw, fast, kernel):
    return torch.ops.fp8ext._scaled_grouped_mm_with_kernel(*args, kw["offs"], kw.get("bias"), None, fast, kernel)


@pytest.mark.parametrize("kernel", sorted(SAME_TILE))
@pytest.mark.parametrize("bias", [False, True])
def test_each_group_equals_scaled_mm_on_the_same_tile_bit_for_bit(kernel, bias):
    """Groups of 0 to 700 rows (one past two 256-row tiles, one short of a 128-row tile), K of five 128-deep blocks:
    a group's rows are a scaled_mm call's, so a grouped call computes what a loop over the experts would."""
    args, kw = on(DEV, moe_call([300, 0, 1, 127, 513, 77, 700], 384, 640, bias=bias, extra_rows=3))
    assert_each_group_equals_scaled_mm(args, kw, kernel)


def assert_each_group_equals_scaled_mm(args, kw, kernel):
    """The named kernel's output, group by group, against scaled_mm forced to the same tile (SAME_TILE)."""
    fast = "_fast_" in kernel
    out = named(args, kw, fast, kernel)
    with fp8ext.force_kernel(SAME_TILE[kernel]):
        for g, (part, (a, b, sa, sb, bias_g)) in enumerate(groups(args, kw)):
            if a.size(0):
                want = fp8ext.scaled_mm(a, b, sa, sb, bias=bias_g, out_dtype=torch.bfloat16, use_fast_accum=fast)
                assert torch.equal(part(out), want), f"{kernel}: group {g} of {a.size(0)} rows"
    return out


# A group holding most of a call's rows whose tokens outgrow the L2 (rows x K bytes past the 32 MiB of
# csrc/sm90/grouped/grouped_bands.cuh) runs as bands of 2048 rows at K = 4096, each a problem of its own: five here,
# the last of 809 rows, starting at row 3, with groups before and after it and rows past the last offset.
BANDED = [3, 0, 9001, 0, 5]


@pytest.mark.parametrize("kernel", sorted(SAME_TILE))
def test_a_group_run_in_bands_equals_scaled_mm_on_the_same_tile_bit_for_bit(kernel):
    """Bands start on the group's own tile grid, so each tile and its sum are the unbanded group's."""
    args, kw = on(DEV, moe_call(BANDED, 256, 4096, bias=True, extra_rows=2))
    out = assert_each_group_equals_scaled_mm(args, kw, kernel)
    assert torch.equal(out[sum(BANDED):], torch.zeros_like(out[sum(BANDED):]))


def test_a_block_wise_group_run_in_bands_against_float64():
    args, kw = on(DEV, moe_call(BANDED, 256, 4096, blockwise=True, bias=True, extra_rows=2))
    out = named(args, kw, False, "grp_bw_coop_128x128x128_c1x1_bf16")
    for g, (part, (a, b, sa, sb, bias)) in enumerate(groups(args, kw)):
        if a.size(0):
            check_against_reference(part(out), a, b, sa, sb, bias, use_fast_accum=False, what=f"group {g}")


def decode_and_swapped(accum):
    """The grouped decode kernel and the swapped tile (SPLITS) of a family: fast, precise or blockwise."""
    decode = "grp_bw_gemv_tc_m32_r16_s2_bf16" if accum == "blockwise" else f"grp_gemv_tc_m32_r16_s2_{accum}_bf16"
    return decode, SPLITS[accum][1]


@pytest.mark.parametrize("accum", ["fast", "precise", "blockwise"])
def test_a_call_of_few_rows_in_all_runs_the_grouped_decode_kernel(accum):
    """The dispatch: GEMV_ROWS rows in all on the decode kernel, one row more on another."""
    fast, bw = accum == "fast", accum == "blockwise"
    decode, swapped = decode_and_swapped(accum)
    for sizes, kernel in (([0, 3, 0, 1, 4], decode), ([0, 3, 0, 1, 5], swapped)):
        assert (sum(sizes) <= GEMV_ROWS) == ("_gemv_" in kernel)
        args, kw = on(DEV, moe_call(sizes, 256, 512, blockwise=bw))
        assert torch.equal(fp8ext.scaled_grouped_mm(*args, **kw, use_fast_accum=fast), named(args, kw, fast, kernel))


SPLITS = {"fast": ("grp_split_fast_bf16", "grp_swap_pp_128x32x128_c1x1_fast_bf16",
                   "grp_coop_128x128x128_c1x1_fast_bf16"),
          "precise": ("grp_split_precise_bf16", "grp_swap_pp_128x32x128_c1x1_precise_bf16",
                      "grp_coop_128x128x128_c1x1_precise_bf16"),
          "blockwise": ("grp_bw_split_bf16", "grp_bw_swap_coop_128x32x128_c1x1_bf16",
                        "grp_bw_coop_128x128x128_c1x1_bf16")}


def on_large_tile(rows, total):
    """Where a split call runs a group: the large tile for more than SPLIT_ROWS rows and more than half of all."""
    return rows > SPLIT_ROWS and 2 * rows > total


def by_tile(args, kw, family, out):
    """Each group of `out` beside the same group from the kernel a split call should run it on, and its rows."""
    small, large = (named(args, kw, family == "fast", k) for k in SPLITS[family][1:])
    total = int(kw["offs"][-1])
    for part, (a, *_) in groups(args, kw):
        yield part(out), part(large if on_large_tile(a.size(0), total) else small), a.size(0)


@pytest.mark.parametrize("family", list(SPLITS))
@pytest.mark.parametrize("sizes", list(SKEWED))
def test_a_split_kernel_runs_each_group_on_its_tile_bit_for_bit(family, sizes):
    """Each group gets the bits of the tile on_large_tile() names, and the rows past the last offset are zeros; the
    dispatch picks the split for these calls (few rows per group on average)."""
    args, kw = on(DEV, moe_call(SKEWED[sizes], 256, 512, blockwise=family == "blockwise", bias=True, extra_rows=5))
    split = named(args, kw, family == "fast", SPLITS[family][0])
    large = 0
    for got, want, rows in by_tile(args, kw, family, split):
        assert torch.equal(got, want), f"{family}: a group of {rows} rows"
        large += on_large_tile(rows, sum(SKEWED[sizes]))
    assert large == (sizes != "a large group among others")
    assert torch.equal(split[-5:], torch.zeros_like(split[-5:]))
    assert torch.equal(fp8ext.scaled_grouped_mm(*args, **kw, use_fast_accum=family == "fast"), split)


def by_splitk(args, kw, fast, out):
    """A split-K call's groups: those on_large_tile() names against float64 (their K in slices), the others bit for
    bit against the small tile."""
    small = named(args, kw, fast, SPLITS["fast" if fast else "precise"][1])
    total = int(kw["offs"][-1])
    for g, (part, (a, b, sa, sb, bias)) in enumerate(groups(args, kw)):
        if on_large_tile(a.size(0), total):
            check_against_reference(part(out), a, b, sa, sb, bias, use_fast_accum=fast, what=f"group {g}")
        else:
            assert torch.equal(part(out), part(small)), f"a group of {a.size(0)} rows"
        yield on_large_tile(a.size(0), total)


@pytest.mark.parametrize("K", [512, 4096])
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("sizes", list(SKEWED))
def test_a_splitk_kernel_runs_the_large_group_in_slices_and_the_others_on_the_small_tile(K, fast, sizes):
    """The large group in slices (K = 512: up to four; 4096: up to sixteen), the same bits on every run. At K = 4096
    these calls (N = 256) are too small for the large tile to fill the GPU: the dispatch picks the split-K kernel."""
    args, kw = on(DEV, moe_call(SKEWED[sizes], 256, K, bias=True, extra_rows=5))
    accum = "fast" if fast else "precise"
    out = named(args, kw, fast, f"grp_splitk_{accum}_bf16")
    assert sum(by_splitk(args, kw, fast, out)) == (sizes != "a large group among others")
    assert torch.equal(out[-5:], torch.zeros_like(out[-5:]))
    assert torch.equal(named(args, kw, fast, f"grp_splitk_{accum}_bf16"), out)
    if K == 4096:  # at K = 512 the dispatch picks the split kernel, whose bits may or may not differ
        assert torch.equal(fp8ext.scaled_grouped_mm(*args, **kw, use_fast_accum=fast), out)


def test_a_partial_kernel_is_not_a_kernel_of_its_own():
    args, kw = on(DEV, moe_call([5, 0, 1, 37], 256, 512))
    with pytest.raises(RuntimeError, match="float32 partial sums"):
        named(args, kw, True, "grp_coop_128x128x128_c1x1_fast_fp32")


def captured_call(sizes, kernel=None):
    """A 2d x 3d call with groups of `sizes` rows, precise, on `kernel` (the dispatch's if None), run once and then
    captured: (args, kwargs, graph, its output)."""
    args, kw = on(DEV, moe_call(sizes, 256, 256))
    call = (lambda: fp8ext.scaled_grouped_mm(*args, **kw)) if kernel is None else (
        lambda: named(args, kw, False, kernel))
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    return args, kw, graph, captured


REPLAYED = ([0] * 5 + [180] + [0] * 6, [SPLIT_ROWS + 1, 179 - SPLIT_ROWS] + [0] * 10, [1] * 11 + [169],
            [0] * 10 + [90, 90])


def test_a_captured_split_call_moves_groups_between_tiles_at_replay():
    """Which tile a group runs on is decided on the device: one capture serves offsets with and without a large
    group."""
    sizes = [15] * 12  # 180 rows, 15 per group
    args, kw, graph, captured = captured_call(sizes, "grp_split_precise_bf16")
    for new in (sizes, *REPLAYED):
        kw["offs"].copy_(ends(new).to(DEV))
        graph.replay()
        for got, want, rows in by_tile(args, kw, "precise", captured):
            assert torch.equal(got, want), (new, rows)


def test_a_captured_splitk_call_moves_groups_between_slices_and_the_small_tile_at_replay():
    """The split-K kernel decides on the device too, slices included."""
    sizes = [15] * 12
    args, kw, graph, captured = captured_call(sizes, "grp_splitk_precise_bf16")
    for new in (sizes, *REPLAYED):
        kw["offs"].copy_(ends(new).to(DEV))
        graph.replay()
        assert sum(by_splitk(args, kw, False, captured)) == any(on_large_tile(n, 180) for n in new), new


@pytest.mark.parametrize("case", list(GPU_CASES))
@pytest.mark.parametrize("use_fast_accum", [False, True])
def test_every_group_against_float64(case, use_fast_accum):
    args, kw = on(DEV, GPU_CASES[case]())
    out = fp8ext.scaled_grouped_mm(*args, **kw, use_fast_accum=use_fast_accum)
    assert out.dtype == torch.bfloat16 and out.is_contiguous() and out.device.type == "cuda"
    for g, (part, (a, b, sa, sb, bias)) in enumerate(groups(args, kw)):
        if a.numel() and b.numel():
            check_against_reference(part(out), a, b, sa, sb, bias, use_fast_accum=use_fast_accum,
                                    what=f"{case}: group {g}")
        elif part(out).numel():  # an empty K slice: its bias, or zeros
            want = torch.zeros_like(part(out)) if bias is None else bias.expand_as(part(out))
            assert torch.equal(part(out), want), f"{case}: group {g}"
    if kw.get("offs") is not None and args[0].dim() == 2 and args[1].dim() == 3:  # 2d x 3d: rows past the last offset
        end = int(kw["offs"][-1])
        assert torch.equal(out[end:], torch.zeros_like(out[end:])), case


@pytest.mark.parametrize("sizes", [[7, 0, 1, 40], [130, 3, 0, 257], [5, 0, 1, 9, 16]])  # the last: the decode kernel
@pytest.mark.parametrize("use_fast_accum", [False, True])
def test_bit_exact_on_small_integers(sizes, use_fast_accum):
    """Operands in {-1, 0, 1}, scales powers of two, K = 64: every sum is exact in either accumulator and in bf16."""
    gen = torch.Generator().manual_seed(5)
    G, T, N, K = len(sizes), sum(sizes), 128, 64
    a = torch.randint(-1, 2, (T, K), generator=gen).float().to(torch.float8_e4m3fn)
    w = torch.randint(-1, 2, (G, N, K), generator=gen).float().to(torch.float8_e4m3fn)
    sa = torch.exp2(torch.randint(-3, 3, (T,), generator=gen).float())
    sb = torch.exp2(torch.randint(-3, 3, (G, N), generator=gen).float())
    offs = ends(sizes)
    want = torch.zeros(T, N, dtype=torch.float64)
    start = 0
    for g, end in enumerate(offs.tolist()):
        want[start:end] = (a[start:end].double() @ w[g].double().t()) * sa[start:end, None].double() * sb[g].double()
        start = end
    args, kw = on(DEV, ((a, w.transpose(-2, -1), sa, sb), {"offs": offs}))
    out = fp8ext.scaled_grouped_mm(*args, **kw, use_fast_accum=use_fast_accum)
    assert torch.equal(out.cpu(), want.to(torch.bfloat16))


def test_a_call_never_waits_for_the_gpu():
    args, kw = on(DEV, GPU_CASES["2d3d decode-sized groups"]())
    fp8ext.scaled_grouped_mm(*args, **kw)  # first call: library loading, allocator warm-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fp8ext.scaled_grouped_mm(*args, **kw)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_a_cuda_graph_replays_with_new_offsets():
    """The group sizes are read on the device: a captured call recomputes for whatever offs holds at replay."""
    args, kw, graph, captured = captured_call([10, 20, 30, 40])
    offs = kw["offs"]
    for sizes in ([10, 20, 30, 40], [0, 100, 0, 0], [1, 2, 3, 4], [25, 25, 25, 25]):
        offs.copy_(ends(sizes).to(DEV))
        graph.replay()
        assert torch.equal(captured, fp8ext.scaled_grouped_mm(*args, **kw)), sizes


@pytest.mark.parametrize("case", ["2d3d decode-sized groups", "3d3d large M", "2d2d small M, an empty K slice",
                                  "2d3d block-wise, decode-sized groups"])
def test_opcheck(case):
    args, kw = on(DEV, GPU_CASES[case]())
    assert_opcheck(torch.ops.fp8ext.scaled_grouped_mm.default,
                   (*args, kw.get("offs"), kw.get("bias"), kw["out_dtype"], False))


def test_a_compiled_call_runs_the_same_kernel():
    args, kw = on(DEV, GPU_CASES["2d3d large groups"]())
    torch._dynamo.reset()
    compiled = torch.compile(fp8ext.scaled_grouped_mm, fullgraph=True)
    assert torch.equal(compiled(*args, **kw), fp8ext.scaled_grouped_mm(*args, **kw))


@pytest.mark.parametrize("case", ["2d3d decode-sized groups", "2d3d large groups"])
def test_torch_scaled_grouped_mm_takes_the_same_tensors(case):
    """A drop-in: torch's row-wise grouped GEMM on the same tensors is within the same bound, group by group."""
    args, kw = on(DEV, GPU_CASES[case]())
    theirs = torch._scaled_grouped_mm(*args, offs=kw["offs"], out_dtype=torch.bfloat16, use_fast_accum=True)
    ours = fp8ext.scaled_grouped_mm(*args, offs=kw["offs"], use_fast_accum=True)
    for g, (part, (a, b, sa, sb, _)) in enumerate(groups(args, {"offs": kw["offs"]})):
        if a.numel():
            check_against_reference(part(theirs), a, b, sa, sb, use_fast_accum=True, what=f"torch: group {g}")
            check_against_reference(part(ours), a, b, sa, sb, use_fast_accum=True, what=f"fp8ext: group {g}")


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.id)
def test_each_bad_call_gets_its_cpu_message(case):
    args, kwargs = case.build(DEV)
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError) as info:
        fp8ext.scaled_grouped_mm(*args, **kwargs)
    assert str(info.value).splitlines()[0] == case.message


@pytest.mark.parametrize("blockwise", [False, True])
def test_an_output_the_cuda_kernels_do_not_write_is_refused(blockwise):
    args, kw = on(DEV, moe_call([4, 9], 128, 256, blockwise=blockwise, out_dtype=torch.float16))
    with pytest.raises(RuntimeError, match="^fp8ext.scaled_grouped_mm: out_dtype: the CUDA kernels write "
                                           "torch.bfloat16 in this version, got torch.float16"):
        fp8ext.scaled_grouped_mm(*args, **kw)


def check_masked(out, a, b, sa, sb, bias, counts, blockwise, use_fast_accum, what):
    """Each group's first counts[g] rows of a masked call's output against float64."""
    for g, n in enumerate(counts.tolist()):
        if n:
            check_against_reference(out[g, :n], a[g, :n], b[g], sa[g, :n] if blockwise else sa[g, :n, None],
                                    sb[g] if blockwise else sb[g, None], bias[g], use_fast_accum=use_fast_accum,
                                    what=f"{what}: group {g}")


@pytest.mark.parametrize("accum", ["fast", "precise", "blockwise"])
def test_a_masked_call_of_few_expected_rows_runs_the_grouped_decode_kernel(accum):
    """The dispatch: expected_m = GEMV_ROWS on the decode kernel, one row more on the swapped tile."""
    fast, bw = accum == "fast", accum == "blockwise"
    (a, b, sa, sb), kw = on(DEV, batched_call(6, 24, 256, 384, blockwise=bw, bias=True))
    counts = torch.tensor([9, 0, 1, 8, 24, 3], dtype=torch.int32, device=DEV)
    decode, swapped = decode_and_swapped(accum)
    for expected_m, kernel in ((GEMV_ROWS, decode), (GEMV_ROWS + 1, swapped)):
        out = fp8ext.scaled_grouped_mm_masked(a, b, sa, sb, counts, bias=kw["bias"], use_fast_accum=fast,
                                              expected_m=expected_m)
        want = torch.ops.fp8ext._scaled_grouped_mm_with_kernel(a, b, sa, sb, None, kw["bias"], None, fast, kernel,
                                                               counts)
        for g, n in enumerate(counts.tolist()):
            assert torch.equal(out[g, :n], want[g, :n]), f"{kernel}: group {g}"


@pytest.mark.parametrize("scaling", ["row-wise", "block-wise", "block-wise, torch's scale layout"])
@pytest.mark.parametrize("expected_m", [8, None])  # the decode kernel, the cooperative one (M_max = 96)
def test_a_masked_call_against_float64_and_replayed_with_new_counts(scaling, expected_m):
    blockwise = scaling != "row-wise"
    built = batched_call(4, 96, 256, 384, blockwise=blockwise, bias=True)
    (a, b, sa, sb), kw = on(DEV, torch_scale_layout(built) if "torch" in scaling else built)
    counts = torch.tensor([96, 0, 1, 37], dtype=torch.int32, device=DEV)

    def call():
        return fp8ext.scaled_grouped_mm_masked(a, b, sa, sb, counts, bias=kw["bias"], expected_m=expected_m)

    def check(out, what):
        check_masked(out, a, b, sa, sb, kw["bias"], counts, blockwise, False, what)

    check(call(), "eager")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    for sizes in ([1, 2, 3, 4], [0, 96, 0, 50]):
        counts.copy_(torch.tensor(sizes, dtype=torch.int32))
        graph.replay()
        check(captured, f"replay {sizes}")


@pytest.mark.parametrize("kernel", sorted(k for k in kernel_names() if "_gemv_" in k or "_swap_" in k)
                         if torch.cuda.is_available() else ["<no GPU>"])
def test_a_masked_call_on_each_small_rows_kernel_by_name_against_float64(kernel):
    """Counts of 37, 0, 1 and 8 rows of 40: the decode kernel runs the 37 in two chunks of 32."""
    blockwise = kernel.startswith("grp_bw_")
    (a, b, sa, sb), kw = on(DEV, batched_call(4, 40, 320, 384, blockwise=blockwise, bias=True))
    counts = torch.tensor([37, 0, 1, 8], dtype=torch.int32, device=DEV)
    fast = "_fast_" in kernel
    out = torch.ops.fp8ext._scaled_grouped_mm_with_kernel(a, b, sa, sb, None, kw["bias"], None, fast, kernel, counts)
    check_masked(out, a, b, sa, sb, kw["bias"], counts, blockwise, fast, kernel)


@pytest.mark.parametrize("kernel", sorted(k for k in kernel_names() if "_gemv_" in k)
                         if torch.cuda.is_available() else ["<no GPU>"])
def test_a_masked_call_of_many_groups_against_float64(kernel):
    """96 experts of 1024 x 640 with 0-8 rows each (a decode step's masked call): 1536 blocks of 64 columns, several
    waves on any Hopper part."""
    blockwise = kernel.startswith("grp_bw_")
    (a, b, sa, sb), kw = on(DEV, batched_call(96, 8, 1024, 640, blockwise=blockwise, bias=True, seed=7))
    counts = torch.randint(0, 9, (96,), generator=torch.Generator().manual_seed(3), dtype=torch.int32).to(DEV)
    fast = "_fast_" in kernel
    out = torch.ops.fp8ext._scaled_grouped_mm_with_kernel(a, b, sa, sb, None, kw["bias"], None, fast, kernel, counts)
    check_masked(out, a, b, sa, sb, kw["bias"], counts, blockwise, fast, kernel)


@pytest.mark.parametrize("kernel", sorted(kernel_names()) if torch.cuda.is_available() else ["<no GPU>"])
@pytest.mark.parametrize("case", ["2d3d decode-sized groups", "3d3d large M", "2d2d small M, an empty K slice",
                                  "2d3d block-wise, large groups", "2d3d block-wise, torch's scale layout",
                                  "2d3d block-wise, sliced scales"])
def test_every_kernel_by_name_against_float64(kernel, case):
    args, kw = on(DEV, GPU_CASES[case]())
    blockwise = args[2].dim() == args[0].dim()
    if kernel.startswith("grp_bw_") != blockwise:
        with pytest.raises(RuntimeError, match="takes (row|block)-wise scales, the call has"):
            torch.ops.fp8ext._scaled_grouped_mm_with_kernel(*args, kw.get("offs"), kw.get("bias"), None, True,
                                                            kernel)
        return
    fast = "_fast_" in kernel
    out = torch.ops.fp8ext._scaled_grouped_mm_with_kernel(*args, kw.get("offs"), kw.get("bias"), None, fast, kernel)
    for g, (part, (a, b, sa, sb, bias)) in enumerate(groups(args, kw)):
        if a.numel() and b.numel():
            check_against_reference(part(out), a, b, sa, sb, bias, use_fast_accum=fast, what=f"{kernel}: group {g}")
