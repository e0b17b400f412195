"""The large-m suite without a GPU: its rows, summary, the power section's sampling arithmetic, the Nsight Compute
section's command and parsing, and --merge."""
import json
import os
import subprocess
import time
from datetime import datetime

import pytest

import fp8ext.bench as bench
from fp8ext.bench import cli, main
from fp8ext.bench.suites import large_m
from fp8ext.zoo import LLAMA_M, LLAMA_NK, zoo_rows


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(cli, "gpu_problem", lambda: None)
    monkeypatch.setattr(bench.common.torch.cuda, "get_device_name", lambda *a: "Fake GPU")


def row(split, M, kernels_us, torch_us, accum="fast", default_us=None):
    return {"M": M, "N": 4096, "K": 4096, "weight": "w", "split": split, "accum": accum,
            "fp8ext_kernels_us": kernels_us, "fp8ext_us": default_us or kernels_us, "torch_rowwise_us": torch_us,
            "kernel": "k", "kernels_kernel": "k", "tile_ratio": 1.0}


def test_rows_of_each_part():
    rows = large_m.large_m_rows(["heldout", "fresh", "llama"])
    held, fresh = zoo_rows("heldout"), zoo_rows("fresh")
    llama = [r for r in rows if r["split"] == "llama"]
    assert rows[:len(held)] == held and rows[len(held):len(held) + len(fresh)] == fresh
    assert len(llama) == len(LLAMA_NK) * len(LLAMA_M)
    assert {(r["M"], r["N"], r["K"]) for r in llama} == {(m, n, k) for n, k in LLAMA_NK for m in LLAMA_M}
    assert large_m.large_m_rows([]) == []


def test_summary_llama_groups_and_fresh_over_heldout():
    rows = [row("heldout", 2048, 10.0, 11.0), row("heldout", 4096, 10.0, 9.0), row("fresh", 2048, 10.0, 10.0),
            row("llama", 16, 10.0, 13.0), row("llama", 4096, 10.0, 10.5), row("llama", 512, 10.0, 99.0)]
    s = large_m.summarize_large_m(rows)
    assert s["llama fast M<=128"] == {"rows": 1, "kernels": pytest.approx(1.3), "default": pytest.approx(1.3)}
    assert s["llama fast M>=1024"]["kernels"] == pytest.approx(1.05)
    held = (1.1 * 0.9) ** 0.5
    assert s["fresh over heldout fast M>=1024"] == pytest.approx(1.0 / held)
    assert s["heldout fast M>=1024"]["kernels"]["geomean"] == pytest.approx(held)
    assert "llama precise M<=128" not in s


def stamp(t):
    return datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def test_nvidia_smi_lines():
    t = 1_780_000_000.25
    got = large_m.parse_smi_line(f"{stamp(t)}, 1410, 690.12\n")
    assert got == (pytest.approx(t, abs=1e-3), 1410.0, 690.12)
    for bad in ("timestamp, clocks.current.sm [MHz], power.draw [W]", f"{stamp(t)}, [N/A], 690", "", "1, 2"):
        assert large_m.parse_smi_line(bad) is None


def test_spend_takes_the_settled_samples_of_each_peers_turns():
    # fp8ext's turns: [0, 3] and [6, 9]; torch's: [3, 6]. Samples every 0.5 s; each turn's first 0.3 s left out.
    turns = {"fp8ext": [(0.0, 3.0, 100.0), (6.0, 9.0, 110.0)], "torch_rowwise": [(3.0, 6.0, 90.0)]}
    samples = [(t / 2, 1000.0 + t, 700.0 - t) for t in range(19)]  # t/2 s: clock 1000 + t, power 700 - t
    s = large_m.spend(turns, samples)
    f, t = s["fp8ext"], s["torch_rowwise"]
    fp8_t = [x for x in range(19) if 0.3 <= x / 2 <= 3.0 or 6.3 <= x / 2 <= 9.0]
    assert f["samples"] == len(fp8_t) and t["samples"] == len([x for x in range(19) if 3.3 <= x / 2 <= 6.0])
    assert f["us"] == 105.0 and t["us"] == 90.0
    assert f["cycles_per_call"] == pytest.approx(105.0 * f["sm_mhz"])
    assert t["joules_per_call"] == pytest.approx(t["watts"] * 90e-6)
    assert large_m.spend({"p": [(0.0, 0.1, 5.0)]}, samples)["p"]["sm_mhz"] is None


NCU_HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
              '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
GEMM = "void gemm<cute::tuple<int, int>>(Params)"
NCU_VALUES = [("0", GEMM, "dram__bytes_read.sum", "byte", "680,000,000"),
              ("0", GEMM, "dram__bytes_write.sum", "byte", "134,217,728"),
              ("0", GEMM, "gpu__time_duration.sum", "nsecond", "850000"),
              ("0", GEMM, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "%", "96.8"),
              ("1", "memset", "dram__bytes_write.sum", "byte", "1024"),
              ("1", "memset", "gpu__time_duration.sum", "nsecond", "2000")]
NCU_OUT = "\n".join(
    ["==PROF== Connected to process 77 (/usr/bin/python3)", '==PROF== Profiling "gemm" - 0: 0%....100% - 9 passes',
     NCU_HEADER]
    + [f'"{i}","77","python3","127.0.0.1","{k}","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0",'
       f'"Command line profiler metrics","{m}","{u}","{v}"' for i, k, m, u, v in NCU_VALUES]
    + ["==PROF== Disconnected from process 77", ""])


def test_ncu_csv_is_read_per_kernel():
    kernels = large_m.parse_ncu_csv(NCU_OUT)
    assert [k["kernel"] for k in kernels] == ["void gemm<cute::tuple<int, int>>(Params)", "memset"]
    assert kernels[0]["dram__bytes_read.sum"] == 680e6 and kernels[1]["gpu__time_duration.sum"] == 2000.0
    assert large_m.parse_ncu_csv("==PROF== nothing profiled\n") == []


def test_ncu_row_runs_the_target_under_ncu_and_sums_its_kernels(monkeypatch):
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 0, NCU_OUT, "")

    monkeypatch.setattr(large_m.subprocess, "run", fake_run)
    monkeypatch.setattr(large_m, "ncu_binary", lambda: "ncu")
    r = large_m.ncu_row("fp8ext", 8192, 8192, 8192, True)
    cmd = seen["cmd"]
    assert cmd[:7] == ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--print-units"]
    assert "ncu_target('fp8ext', 8192, 8192, 8192, True)" in cmd[-1]
    assert r["dram_bytes"] == 680e6 + 134217728 + 1024 and r["dram_read_bytes"] == 680e6
    assert r["tensor_pipe_pct"] == 96.8 and r["gpu_ns"] == 852000.0 and r["accum"] == "fast"

    monkeypatch.setattr(large_m.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "==ERROR== LibraryNotLoaded"))
    assert "LibraryNotLoaded" in large_m.ncu_row("torch_rowwise", 1, 2, 3, False)["error"]


def test_section_summary_pairs_each_peer_with_cublaslt():
    power = [{"M": 1, "N": 2, "K": 3, "accum": "fast",
              "fp8ext": {"us": 100.0, "cycles_per_call": 1.4e5, "joules_per_call": 0.07, "sm_mhz": 1400.0},
              "torch_rowwise": {"us": 98.0, "cycles_per_call": 1.37e5, "joules_per_call": 0.068, "sm_mhz": 1400.0}}]
    ncu = [{"M": 1, "N": 2, "K": 3, "accum": "fast", "peer": "torch_rowwise", "dram_bytes": 2.0, "tensor_pipe_pct": 97},
           {"M": 1, "N": 2, "K": 3, "accum": "fast", "peer": "fp8ext", "dram_bytes": 3.0, "tensor_pipe_pct": 93},
           {"M": 1, "N": 2, "K": 3, "accum": "fast", "peer": "k@H16", "error": "ncu rc=1"}]
    s = large_m.summarize_sections(power, ncu)
    assert s["power 1x2x3 fast fp8ext"]["speed"] == pytest.approx(0.98)
    assert s["power 1x2x3 fast fp8ext"]["cycles /torch"] == pytest.approx(1.4 / 1.37)
    assert s["ncu 1x2x3 fast fp8ext"] == {"dram /torch": 1.5, "tensor pipe %": [93, 97]}
    assert not any("k@H16" in k for k in s)


def test_record_sections_parts_and_merge(fake_gpu, monkeypatch, tmp_path):
    monkeypatch.setattr(large_m, "run_zoo", lambda rows, *a, **kw: [row(r["split"], r["M"], 10.0, 10.0) for r in rows])
    monkeypatch.setattr(large_m, "power_section", lambda shapes, fast, turn_s, rounds, forced: [])
    monkeypatch.setattr(large_m, "Timer", lambda rep_ms, hold=True: ("timer", rep_ms, hold))
    calls = []
    monkeypatch.setattr(large_m, "ncu_row", lambda p, M, N, K, fast: calls.append(p) or {"peer": p, "error": "x"})
    first = tmp_path / "a.json"
    assert main(["--suite", "large-m", "--parts", "fresh", "--accum", "fast", "--sections", "ncu",
                 "--kernels", "k@H16", "--json", str(first), "--quiet"]) == 0
    rec = json.loads(first.read_text())
    assert len(rec["rows"]) == len(zoo_rows("fresh")) and len(rec["ncu"]) == 3 * len(large_m.SECTION_SHAPES)
    assert calls[:3] == ["torch_rowwise", "fp8ext", "k@H16"]
    second = tmp_path / "b.json"
    assert main(["--suite", "large-m", "--parts", "llama", "--accum", "fast", "--sections", "",
                 "--merge", str(first), "--json", str(second), "--quiet"]) == 0
    rec2 = json.loads(second.read_text())
    assert {r["split"] for r in rec2["rows"]} == {"fresh", "llama"} and rec2["merged"] == ["a.json"]
    assert len(rec2["ncu"]) == len(rec["ncu"])
    other = dict(rec, commit="0000000")
    first.write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="its commit"):
        main(["--suite", "large-m", "--parts", "", "--sections", "", "--merge", str(first), "--quiet"])
    calls.clear()
    assert main(["--suite", "large-m", "--parts", "", "--accum", "fast", "--sections", "ncu",
                 "--section-shapes", "256x512x1024", "--quiet"]) == 0
    assert calls == ["torch_rowwise", "fp8ext"]
    with pytest.raises(SystemExit, match="unknown part or section 'bogus'"):
        main(["--suite", "large-m", "--parts", "bogus", "--quiet"])


def test_the_sampler_reads_nvidia_smi_until_stopped(tmp_path, monkeypatch):
    # A stand-in nvidia-smi that prints three samples and then waits to be stopped, as the real one loops.
    fake = tmp_path / "nvidia-smi"
    lines = "\\n".join(f"{stamp(1_780_000_000 + i)}, {1400 + i}, {690 + i}.5" for i in range(3))
    fake.write_text(f"#!/bin/sh\nprintf '{lines}\\n'\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    sampler = large_m.SmiSampler(0)
    deadline = time.time() + 10
    while len(sampler.samples) < 3 and time.time() < deadline:
        time.sleep(0.05)
    samples = sampler.stop()
    assert [s[1:] for s in samples] == [(1400.0, 690.5), (1401.0, 691.5), (1402.0, 692.5)]


def test_a_run_cut_short_keeps_the_parts_it_measured(fake_gpu, monkeypatch, tmp_path):
    def run_zoo(rows, *a, **kw):
        if rows[0]["split"] == "llama":
            raise KeyboardInterrupt  # what a time limit does in the middle of a part
        return [row(r["split"], r["M"], 10.0, 12.0) for r in rows]

    monkeypatch.setattr(large_m, "run_zoo", run_zoo)
    monkeypatch.setattr(large_m, "Timer", lambda rep_ms, hold=True: None)
    path = tmp_path / "cut.json"
    with pytest.raises(KeyboardInterrupt):
        main(["--suite", "large-m", "--parts", "fresh,llama", "--accum", "fast", "--sections", "",
              "--json", str(path), "--quiet"])
    rec = json.loads(path.read_text())
    assert rec["partial"] is True and rec["suite"] == "large-m"
    assert {r["split"] for r in rec["rows"]} == {"fresh"} and len(rec["rows"]) == len(zoo_rows("fresh"))


@pytest.mark.parametrize("peer, forced", [("torch_rowwise", None), ("fp8ext", None), ("k@N8", "k@N8")])
def test_ncu_target_forces_only_a_named_kernel(monkeypatch, peer, forced):
    import contextlib
    import types

    seen, calls = [], []

    @contextlib.contextmanager
    def force_kernel(name):
        seen.append(name)
        yield

    monkeypatch.setattr(large_m, "make_operands", lambda M, N, K: (None,) * 6)
    monkeypatch.setattr(large_m, "backends", lambda name: contextlib.nullcontext())
    monkeypatch.setattr(large_m.kernels, "force_kernel", force_kernel)
    monkeypatch.setattr(large_m.torch, "_scaled_mm", lambda *a, **kw: calls.append("torch"))
    monkeypatch.setattr(large_m.ops, "scaled_mm", lambda *a, **kw: calls.append("fp8ext"))
    monkeypatch.setattr(large_m.torch.cuda, "synchronize", lambda: None)
    noop = types.SimpleNamespace(cudaProfilerStart=lambda: None, cudaProfilerStop=lambda: None)
    monkeypatch.setattr(large_m.torch.cuda, "cudart", lambda: noop)
    large_m.ncu_target(peer, 256, 512, 1024, True)
    assert seen == [forced]
    assert calls == ["torch" if peer == "torch_rowwise" else "fp8ext"] * 4
