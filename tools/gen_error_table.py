#!/usr/bin/env python3
"""Write docs/errors.md from tests/validation_cases.py and tests/grouped_validation_cases.py: every input
fp8ext.scaled_mm and fp8ext.scaled_grouped_mm reject, with its message.

    python tools/gen_error_table.py

tests/test_validation.py and tests/test_grouped_cpu.py check that each case raises exactly the listed message
(eager, and traced by the fake implementation) and that this page is exactly what this script writes.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from validation_cases import CASES, K, M, N  # noqa: E402
import grouped_validation_cases as grouped  # noqa: E402

HEADER = f"""# Errors raised by fp8ext.scaled_mm

Every argument is checked before anything is allocated or launched. A rejected call raises `RuntimeError`
whose first line names the argument, what was expected and what was given. The examples below use
M = {M}, N = {N}, K = {K}; each row is a test in `tests/test_validation.py` (generated from
`tests/validation_cases.py` by `tools/gen_error_table.py`). Rows marked GPU need tensors on a CUDA device.
Traced calls (`torch.compile`, `torch.export`, `FakeTensorMode`) raise the same messages while tracing: the fake
implementation runs the same C++ checks on the tensors' metadata.

| # | rejected input | message |
|---|---|---|
"""


GROUPED_HEADER = """
## fp8ext.scaled_grouped_mm

The same rule: every check that the tensors' shapes, strides, dtypes and devices decide runs before anything is
allocated, eager and traced alike. The values of `offs` are checked where they are read on the host (the CPU
backend; rows G1-G4). The examples break one thing of a valid call: a MoE forward (2d x 3d) of G = 6 groups of
5, 0, 1, 37, 16 and 3 rows (T = 62), N = 64, K = 96, row-wise scales; or a 3d x 3d call (G = 3, M = 17); or a
2d x 2d call (M = 24, K slices of 32, 0, 96 and 16). Each row is a test in `tests/test_grouped_cpu.py` (from
`tests/grouped_validation_cases.py`).

| # | rejected input | message |
|---|---|---|
"""


MASKED_HEADER = """
## fp8ext.scaled_grouped_mm_masked

Its call breaks one thing of a valid masked call (a [3, 17, 96], b [3, 96, 64], row-wise scales, masked_m = (17, 0,
5)); its other arguments are checked as scaled_grouped_mm's 3d x 3d layout, with this op's name. The counts are
checked where they are read on the host (the CPU backend; row M1).

| # | rejected input | message |
|---|---|---|
"""


def _rows(cases, prefix="") -> list:
    return [f"| {prefix}{i} | {case.what}{' (GPU)' if case.gpu_only else ''} | `{case.message}` |"
            for i, case in enumerate(cases, 1)]


OTHER_OPS = """
## The other ops

`fp8ext.quantize_rowwise`, `fp8ext.quantize_blockwise`, `fp8ext.silu_mul_quantize_rowwise`, `fp8ext.moe_dispatch`
and `fp8ext.moe_combine` follow the same rule: each argument is checked before anything is allocated or launched,
eager and traced alike, and a rejected call raises `RuntimeError` starting `fp8ext.<op>: <argument>: `, then what
was expected and what was given. Their cases are tests beside the ops' others: `tests/test_quantize.py`,
`tests/test_blockwise.py`, `tests/test_silu_mul_quantize.py` and `tests/test_moe_routing.py`.
"""


def render() -> str:
    """The text of docs/errors.md."""
    return (HEADER + "\n".join(_rows(CASES)) + "\n" + GROUPED_HEADER
            + "\n".join(_rows(grouped.VALUE_CASES + grouped.CASES, "G")) + "\n" + MASKED_HEADER
            + "\n".join(_rows(grouped.MASKED_VALUE_CASES + grouped.MASKED_CASES, "M")) + "\n" + OTHER_OPS)


def main() -> int:
    text = render()
    (ROOT / "docs" / "errors.md").write_text(text)
    print(f"docs/errors.md: {text.count(chr(10) + '| ') - 1} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
