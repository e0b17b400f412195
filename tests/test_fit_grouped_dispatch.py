"""tools/fit_grouped_dispatch.py without a GPU: on rows whose best kernel changes at a known number of rows per group
(or, routed to one expert, rows in that group), the fitted limit falls between the rows either side of it; the
written include holds each family's limits; above the swap limit, the 128 x 256 tile's limit likewise."""
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import fit_grouped_dispatch as fit  # noqa: E402

KERNELS = {("rowwise", "fast"): ("grp_swap_pp_128x32x128_c1x1_fast_bf16", "grp_coop_128x128x128_c1x1_fast_bf16"),
           ("rowwise", "precise"): ("grp_swap_pp_128x32x128_c1x1_precise_bf16",
                                    "grp_coop_128x128x128_c1x1_precise_bf16"),
           ("blockwise", "precise"): ("grp_bw_swap_coop_128x32x128_c1x1_bf16", "grp_bw_coop_128x128x128_c1x1_bf16")}


def record(crossover: dict, seed: int = 0) -> dict:
    """Rows of two models whose swapped kernel is faster below `crossover[family]` rows per group (random times,
    the slower kernel 5-40% behind)."""
    rng = random.Random(seed)
    rows = []
    for model in ("a", "b"):
        for (scaling, accum), (swap, coop) in KERNELS.items():
            limit = crossover[scaling if scaling == "blockwise" else f"{scaling}_{accum}"]
            for per_group in (0.5, 2, 8, 20, 33, 60, 90, 200, 700):
                fast = rng.uniform(5, 500)
                slow = fast * rng.uniform(1.05, 1.4)
                times = {swap: fast, coop: slow} if per_group <= limit else {swap: slow, coop: fast}
                rows.append({"model": model, "scaling": scaling, "accum": accum, "rows": int(per_group * 16),
                             "rows_per_group": per_group, "kernels_us": times})
    return {"rows": rows}


def test_the_fit_finds_each_familys_crossover(tmp_path, capsys):
    crossover = {"rowwise_fast": 40, "rowwise_precise": 75, "blockwise": 20}
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(record(crossover)))
    for family, limit in crossover.items():
        rows = fit.family_rows([json.loads(path.read_text())], family)
        got = fit.fit(rows)
        below = max(r["rows_per_group"] for r in rows if r["rows_per_group"] <= limit)
        above = min(r["rows_per_group"] for r in rows if r["rows_per_group"] > limit)
        assert below <= got < above, f"{family}: {got} not in [{below}, {above})"
        assert fit.score(rows, got) == (1.0, 1.0)


def one_expert_record(crossover: dict, seed: int = 1) -> dict:
    """Rows whose every row went to one expert: the swapped kernel faster up to `crossover[family]` rows in that
    group; the split kernels' own times, which the fit must ignore, made the fastest of all."""
    rng = random.Random(seed)
    rows = []
    for model in ("a", "b"):
        for (scaling, accum), (swap, coop) in KERNELS.items():
            limit = crossover[scaling if scaling == "blockwise" else f"{scaling}_{accum}"]
            for group in (8, 32, 64, 100, 256, 512, 2048):
                fast = rng.uniform(5, 500)
                slow = fast * rng.uniform(1.05, 1.4)
                times = {swap: fast, coop: slow} if group <= limit else {swap: slow, coop: fast}
                times["grp_split_x"] = fast / 2
                rows.append({"model": model, "scaling": scaling, "accum": accum, "rows": group, "routing": "one",
                             "rows_per_group": group / 64, "largest_group": group, "kernels_us": times})
    return {"rows": rows}


def test_the_split_limit_falls_at_each_familys_one_expert_crossover():
    crossover = {"rowwise_fast": 70, "rowwise_precise": 300, "blockwise": 40}
    for family, limit in crossover.items():
        rows = fit.family_rows([one_expert_record(crossover)], family)
        assert rows and all("grp_split_x" not in r["times"] for r in rows)
        got = fit.fit(rows, key="largest_group")
        below = max(r["largest_group"] for r in rows if r["largest_group"] <= limit)
        above = min(r["largest_group"] for r in rows if r["largest_group"] > limit)
        assert below <= got < above, f"{family}: {got} not in [{below}, {above})"
        assert fit.score(rows, got, key="largest_group") == (1.0, 1.0)


WIDE = "grp_coop_128x256x128_c1x1_fast_bf16"


def test_the_wide_tile_limit_falls_at_its_crossover():
    """Rows above the swap limit whose 128 x 256 tile is faster beyond 150 rows per group: W falls between the
    rows either side; a time of a kernel the build no longer has is no choice."""
    rng = random.Random(2)
    swap, coop = KERNELS[("rowwise", "fast")]
    rows = []
    for model in ("a", "b"):
        for per_group in (24, 48, 96, 140, 300, 1000):
            fast = rng.uniform(20, 900)
            slow = fast * rng.uniform(1.05, 1.4)
            times = {coop: fast, WIDE: slow} if per_group <= 150 else {coop: slow, WIDE: fast}
            times.update({swap: 3 * fast, "grp_coop_999x128x128_c1x1_fast_bf16": fast / 3})
            rows.append({"model": model, "scaling": "rowwise", "accum": "fast", "rows": int(per_group * 8),
                         "rows_per_group": per_group, "kernels_us": times})
    got_rows = fit.family_rows([{"rows": rows}], "rowwise_fast")
    assert all("grp_coop_999x128x128_c1x1_fast_bf16" not in r["times"] for r in got_rows)
    got = fit.fit(got_rows, rule=fit.pick_wide)
    assert 140 <= got < 300, got
    assert fit.score(got_rows, got, rule=fit.pick_wide) == (1.0, 1.0)


def test_the_include_holds_every_familys_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(fit, "INC", tmp_path / "grouped_dispatch.inc")
    fit.write({"rowwise_fast": 46.5, "rowwise_precise": 61.5, "blockwise": 26.5},
              {"rowwise_fast": 160.0, "rowwise_precise": 82.5, "blockwise": 384.0}, {"rowwise_fast": 57.6})
    text = fit.INC.read_text()
    for line in ("kSwapMaxRowsPerGroup_rowwise_fast = 46.5;", "kSwapMaxRowsPerGroup_rowwise_precise = 61.5;",
                 "kSwapMaxRowsPerGroup_blockwise = 26.5;", "kSplitMaxGroupRows_rowwise_fast = 160;",
                 "kSplitMaxGroupRows_rowwise_precise = 82;", "kSplitMaxGroupRows_blockwise = 384;",
                 "kNarrowMaxRowsPerGroup_rowwise_fast = 57.6;"):
        assert line in text
    assert fit.compiled() == {"Swap": {"rowwise_fast": 46.5, "rowwise_precise": 61.5, "blockwise": 26.5},
                              "Split": {"rowwise_fast": 160, "rowwise_precise": 82, "blockwise": 384},
                              "Narrow": {"rowwise_fast": 57.6}}


def test_the_compiled_in_include_names_every_family():
    text = (ROOT / "csrc" / "sm90" / "grouped" / "grouped_dispatch.inc").read_text()
    assert all(f"kSwapMaxRowsPerGroup_{family} =" in text and f"kSplitMaxGroupRows_{family} =" in text
               for family in fit.FAMILIES)
    assert "kNarrowMaxRowsPerGroup_rowwise_fast =" in text  # the one family with a 128 x 256 tile
