"""The tensor-parallel layers' sharding arithmetic, on CPU with the gloo backend (two processes). The NCCL run on
two GPUs is tests/test_multigpu.py; this one runs in CI."""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fp8ext.parallel import column_parallel_linear, row_parallel_linear
from fp8ext.testing import check_against_reference, random_fp8, random_scales


def _worker(rank, world, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(7)
        M, N, K = 5, 64, 96
        x, w = random_fp8(M, K, generator=g), random_fp8(N, K, generator=g)
        sx = random_scales(M, generator=g, shape=(M, 1))
        sw = random_scales(N, generator=g, shape=(1, N))
        bias = torch.randn(N, generator=g).bfloat16()
        n_r, k_r = N // world, K // world
        rows, cols = slice(rank * n_r, (rank + 1) * n_r), slice(rank * k_r, (rank + 1) * k_r)
        col = column_parallel_linear(x, sx, w[rows], sw[:, rows].contiguous(), bias[rows].contiguous())
        row = row_parallel_linear(x[:, cols], sx, w[:, cols], sw, bias)
        for name, out in (("column", col), ("row", row)):
            check_against_reference(out, x, w.t(), sx, sw, bias, use_fast_accum=False, what=f"{name} rank {rank}")
        results[rank] = "ok"
    except Exception as e:  # reported to the parent, which asserts
        results[rank] = f"{type(e).__name__}: {e}"
    finally:
        dist.destroy_process_group()


def test_column_and_row_parallel_match_reference():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = 2
    results = mp.Manager().dict()
    mp.spawn(_worker, args=(world, port, results), nprocs=world, join=True)
    assert dict(results) == {r: "ok" for r in range(world)}, dict(results)
