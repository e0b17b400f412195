"""Kernels for Nsight Compute, each profiled once after a warm-up call.

  quant: fp8ext.quantize_rowwise at 1 x 8192, 16 x 8192 and 16 x 4096 (bf16), and a one-element torch add;
  bw:    block-wise 8192 x 7168 x 7168, fp8ext's bw_coop_128x128x128_c2x1_ov_bf16 (forced, no backstop) and
         torch._scaled_mm block-wise (cuBLASLt) on the same tensors; `bw time` times both instead (CUDA events,
         interleaved, medians) and profiles nothing;
  names: no Nsight Compute: the kernels torch._scaled_mm block-wise runs at four large shapes, by torch.profiler
         (python scripts/profile_ncu_kernels.py names).

Only the calls between torch.cuda.profiler.start() and stop() are profiled:

  ncu --clock-control none --profile-from-start off --set full -o report python scripts/profile_ncu_kernels.py bw
  ncu --import report.ncu-rep --page details --csv > details.csv

Records: bench/results/ncu/h200-2026-12-02-ff7f6de-{blockwise-8192x7168x7168,quantize-small-m}.csv,
bench/results/h200-2026-12-02-torch-blockwise-kernel-names.json.
"""
import sys
import torch
import fp8ext



def blockwise_problem(M, N, K):
    """a [M, K] and w [N, K] in e4m3 (randn / 4), scales uniform in [0.5, 1.5) in torch's block-wise layouts."""
    a = (torch.randn(M, K, device="cuda") / 4).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, device="cuda") / 4).to(torch.float8_e4m3fn)
    sa = torch.rand(K // 128, M, device="cuda").add_(0.5).t()
    sb = torch.rand(N // 128, K // 128, device="cuda").add_(0.5).t()
    return a, w, sa, sb


torch.manual_seed(0)
which = sys.argv[1]
if which == "names":
    from torch.profiler import ProfilerActivity, profile

    for M, N, K in [(4096, 7168, 2048), (8192, 24576, 1536), (16384, 7168, 18432), (9540, 28672, 3584)]:
        a, w, sa, sb = blockwise_problem(M, N, K)
        for _ in range(3):
            torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16)
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
        print(M, N, K, names, flush=True)
elif which == "quant":
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for m, k in [(1, 8192), (16, 8192), (16, 4096)]]
    one = torch.randn(1, device="cuda", dtype=torch.bfloat16)
    for x in xs:
        fp8ext.quantize_rowwise(x)
    one.add_(1)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for x in xs:
        fp8ext.quantize_rowwise(x)
    one.add_(1)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
else:
    M, N, K = 8192, 7168, 7168
    a, w, sa, sb = blockwise_problem(M, N, K)
    fp8ext.set_backends("fp8ext")

    def ours():
        with fp8ext.force_kernel("bw_coop_128x128x128_c2x1_ov_bf16"):
            return fp8ext.scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16)

    def theirs():
        return torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16)

    o1, o2 = ours(), theirs()
    torch.cuda.synchronize()
    print("max |ours - torch| / max |torch|", ((o1.float() - o2.float()).abs().max() / o2.float().abs().max()).item())
    if len(sys.argv) > 2:  # plain timing, no profiler: interleaved, medians
        t = {"ours": [], "torch": []}
        for _ in range(30):
            for name, fn in (("ours", ours), ("torch", theirs)):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); fn(); e.record(); e.synchronize()
                t[name].append(s.elapsed_time(e) * 1e3)
        for name, v in t.items():
            v.sort()
            print(name, "median us", v[len(v) // 2], "TFLOP/s", 2 * M * N * K / v[len(v) // 2] / 1e6)
    else:
        torch.cuda.profiler.start()
        ours()
        theirs()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
