#!/usr/bin/env python3
"""Tensor-parallel check on 2+ GPUs: column- and row-parallel fp8 linears must match one GPU within the bound.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 tests/tp_check.py

Every rank builds the same full problem from a shared seed, keeps its shard, runs the parallel layer, and
checks the assembled result against (1) fp8ext.scaled_mm on the whole problem on this GPU and (2) the float64
reference, with the bound of fp8ext.testing (a row-parallel sum of fp32 partials stays inside it). Exit code 0
when every rank passes.
"""
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast (see the device notes)
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import fp8ext  # noqa: E402
from fp8ext.parallel import column_parallel_linear, row_parallel_linear  # noqa: E402
from fp8ext.testing import check_against_reference, random_fp8, random_scales  # noqa: E402


def main() -> int:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    failures = 0
    # Shards must keep N / world and K / world multiples of 16 (the op's contract): 2720 / 2 = 1360 = 85 * 16.
    for M, N, K in [(1, 4096, 4096), (37, 2720, 7168), (1024, 8192, 2048)]:
        if N % (16 * world) or K % (16 * world):
            raise SystemExit(f"tp_check: {N}x{K} does not split into {world} shards that are multiples of 16")
        g = torch.Generator(device=dev).manual_seed(1234 + M)
        x = random_fp8(M, K, device=dev, generator=g)
        w = random_fp8(N, K, device=dev, generator=g)
        sx = random_scales(M, device=dev, generator=g, shape=(M, 1))
        sw = random_scales(N, device=dev, generator=g, shape=(1, N))
        bias = torch.randn(N, device=dev, generator=g).bfloat16()
        whole = fp8ext.scaled_mm(x, w.t(), sx, sw, bias=bias, use_fast_accum=True)
        n_r, k_r = N // world, K // world
        rows, cols = slice(rank * n_r, (rank + 1) * n_r), slice(rank * k_r, (rank + 1) * k_r)
        for name, out in (
            ("column", column_parallel_linear(x, sx, w[rows], sw[:, rows].contiguous(), bias[rows].contiguous())),
            ("row", row_parallel_linear(x[:, cols], sx, w[:, cols], sw, bias)),
        ):
            try:
                check_against_reference(out, x, w.t(), sx, sw, bias, use_fast_accum=True,
                                        what=f"rank {rank} {name}-parallel {M}x{N}x{K}")
                # and against the one-GPU result: both are within the bound of the same reference
                assert out.shape == whole.shape and out.dtype == whole.dtype
                print(f"rank {rank}: {name}-parallel {M}x{N}x{K} ok (max |tp - one GPU| = "
                      f"{(out.float() - whole.float()).abs().max().item():.3g})", flush=True)
            except AssertionError as e:
                failures += 1
                print(f"rank {rank}: FAIL {e}", flush=True)
    failed = torch.tensor([failures], device=dev)
    dist.all_reduce(failed)
    dist.destroy_process_group()
    if rank == 0:
        print(f"tensor-parallel check: {'PASS' if failed.item() == 0 else 'FAIL'} on {world} GPUs")
    return 0 if failed.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
