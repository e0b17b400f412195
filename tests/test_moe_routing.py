"""fp8ext.moe_dispatch and fp8ext.moe_combine (the maths in fp8ext/moe_routing.py): on CPU against a slot-by-slot
reference; expert ids out of range give NaN, not a dropped expert; errors name the argument; opcheck and compile. On
an sm_90 GPU, the kernels against the CPU ops bit for bit (every input dtype, int64 and int32 ids, 1 to 1024 slots,
1 to 1023 experts, skewed routing, strided rows), without waiting for the GPU, and replayed in a CUDA graph."""
import pytest
import torch

import fp8ext

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
gpu = pytest.mark.gpu


def routing(T, k, G, skew=False, seed=0, device="cpu", dtype=torch.int64):
    gen = torch.Generator().manual_seed(seed)
    if skew:  # every slot on experts 0, 1, 4 or 9 (clipped to G - 1): most experts empty, repeats within a token
        ids = torch.minimum(torch.randint(0, 4, (T, k), generator=gen) ** 2, torch.tensor(G - 1))
    elif k <= G:  # k distinct experts a token, as top-k gives
        ids = torch.rand(T, G, generator=gen).argsort(dim=1)[:, :k]
    else:
        ids = torch.randint(0, G, (T, k), generator=gen)
    return ids.to(dtype).contiguous().to(device)


def reference_route(ids, G):
    """Expert by expert, each expert's slots in slot order: the stable sort, written out."""
    flat = [int(e) for e in ids.reshape(-1)]
    rows, offs = [], []
    for g in range(G):
        rows += [i for i, e in enumerate(flat) if e == g]
        offs.append(len(rows))
    pos = [-2 if e == G else -1 for e in flat]  # id G: another rank's expert, skipped; other ids: no row, NaN
    for r, i in enumerate(rows):
        pos[i] = r
    return rows, torch.tensor(offs, dtype=torch.int32), torch.tensor(pos, dtype=torch.int32).view(ids.shape)


@pytest.mark.parametrize("T, k, G, skew", [(1, 1, 1, False), (1, 8, 128, False), (5, 2, 8, True),
                                           (64, 8, 128, True), (128, 8, 8, False), (0, 4, 16, False)])
def test_dispatch_is_a_stable_sort_by_expert_and_a_quantize_of_each_row_s_token(T, k, G, skew):
    x = torch.randn(T, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    ids = routing(T, k, G, skew)
    q, scale, offs, pos = fp8ext.moe_dispatch(x, ids, G)
    rows, want_offs, want_pos = reference_route(ids, G)
    assert torch.equal(offs, want_offs) and torch.equal(pos, want_pos)
    wq, ws = fp8ext.quantize_rowwise(x[torch.tensor([i // k for i in rows], dtype=torch.long)])
    assert q.shape == (T * k, 64) and scale.shape == (T * k,)
    assert torch.equal(q.view(torch.uint8), wq.view(torch.uint8)) and torch.equal(scale, ws.view(-1))


def test_an_expert_id_out_of_range_has_no_row_and_makes_its_token_nan():
    x = torch.randn(3, 32)
    ids = torch.tensor([[0, 5], [-1, 2], [1, 0]])  # G = 4: 5 and -1 are out of range
    q, scale, offs, pos = fp8ext.moe_dispatch(x, ids, 4)
    assert offs.tolist() == [2, 3, 4, 4] and pos.tolist() == [[0, -1], [-1, 3], [2, 1]]
    o = torch.randn(6, 32)
    out = fp8ext.moe_combine(o, pos, torch.rand(3, 2))
    assert out[:2].isnan().all() and not out[2].isnan().any()


def test_expert_id_g_has_no_row_and_adds_nothing_as_in_transformers_experts():
    """transformers' expert parallelism routes a slot meant for another rank's expert to id G with weight 0, and
    its experts modules skip that id: so does combine, whatever the slot's weight."""
    x = torch.randn(3, 32)
    ids = torch.tensor([[0, 4], [4, 4], [2, 1]])  # G = 4
    q, scale, offs, pos = fp8ext.moe_dispatch(x, ids, 4)
    assert offs.tolist() == [1, 2, 3, 3] and pos.tolist() == [[0, -2], [-2, -2], [2, 1]]
    o = torch.randn(6, 32)
    w = torch.rand(3, 2) + 0.5
    out = fp8ext.moe_combine(o, pos, w)
    assert torch.equal(out[0], w[0, 0] * o[0]) and torch.equal(out[1], torch.zeros(32))
    assert torch.equal(out[2], w[2, 0] * o[2] + w[2, 1] * o[1])


def test_combine_sums_each_token_s_weighted_rows_in_float32_in_slot_order():
    gen = torch.Generator().manual_seed(2)
    o = torch.randn(12, 48, generator=gen).to(torch.bfloat16)
    pos = torch.randperm(12, generator=gen).to(torch.int32).view(4, 3)
    w = torch.rand(4, 3, generator=gen).to(torch.bfloat16)
    got = fp8ext.moe_combine(o, pos, w)
    want = torch.zeros(4, 48)
    for j in range(3):
        want = want + w[:, j:j + 1].float() * o[pos[:, j].long()].float()
    assert got.dtype == torch.bfloat16 and torch.equal(got, want.to(torch.bfloat16))
    exact = (w.double().unsqueeze(-1) * o.double()[pos.long()]).sum(1)
    torch.testing.assert_close(got.double(), exact, rtol=2 ** -8, atol=1e-6)


X, IDS = torch.randn(4, 64), torch.zeros(4, 2, dtype=torch.long)


@pytest.mark.parametrize("args, message", [
    ((torch.randn(2, 4, 64), IDS, 8), "x: expected a 2-D [T, H] tensor"),
    ((torch.randn(4, 40), IDS, 8), "x: H = 40 (the hidden size, the last dimension) must be a positive multiple"),
    ((X, IDS.float(), 8), "top_k_index: expected dtype torch.int64 or torch.int32"),
    ((X, torch.zeros(3, 2, dtype=torch.long), 8), "top_k_index: expected shape [T, k] = [4, 2]"),
    ((X, torch.zeros(2, 4, dtype=torch.long).t(), 8), "top_k_index: expected a contiguous tensor"),
    ((torch.randn(200, 64), torch.zeros(200, 8, dtype=torch.long), 8), "T * k = 1600 routed slots; at most 1024"),
    ((X, IDS, 0), "num_experts: expected 1 to 1023 experts"),
    ((X, IDS, 1024), "num_experts: expected 1 to 1023 experts"),
])
def test_dispatch_refuses_bad_input_naming_the_argument(args, message):
    with pytest.raises(RuntimeError) as info:
        fp8ext.moe_dispatch(*args)
    assert str(info.value).startswith("fp8ext.moe_dispatch: ") and message in str(info.value), str(info.value)


O, POS, W = torch.randn(8, 32), torch.zeros(4, 2, dtype=torch.int32), torch.rand(4, 2)


@pytest.mark.parametrize("args, message", [
    ((O.double(), POS, W.double()), "o: expected dtype torch.bfloat16, torch.float16 or torch.float32"),
    ((torch.randn(8, 24), POS, W), "o: H = 24"),
    ((torch.randn(32, 8).t(), POS, W), "o: expected a contiguous tensor"),
    ((O, POS.long(), W), "pos: expected dtype torch.int32"),
    ((O, POS, W.to(torch.bfloat16)), "weights: expected dtype torch.float32 (o's)"),
    ((O, POS, torch.rand(4, 3)), "weights: expected shape [T, k] = [4, 2]"),
])
def test_combine_refuses_bad_input_naming_the_argument(args, message):
    with pytest.raises(RuntimeError) as info:
        fp8ext.moe_combine(*args)
    assert str(info.value).startswith("fp8ext.moe_combine: ") and message in str(info.value), str(info.value)


def test_opcheck_and_compile():
    x, ids = torch.randn(5, 64).to(torch.bfloat16), routing(5, 2, 8)
    for op, args in ((torch.ops.fp8ext.moe_dispatch.default, (x, ids, 8)),
                     (torch.ops.fp8ext.moe_combine.default, (torch.randn(10, 64), POS[:3].contiguous(),
                                                             torch.rand(3, 2)))):
        result = torch.library.opcheck(op, args, test_utils=OPCHECK_UTILS)
        assert all(v == "SUCCESS" for v in result.values()), result

    def layer(x, ids, w):
        q, scale, offs, pos = fp8ext.moe_dispatch(x, ids, 8)
        return fp8ext.moe_combine(q.to(torch.bfloat16) * scale.unsqueeze(1).to(torch.bfloat16), pos, w)

    w = torch.rand(5, 2).to(torch.bfloat16)
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x, ids, w), layer(x, ids, w))


def _same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("T, k, G, skew, ids_dtype", [
    (1, 1, 1, False, torch.int64), (1, 8, 128, False, torch.int64), (4, 8, 256, True, torch.int32),
    (8, 8, 128, False, torch.int32), (64, 8, 1023, True, torch.int64), (128, 8, 128, False, torch.int64),
    (1024, 1, 8, True, torch.int32), (37, 3, 5, False, torch.int64)])
def test_cuda_dispatch_equals_the_cpu_op_bit_for_bit(T, k, G, skew, ids_dtype, dtype):
    gen = torch.Generator().manual_seed(T * 31 + G)
    base = (torch.randn(T, 160, generator=gen) * 3).to(dtype)
    for x in (base[:, :128], base[:, 16:144]):  # rows strided (and, for the second, 32-byte offset) views
        ids = routing(T, k, G, skew, seed=T + k, dtype=ids_dtype)
        got = fp8ext.moe_dispatch(x.cuda(), ids.cuda(), G)
        want = fp8ext.moe_dispatch(x, ids, G)
        for g, w in zip(got, want):
            assert _same_bits(g.cpu(), w)


@gpu
def test_cuda_dispatch_with_ids_out_of_range_equals_the_cpu_op():
    x = torch.randn(16, 64).to(torch.bfloat16)
    ids = torch.randint(-2, 10, (16, 4), generator=torch.Generator().manual_seed(7))  # G = 8
    got = fp8ext.moe_dispatch(x.cuda(), ids.cuda(), 8)
    want = fp8ext.moe_dispatch(x, ids, 8)
    for g, w in zip(got, want):
        assert _same_bits(g.cpu(), w)


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("T, k, H", [(1, 8, 2048), (8, 8, 2048), (300, 2, 4096), (5, 1, 16), (3, 4, 1040)])
def test_cuda_combine_equals_the_cpu_op_bit_for_bit(T, k, H, dtype):
    gen = torch.Generator().manual_seed(T + k + H)
    rows = T * k + 3
    o = (torch.randn(rows, H, generator=gen) * 4).to(dtype)
    pos = torch.randperm(rows, generator=gen)[:T * k].to(torch.int32).view(T, k)
    pos[0, 0] = -1 if T > 1 else pos[0, 0]  # one token with no row: NaN
    pos[-1, 0] = -2 if T > 2 else pos[-1, 0]  # a slot of another rank's expert: nothing added
    w = torch.rand(T, k, generator=gen).to(dtype)
    got = fp8ext.moe_combine(o.cuda(), pos.cuda(), w.cuda()).cpu()
    want = fp8ext.moe_combine(o, pos, w)
    # NaN compared as NaN: its bits differ between torch's CPU casts (vectorized 0xffff, scalar 0x7fc0 in bf16) and
    # CUDA's (0x7fff)
    nan_rows = got.isnan().all(dim=1)
    assert torch.equal(got.isnan(), want.isnan()) and nan_rows[0] == (T > 1) and nan_rows.sum() == (T > 1)
    assert _same_bits(got[~nan_rows], want[~nan_rows])


@gpu
def test_cuda_routing_never_waits_for_the_gpu_and_replays_in_a_cuda_graph():
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    ids = routing(8, 4, 32, device="cuda")
    w = torch.rand(8, 4, device="cuda", dtype=torch.bfloat16)

    def step():
        q, scale, offs, pos = fp8ext.moe_dispatch(x, ids, 32)
        o = (q.to(torch.bfloat16) * scale.unsqueeze(1).to(torch.bfloat16)).contiguous()
        return fp8ext.moe_combine(o, pos, w), offs

    want = step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    ids.copy_(routing(8, 4, 32, seed=9, device="cuda"))
    graph.replay()
    fresh = step()
    assert all(torch.equal(c, f) for c, f in zip(captured, fresh)) and not torch.equal(fresh[1], want[1])


@gpu
def test_cuda_opcheck():
    x, ids = torch.randn(5, 64, device="cuda").to(torch.bfloat16), routing(5, 2, 8, device="cuda")
    for op, args in ((torch.ops.fp8ext.moe_dispatch.default, (x, ids, 8)),
                     (torch.ops.fp8ext.moe_combine.default, (torch.randn(10, 64, device="cuda"),
                                                             POS[:3].contiguous().cuda(),
                                                             torch.rand(3, 2, device="cuda")))):
        result = torch.library.opcheck(op, args, test_utils=OPCHECK_UTILS)
        assert all(v == "SUCCESS" for v in result.values()), result
