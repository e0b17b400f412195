"""The calls the grouped tests share: valid calls of every layout and scaling, and each group's slices as
fp8ext.scaled_mm takes them (tests/test_grouped_cpu.py, tests/test_grouped_gpu.py). Built on the CPU from fresh
seeded random values; the GPU tests move them (strides kept)."""
import torch

E4M3 = torch.float8_e4m3fn


def fp8(*shape, gen):
    return (torch.randn(*shape, generator=gen) * 2).to(E4M3)


def scales(*shape, gen):
    return torch.exp2(-9 + 4 * torch.rand(*shape, generator=gen))


def ends(sizes):
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32)


def moe_call(sizes, N, K, blockwise=False, bias=False, out_dtype=torch.bfloat16, extra_rows=0, seed=0):
    """2d x 3d: groups of ``sizes`` rows (then ``extra_rows`` rows of no group), experts' weights [G, N, K]."""
    gen = torch.Generator().manual_seed(seed)
    G, T = len(sizes), sum(sizes) + extra_rows
    a, w = fp8(T, K, gen=gen), fp8(G, N, K, gen=gen)
    gk, hn = -(-K // 128), -(-N // 128)
    if blockwise:
        sa, sb = scales(T, gk, gen=gen), scales(G, hn, gk, gen=gen).transpose(-2, -1)
    else:
        sa, sb = scales(T, gen=gen), scales(G, N, gen=gen)
    kw = dict(offs=ends(sizes), bias=(torch.randn(G, N, generator=gen) * 4).to(out_dtype) if bias else None,
              out_dtype=out_dtype)
    return (a, w.transpose(-2, -1), sa, sb), kw


def batched_call(G, M, N, K, blockwise=False, bias=False, out_dtype=torch.bfloat16, seed=1):
    gen = torch.Generator().manual_seed(seed)
    a, w = fp8(G, M, K, gen=gen), fp8(G, N, K, gen=gen)
    gk, hn = -(-K // 128), -(-N // 128)
    if blockwise:
        sa, sb = scales(G, M, gk, gen=gen), scales(G, hn, gk, gen=gen).transpose(-2, -1)
    else:
        sa, sb = scales(G, M, gen=gen), scales(G, N, gen=gen)
    kw = dict(bias=(torch.randn(G, N, generator=gen) * 4).to(out_dtype) if bias else None, out_dtype=out_dtype)
    return (a, w.transpose(-2, -1), sa, sb), kw


def torch_scale_layout(call):
    """A block-wise call with scale_a's K groups apart (torch's layout, strides (1, T)), as quantize_blockwise
    returns it."""
    (a, b, sa, sb), kw = call
    return (a, b, sa.transpose(-2, -1).contiguous().transpose(-2, -1), sb), kw


def sliced_scales(call, pad=3):
    """A block-wise call whose scales are slices of wider tensors, NaN beyond the slice: scale_a's rows and each
    weight scale row lie ceil(K / 128) + pad floats apart, so a kernel that takes them as packed reads NaN."""
    (a, b, sa, sb), kw = call
    s = sb.transpose(-2, -1)  # the weights' [G, ceil(N / 128), ceil(K / 128)] scales
    nan = float("nan")
    sa = torch.cat([sa, torch.full((*sa.shape[:-1], pad), nan)], -1)[..., :sa.size(-1)]
    s = torch.cat([s, torch.full((*s.shape[:-1], pad), nan)], -1)[..., :s.size(-1)]
    return (a, b, sa, s.transpose(-2, -1)), kw


def weight_grad_call(M, N, k_sizes, bias=False, out_dtype=torch.bfloat16, seed=2):
    """2d x 2d: a [M, K_total] row-major, b [K_total, N] column-major, K slices of ``k_sizes``."""
    gen = torch.Generator().manual_seed(seed)
    G, K = len(k_sizes), sum(k_sizes)
    a, bt = fp8(M, K, gen=gen), fp8(N, K, gen=gen)
    kw = dict(offs=ends(k_sizes), bias=(torch.randn(G, N, generator=gen) * 4).to(out_dtype) if bias else None,
              out_dtype=out_dtype)
    return (a, bt.t(), scales(G * M, gen=gen), scales(G * N, gen=gen)), kw


def groups(args, kw):
    """Each group's (slice of out, scaled_mm's arguments for it) as scaled_mm takes them."""
    a, b, sa, sb = args
    blockwise = sa.dim() == a.dim()
    offs = kw.get("offs")
    bias = kw.get("bias")
    start = 0
    for g in range(b.size(0) if b.dim() == 3 else offs.numel()):
        bias_g = None if bias is None else bias[g]
        if a.dim() == 2 and b.dim() == 3:
            end = int(offs[g])
            rows = slice(start, end)
            scale_a = sa[rows] if blockwise else sa[rows].view(-1, 1)
            scale_b = sb[g] if blockwise else sb[g].view(1, -1)
            yield (lambda out, rows=rows: out[rows]), (a[rows], b[g], scale_a, scale_b, bias_g)
            start = end
        elif a.dim() == 3:
            scale_a = sa[g] if blockwise else sa[g].view(-1, 1)
            scale_b = sb[g] if blockwise else sb[g].view(1, -1)
            yield (lambda out, g=g: out[g]), (a[g], b[g], scale_a, scale_b, bias_g)
        else:
            end, M, N = int(offs[g]), a.size(0), b.size(1)
            yield ((lambda out, g=g: out[g]),
                   (a[:, start:end], b[start:end], sa[g * M:(g + 1) * M].view(-1, 1),
                    sb[g * N:(g + 1) * N].view(1, -1), bias_g))
            start = end


CASES = {
    "2d3d rowwise, empty, 1-row and odd groups": lambda: moe_call([5, 0, 1, 37, 16, 3], 64, 96),
    "2d3d rowwise, bias, fp16 out": lambda: moe_call([9, 24, 0, 7], 48, 64, bias=True, out_dtype=torch.float16),
    "2d3d rowwise, fp32 out, rows past the end": lambda: moe_call([3, 11], 32, 32, out_dtype=torch.float32,
                                                                  extra_rows=5),
    "2d3d blockwise, partial blocks": lambda: moe_call([4, 0, 19, 1], 144, 272, blockwise=True, bias=True),
    "2d3d blockwise, one group": lambda: moe_call([33], 256, 384, blockwise=True),
    "3d3d rowwise": lambda: batched_call(3, 17, 64, 80, bias=True),
    "3d3d blockwise": lambda: batched_call(2, 9, 160, 256, blockwise=True, out_dtype=torch.float32),
    "2d2d rowwise, an empty K slice": lambda: weight_grad_call(24, 48, [32, 0, 96, 16], bias=True),
    "2d2d rowwise, fp32 out": lambda: weight_grad_call(8, 32, [48, 16], out_dtype=torch.float32),
}

ROWWISE, BLOCKWISE, BATCHED, WGRAD = ("2d3d rowwise, empty, 1-row and odd groups", "2d3d blockwise, partial blocks",
                                      "3d3d rowwise", "2d2d rowwise, an empty K slice")


def on(device, call):
    """A call's (args, kwargs) on `device`, strides kept."""
    args, kw = call
    move = lambda v: v.to(device) if isinstance(v, torch.Tensor) else v  # noqa: E731
    return tuple(move(t) for t in args), {k: move(v) for k, v in kw.items()}
