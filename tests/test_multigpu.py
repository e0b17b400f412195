"""Two GPUs: the op computes on its tensors' device whatever the current device is, mixed devices raise, and a
tensor-parallel linear over NCCL matches one GPU (tests/tp_check.py under torchrun)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fp8ext
from fp8ext.testing import check_against_reference, random_operands

pytestmark = pytest.mark.multigpu
ROOT = Path(__file__).resolve().parent.parent


def operands(device, M=257, N=2736, K=1040):
    return random_operands(M, N, K, device=device)


@pytest.mark.parametrize("M", [1, 257])
def test_computes_on_the_tensors_device(M):
    torch.cuda.set_device(0)
    a, b, sa, sb = operands("cuda:1", M=M)
    torch.cuda.synchronize(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
        torch.cuda.synchronize(1)
    assert out.device == torch.device("cuda:1")
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert kernels, "the profiler saw no kernel"
    assert {e.device_index for e in kernels} == {1}, [(e.name, e.device_index) for e in kernels]
    assert torch.cuda.current_device() == 0
    check_against_reference(out, a, b, sa, sb, use_fast_accum=True, what="cuda:1")


def test_tensors_on_two_gpus_raise():
    a, _, sa, _ = operands("cuda:0")
    _, b, _, sb = operands("cuda:1")
    with pytest.raises(RuntimeError, match=r"b: expected a tensor on cuda:0 \(the device of a\), got one on cuda:1"):
        fp8ext.scaled_mm(a, b, sa, sb.to("cuda:0"))


def test_tensor_parallel_linear_matches_one_gpu():
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(ROOT / "tests" / "tp_check.py")], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0 and "tensor-parallel check: PASS" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
