"""scripts/tune.py's bookkeeping, without a GPU: which rows a sweep measures, how a sweep merges into the base
run, and which kernels the generated table names (the dispatch table is only as good as this)."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import tune  # noqa: E402

PP = "pp_128x128x128_c1x2_fast_bf16"
SK = "sk_128x128x128_c1x1_fast_bf16"
COOP = "coop_128x256x128_c2x1_fast_bf16"


def row(M, kernels, fast=True, N=4096, K=4096):
    return {"M": M, "N": N, "K": K, "use_fast_accum": fast, "kernels": kernels,
            "torch_rowwise_us": 10.0, "torch_tensorwise_us": 10.0}


def test_sweep_candidates_keep_a_kernel_without_workspace():
    r = row(512, {SK: 1.0, "swap_sk_128x32x128_c1x1_fast_bf16": 1.1, PP: 2.0, COOP: 3.0, "gemv_m4_precise_bf16": 0.5})
    assert tune.sweep_candidates(r) == [SK, "swap_sk_128x32x128_c1x1_fast_bf16", PP]
    assert tune.sweep_candidates(row(512, {PP: 1.0, SK: 1.5, COOP: 2.0})) == [PP, SK]


def test_sweep_candidates_add_new_kernels_only_where_they_fit_m():
    new = ("swap_pp_64x128x128_c1x1_fast_bf16", "swap_pp_64x128x128_c1x1_precise_bf16")
    assert tune.sweep_candidates(row(128, {PP: 1.0, COOP: 2.0}), extra=new) == [PP, COOP, new[0]]
    assert tune.sweep_candidates(row(128, {}, fast=False), extra=new) == [new[1]]
    assert tune.sweep_candidates(row(1024, {PP: 1.0, COOP: 2.0}), extra=new) == [PP, COOP]  # swapped: M <= 512


def test_candidates_give_decode_kernels_only_their_m_and_mode():
    tc, tc16 = "gemv_tc_m32_r32_s4_fast_bf16", "gemv_tc_m16_r64_s4_fast_bf16"
    names = ["gemv_m4_precise_bf16", tc, tc16, "gemv_m4_precise_fp16", PP]
    assert tune.candidates(names, 4, fast=True) == ["gemv_m4_precise_bf16", tc, tc16]  # precise serves fast calls
    assert tune.candidates(names, 4, fast=False) == ["gemv_m4_precise_bf16"]
    assert tune.candidates(names, 32, fast=True) == [tc, PP]
    assert tune.candidates(names, 33, fast=True) == [PP]


def test_head_to_head_gives_new_kernels_the_best_choice_options():
    coop_pi8 = "coop_128x128x128_c1x2_pi8_precise_bf16"
    ov = ("coop_128x128x128_c1x2_ov_precise_bf16", "swap_pp_64x32x128_c1x1_ov_precise_bf16")
    built = {coop_pi8, *ov}
    r = row(1024, {coop_pi8 + "@M4": 1.0, coop_pi8: 1.2}, fast=False)
    assert tune.head_to_head_choices(r, ov, built) == [coop_pi8 + "@M4", ov[0] + "@M4"]  # swapped 64x32: M <= 256
    r = row(128, {"gemv_m4_precise_bf16": 1.0}, fast=False)
    assert tune.head_to_head_choices(r, ov, built) == ["gemv_m4_precise_bf16", *ov]  # the GEMV has no options
    assert tune.head_to_head_choices(r, ov, {ov[1]}) == ["gemv_m4_precise_bf16", ov[1]]  # only what is built


def test_head_to_head_keeps_the_capture_choice_of_a_stream_k_row():
    # The head to head replaces its rows in the table, so when the fastest needs a workspace it also times the
    # fastest without one, or the CUDA-graph column would fall to whatever new kernel was timed.
    swap_sk, swap_pp = "swap_sk_128x32x128_c1x1_fast_bf16", "swap_pp_64x32x128_c1x1_fast_bf16"
    tc = "gemv_tc_m32_r16_s8_fast_bf16"
    r = row(32, {swap_sk: 1.0, swap_pp: 1.1, "swap_pp_64x16x128_c1x1_fast_bf16": 1.2})
    assert tune.head_to_head_choices(r, (tc,), {tc}) == [swap_sk, swap_pp, tc]
    assert tune.head_to_head_choices(row(32, {swap_pp: 1.0, swap_sk: 1.1}), (tc,), {tc}) == [swap_pp, tc]


def test_merge_replaces_only_the_swept_rows():
    base = {"commit": "base", "gpu": "H200", "torch": "t", "rows": [row(256, {PP: 2.0}), row(512, {PP: 2.0})]}
    sched = {"commit": "sweep", "rows": [row(512, {PP + "@M8": 1.5, PP + "@N1": 1.8})]}
    merged = tune.merge_sweep(base, sched)
    assert merged["rows"][0] is base["rows"][0]
    assert merged["rows"][1]["kernels"] == {PP + "@M8": 1.5, PP + "@N1": 1.8}
    assert "base" in merged["commit"] and "sweep" in merged["commit"]
    assert base["rows"][1]["kernels"] == {PP: 2.0}  # the base run itself is not modified


def test_table_capture_column_skips_stream_k_with_options(tmp_path, monkeypatch):
    table = tmp_path / "table.inc"
    monkeypatch.setattr(tune, "TABLE", table)
    monkeypatch.setattr(tune, "ROOT", tmp_path)
    result = {"gpu": "H200", "torch": "t", "commit": "c",
              "rows": [row(512, {SK + "@M4": 1.0, PP + "@N8": 1.2, PP + "@M1": 1.3})]}
    tune.write_table(result, "test")
    lines = [line for line in table.read_text().splitlines() if line.startswith("{")]
    assert lines == [f'{{OutType::kBF16, Accum::kFast, 512, 4096, 4096, "{SK}@M4", "{PP}@N8"}},']


def test_table_keeps_a_head_to_heads_incumbent_inside_the_noise_margin(tmp_path, monkeypatch):
    # A head to head row records its incumbents; a new kernel must beat them by more than KEEP_MARGIN to be taken.
    monkeypatch.setattr(tune, "TABLE", tmp_path / "table.inc")
    monkeypatch.setattr(tune, "ROOT", tmp_path)
    new = "swap_pp_64x128x128_c4x1_fast_bf16"
    margin = tune.KEEP_MARGIN
    close = dict(row(128, {PP: 1.0, new: 1.0 / (1.0 + margin / 2)}), incumbents=[PP])
    clear = dict(row(256, {PP: 1.0, new: 1.0 / (1.0 + 2 * margin)}), incumbents=[PP])
    unrecorded = row(512, {PP: 1.0, new: 1.0 / (1.0 + margin / 2)})  # an older sweep: the fastest wins
    # Stream-K incumbent with its capture twin: each column keeps its own incumbent.
    sk_row = dict(row(1024, {SK: 1.0, PP: 1.2, new: 0.995}), incumbents=[SK, PP])
    tune.write_table({"gpu": "H200", "torch": "t", "commit": "c", "rows": [close, clear, unrecorded, sk_row]}, "test")
    lines = [line for line in (tmp_path / "table.inc").read_text().splitlines() if line.startswith("{")]
    assert lines == [f'{{OutType::kBF16, Accum::kFast, 128, 4096, 4096, "{PP}", "{PP}"}},',
                     f'{{OutType::kBF16, Accum::kFast, 256, 4096, 4096, "{new}", "{new}"}},',
                     f'{{OutType::kBF16, Accum::kFast, 512, 4096, 4096, "{new}", "{new}"}},',
                     f'{{OutType::kBF16, Accum::kFast, 1024, 4096, 4096, "{SK}", "{new}"}},']


def test_table_passes_over_kernels_no_longer_built(tmp_path, monkeypatch):
    # A recorded head to head may hold kernels dropped from the build since (the r64 decode kernels of 3bb28e7).
    monkeypatch.setattr(tune, "TABLE", tmp_path / "table.inc")
    monkeypatch.setattr(tune, "ROOT", tmp_path)
    tc = "gemv_tc_m32_r16_s8_fast_bf16"
    result = {"gpu": "H200", "torch": "t", "commit": "c",
              "rows": [row(8, {"gemv_tc_m16_r64_s8_fast_bf16": 0.9, tc: 1.0, PP: 1.2})]}
    tune.write_table(result, "test")
    lines = [line for line in (tmp_path / "table.inc").read_text().splitlines() if line.startswith("{")]
    assert lines == [f'{{OutType::kBF16, Accum::kFast, 8, 4096, 4096, "{tc}", "{tc}"}},']


def test_row_selection():
    assert tune.parse_rows("16384x8192x8192:fast,8X16X32:precise") == {(16384, 8192, 8192, True),
                                                                         (8, 16, 32, False)}
    with pytest.raises(SystemExit):
        tune.parse_rows("16384x8192x8192")
    bench = {"rows": [dict(row(1, {}), fp8ext_us=11.0), dict(row(2, {}), fp8ext_us=10.0),
                      dict(row(3, {}, fast=False), fp8ext_us=10.2)]}
    assert tune.rows_below(bench, 0.97) == {(1, 4096, 4096, True)}
    assert tune.rows_below(bench, 0.99) == {(1, 4096, 4096, True), (3, 4096, 4096, False)}


def test_recorded_tables_are_reproducible(tmp_path, monkeypatch):
    # The committed table is what the runs it names produce: run2 merged with the sustained sweeps, later ones
    # winning (the 4-row sweep, then the 72 rows below 0.97x or at M = 128, then the precise head-to-head of the
    # overlapped-promotion kernels), written by write_table itself.
    committed = (ROOT / "csrc/sm90/heuristic_table.inc").read_text()
    sources = tune.table_sources()
    assert len(sources) >= 2 and all((ROOT / s).is_file() for s in sources), sources
    monkeypatch.setattr(tune, "TABLE", tmp_path / "table.inc")
    monkeypatch.setattr(tune, "ROOT", tmp_path)
    merged = tune.load_merged(ROOT / sources[0], [ROOT / s for s in sources[1:]])
    tune.write_table(merged, "test")
    rows = lambda text: [line for line in text.splitlines() if line.startswith("{")]  # noqa: E731
    assert rows(committed) and rows((tmp_path / "table.inc").read_text()) == rows(committed)


def test_head_to_head_incumbents_are_the_committed_tables_picks():
    # A head to head times each row's incumbents against the new kernels: they must be what the table runs.
    sources = tune.table_sources()
    merged = tune.load_merged(ROOT / sources[0], [ROOT / s for s in sources[1:]])
    table = {}
    for line in (ROOT / "csrc/sm90/heuristic_table.inc").read_text().splitlines():
        if line.startswith("{"):
            fields = line.strip("{},").split(", ")
            table[(int(fields[2]), int(fields[3]), int(fields[4]), fields[1] == "Accum::kFast")] = \
                [fields[5].strip('"'), fields[6].strip('"')]
    checked = 0
    for r in merged["rows"]:
        if tune.row_key(r) in table:
            picks = table[tune.row_key(r)]
            assert tune.incumbents(r) == (picks[:1] if picks[0] == picks[1] else picks), tune.row_key(r)
            checked += 1
    assert checked == len(table)


def test_gpu_check_sweeps_start_from_the_tables_sources():
    # scripts/gpu_check.sh's sweep and retable stages merge onto what the committed table was written from;
    # a sweep merged onto the base run alone would silently drop the earlier sweeps from a rewritten table.
    # The script takes the list from tune.py --table-sources; run its lines that set the base and the sweeps.
    import subprocess
    text = (ROOT / "scripts/gpu_check.sh").read_text()
    start = text.index("mapfile -t TABLE_SOURCES")
    snippet = text[start:text.index("done", start) + 4]
    out = subprocess.run(["bash", "-c", f"cd {ROOT}; PY={sys.executable}; {snippet}\n"
                          'echo "$SWEEP_BASE"; printf "%s\\n" "${SWEEPS[@]}"'],
                         capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout.split()
    base, *sweeps = tune.table_sources()
    assert out == [base] + [x for s in sweeps for x in ("--sweep", s)]
    assert (ROOT / base).is_file() and all((ROOT / s).is_file() for s in sweeps)
