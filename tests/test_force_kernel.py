"""fp8ext.force_kernel: blocks nest and restore the outer block's kernel, the setting is process-wide (another
thread sees it), and a forced kernel that cannot compute a call says how to clear it. Needs a build with CUDA
kernels (a GPU only for the call itself)."""
import threading

import pytest
import torch

import fp8ext

pytestmark = pytest.mark.skipif(not fp8ext.kernel_names(), reason="a CPU-only build has no kernels to force")
SHAPE = (64, 4096, 4096)  # bf16 out, fast accumulation: what every build's kernels include


def base_name():
    return fp8ext.selected_kernel(*SHAPE).split("@")[0]


def test_nested_blocks_restore_the_outer_kernel():
    heuristic = fp8ext.selected_kernel(*SHAPE)
    outer, inner = base_name() + "@N4", base_name() + "@M1"
    with fp8ext.force_kernel(outer):
        assert fp8ext.selected_kernel(*SHAPE) == outer
        with fp8ext.force_kernel(inner):
            assert fp8ext.selected_kernel(*SHAPE) == inner
        assert fp8ext.selected_kernel(*SHAPE) == outer
        with fp8ext.force_kernel(None):
            assert fp8ext.selected_kernel(*SHAPE) == heuristic
        assert fp8ext.selected_kernel(*SHAPE) == outer
        with pytest.raises(ValueError), fp8ext.force_kernel(inner):
            raise ValueError("an error inside the inner block")
        assert fp8ext.selected_kernel(*SHAPE) == outer
    assert fp8ext.selected_kernel(*SHAPE) == heuristic


def test_the_setting_is_process_wide():
    heuristic = fp8ext.selected_kernel(*SHAPE)
    forced = base_name() + "@N2"
    opened, checked = threading.Event(), threading.Event()

    def other_thread():
        with fp8ext.force_kernel(forced):
            opened.set()
            checked.wait(timeout=60)

    t = threading.Thread(target=other_thread)
    t.start()
    try:
        assert opened.wait(timeout=60)
        assert fp8ext.selected_kernel(*SHAPE) == forced  # this thread sees the other thread's block
    finally:
        checked.set()
        t.join()
    assert fp8ext.selected_kernel(*SHAPE) == heuristic


@pytest.mark.gpu
def test_a_forced_kernel_that_cannot_compute_the_call_says_how_to_clear_it():
    from fp8ext.testing import random_operands
    a, b, sa, sb = random_operands(*SHAPE, device="cuda")
    with fp8ext.force_kernel(base_name()):  # a bf16-output kernel
        with pytest.raises(RuntimeError) as info:
            fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=True)
    message = str(info.value)
    assert f"the forced kernel '{base_name()}' does not compute this call" in message
    assert "after the `with fp8ext.force_kernel(...):` block that forced it has ended" in message
    assert "force_kernel(None)" not in message
