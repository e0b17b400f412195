"""large-m: fp8ext against torch._scaled_mm row-wise (cuBLASLt) where the FLOPs are, and what each peer spends.

Rows: the zoo's held-out rows, the row-wise fresh set and the Llama grid (--parts), in the zoo suite's columns
(fp8ext's kernels alone, its default path, torch row-wise, the kernel and its tile ratio; --host-inclusive adds
what an eager caller waits for). Sections at four large shapes (--sections):
  - power: each peer runs back to back for --turn-s seconds, in interleaved turns, while nvidia-smi samples the SM
    clock and board power every 25 ms; per peer the median clock and power over its turns (the first 0.3 s of a
    turn left out: the clock settles), the GPU time per call, cycles per call (time x clock) and joules per call;
  - ncu: Nsight Compute on one call of each peer after three warm-ups (clocks left alone): DRAM bytes read and
    written and the tensor pipe's active cycles, per kernel launched.
The peers of both sections are torch row-wise and fp8ext's kernels (the dispatch's pick, backstop off); --kernels
adds fp8ext kernels forced by name (with scheduler options), to compare kernels and tile orders. --section-shapes
takes other shapes.
A long run can be taken in parts (--parts, --accum, --sections) and put together with --merge, which takes the rows
and sections of earlier records of this suite made by the same build on the same GPU and torch. With --json the
record is rewritten after each part and section ("partial": true until the run ends), so a run cut short by a time
limit keeps what it measured.
"""
from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Optional

import torch

from ... import kernels, ops
from ...zoo import llama_rows, zoo_rows
from ..common import backends, geomean, make_operands, parse_shapes, ratio, suite_record, write_record
from ..registry import register_suite
from ..timing import Timer, median
from .peers import SPEEDUP_TITLE, accums, timing_method
from .zoo import HOST_METHOD, HOST_OPTION, host_inclusive_timer, print_zoo_table, run_zoo, summarize_zoo

# 8192^3 and the zoo's three largest held-out losses to cuBLASLt (zoo held-out record, kernels alone).
SECTION_SHAPES = ((8192, 8192, 8192), (9540, 28672, 3584), (12805, 28672, 5120), (8885, 36864, 7168))
PARTS = ("heldout", "fresh", "llama")
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
               "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
SETTLE_S = 0.3


def large_m_rows(parts) -> list[dict]:
    rows = []
    for part in parts:
        if part == "llama":
            rows += llama_rows("llama")
        else:
            rows += zoo_rows(part)
    return rows


def summarize_large_m(rows: list[dict]) -> dict:
    """The zoo's summary for held-out and fresh rows, the Llama grid's geomeans at M <= 128 and M >= 1024, and the
    fresh set's M >= 1024 geomean (kernels alone) over the held-out one."""
    out = summarize_zoo(rows)
    for accum in ("fast", "precise"):
        llama = [r for r in rows if r["split"] == "llama" and r["accum"] == accum]
        for name, pred in (("M<=128", lambda m: m <= 128), ("M>=1024", lambda m: m >= 1024)):
            group = [r for r in llama if pred(r["M"])]
            if group:
                out[f"llama {accum} {name}"] = {
                    "rows": len(group),
                    "kernels": geomean(r["torch_rowwise_us"] / r["fp8ext_kernels_us"] for r in group),
                    "default": geomean(r["torch_rowwise_us"] / r["fp8ext_us"] for r in group)}
        big = {split: [r["torch_rowwise_us"] / r["fp8ext_kernels_us"] for r in rows
                       if r["split"] == split and r["accum"] == accum and r["M"] >= 1024]
               for split in ("heldout", "fresh")}
        if big["heldout"] and big["fresh"]:
            out[f"fresh over heldout {accum} M>=1024"] = geomean(big["fresh"]) / geomean(big["heldout"])
    return out


# --- power: nvidia-smi sampling during interleaved turns --------------------------------------------------------

def parse_smi_line(line: str) -> Optional[tuple[float, float, float]]:
    """'2026/12/05 08:33:12.123, 1410, 690.12' -> (unix time, SM MHz, watts); None for anything else."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return t, float(parts[1]), float(parts[2])
    except ValueError:
        return None


class SmiSampler:
    """nvidia-smi's SM clock and power draw every 25 ms, stamped by nvidia-smi itself (its own clock is the host's),
    until stop()."""

    def __init__(self, device_index: int):
        cmd = ["nvidia-smi", "-i", str(device_index), "--query-gpu=timestamp,clocks.sm,power.draw",
               "--format=csv,noheader,nounits", "-lms", "25"]
        if shutil.which("stdbuf"):  # line-buffered into the pipe, so that stop() loses no buffered tail
            cmd = ["stdbuf", "-oL"] + cmd
        self.samples: list[tuple[float, float, float]] = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            s = parse_smi_line(line)
            if s is not None:
                self.samples.append(s)

    def stop(self) -> list[tuple[float, float, float]]:
        time.sleep(0.1)  # the last turn's final samples
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        return self.samples


def spend(turns: dict[str, list[tuple[float, float, float]]], samples) -> dict:
    """Per peer, from its turns (start, end, us per call) and the samples: median clock and power over the
    settled part of its turns, median us per call, cycles and joules per call."""
    out = {}
    for peer, spans in turns.items():
        inside = [s for s in samples if any(a + SETTLE_S <= s[0] <= b for a, b, _ in spans)]
        us = median([u for _, _, u in spans])
        mhz = median([s[1] for s in inside]) if inside else None
        watts = median([s[2] for s in inside]) if inside else None
        out[peer] = {"us": us, "sm_mhz": mhz, "watts": watts, "samples": len(inside),
                     "cycles_per_call": us * mhz if mhz else None,
                     "joules_per_call": watts * us * 1e-6 if watts else None}
    return out


def power_section(shapes, fast: bool, turn_s: float, rounds: int, forced=()) -> list[dict]:
    return [power_row(M, N, K, fast, turn_s, rounds, forced) for M, N, K in shapes]


def power_row(M: int, N: int, K: int, fast: bool, turn_s: float, rounds: int, forced=()) -> dict:
    a, b, sa, sb, _, _ = make_operands(M, N, K)
    kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
    with backends("fp8ext"):
        kernel = kernels.selected_kernel(M, N, K, torch.bfloat16, fast)
    call = lambda: ops.scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
    peers = {"fp8ext": call, "torch_rowwise": lambda: torch._scaled_mm(a, b, sa, sb, **kw)}
    peers.update({k: _forced(k, call) for k in forced})
    turns = {p: [] for p in peers}
    sampler = SmiSampler(torch.cuda.current_device())
    try:
        with backends("fp8ext"):
            for turn in range(rounds):
                order = list(peers)[turn % len(peers):] + list(peers)[:turn % len(peers)]
                for peer in order:
                    turns[peer].append(_back_to_back(peers[peer], turn_s))
    finally:
        samples = sampler.stop()
    return {"M": M, "N": N, "K": K, "accum": "fast" if fast else "precise", "kernel": kernel,
            **spend(turns, samples)}


def _forced(kernel: str, call):
    def fn():
        with kernels.force_kernel(kernel):
            return call()
    return fn


def _back_to_back(fn, seconds: float) -> tuple[float, float, float]:
    """Runs fn back to back for about `seconds` (wall time, synchronized); (start, end, GPU us per call)."""
    fn()
    torch.cuda.synchronize()
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    start_ev.record()
    calls = 0
    while time.time() - t0 < seconds:
        for _ in range(16):
            fn()
        calls += 16
        torch.cuda.synchronize()
    end_ev.record()
    end_ev.synchronize()
    return t0, time.time(), start_ev.elapsed_time(end_ev) * 1e3 / calls


# --- ncu: one call of each peer under Nsight Compute ---------------------------------------------------------------

def forced_name(peer: str) -> Optional[str]:
    """The kernel a section's peer forces: none for cuBLASLt and for fp8ext's own pick."""
    return None if peer in ("torch_rowwise", "fp8ext") else peer


def ncu_target(peer: str, M: int, N: int, K: int, fast: bool) -> None:
    """What Nsight Compute profiles: three warm-up calls, then one call between cudaProfilerStart/Stop. `peer` is
    "torch_rowwise", "fp8ext" (the dispatch's kernel, backstop off) or a kernel's written form (forced)."""
    a, b, sa, sb, _, _ = make_operands(M, N, K)
    kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
    if peer == "torch_rowwise":
        call = lambda: torch._scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
    else:
        call = lambda: ops.scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
    with backends("fp8ext"), kernels.force_kernel(forced_name(peer)):
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        call()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu --csv --print-units base output -> one dict per kernel launch: name and the metrics as floats."""
    start = text.find('"ID"')
    if start < 0:
        return []
    lines = [line for line in text[start:].splitlines() if line.startswith('"')]  # not ncu's ==PROF== lines
    launches: dict[str, dict] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        k = launches.setdefault(r["ID"], {"kernel": r["Kernel Name"]})
        try:
            k[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            k[r["Metric Name"]] = r["Metric Value"]
    return list(launches.values())


def ncu_binary() -> str:
    """ncu on the PATH, else the newest Nsight Compute under /opt/nvidia (where its installer puts it)."""
    found = shutil.which("ncu") or sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))
    return found if isinstance(found, str) else (found[-1] if found else "ncu")


def ncu_row(peer: str, M: int, N: int, K: int, fast: bool, timeout_s: float = 300) -> dict:
    code = (f"from fp8ext.bench.suites.large_m import ncu_target; "
            f"ncu_target({peer!r}, {M}, {N}, {K}, {fast})")
    cmd = [ncu_binary(), "--clock-control", "none", "--profile-from-start", "off", "--csv", "--print-units", "base",
           "--metrics", ",".join(NCU_METRICS), sys.executable, "-c", code]
    row = {"M": M, "N": N, "K": K, "accum": "fast" if fast else "precise", "peer": peer}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {**row, "error": f"{type(e).__name__}: {e}"}
    launches = parse_ncu_csv(done.stdout)
    if done.returncode != 0 or not launches:
        return {**row, "error": f"ncu rc={done.returncode}: {(done.stderr or done.stdout)[-400:]}"}
    main = max(launches, key=lambda k: k.get("gpu__time_duration.sum", 0.0))
    return {**row, "kernels": [k["kernel"][:120] for k in launches],
            "dram_bytes": sum(k.get("dram__bytes_read.sum", 0.0) + k.get("dram__bytes_write.sum", 0.0)
                              for k in launches),
            "dram_read_bytes": sum(k.get("dram__bytes_read.sum", 0.0) for k in launches),
            "tensor_pipe_pct": main.get("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
            "gpu_ns": sum(k.get("gpu__time_duration.sum", 0.0) for k in launches)}


def summarize_sections(power: list[dict], ncu: list[dict]) -> dict:
    out = {}
    for r in power:
        t = r["torch_rowwise"]
        for peer, f in r.items():
            if not isinstance(f, dict) or peer == "torch_rowwise":
                continue
            out[f"power {r['M']}x{r['N']}x{r['K']} {r['accum']} {peer}"] = {
                "speed": ratio(t["us"], f["us"]), "cycles /torch": ratio(f["cycles_per_call"], t["cycles_per_call"]),
                "joules /torch": ratio(f["joules_per_call"], t["joules_per_call"]),
                "clock /torch": ratio(f["sm_mhz"], t["sm_mhz"])}
    for r in ncu:
        if r["peer"] == "torch_rowwise" or "dram_bytes" not in r:
            continue
        peer = next((t for t in ncu if t["peer"] == "torch_rowwise" and "dram_bytes" in t
                     and (t["M"], t["N"], t["K"], t["accum"]) == (r["M"], r["N"], r["K"], r["accum"])), None)
        if peer is not None:
            out[f"ncu {r['M']}x{r['N']}x{r['K']} {r['accum']} {r['peer']}"] = {
                "dram /torch": ratio(r["dram_bytes"], peer["dram_bytes"]),
                "tensor pipe %": [r["tensor_pipe_pct"], peer["tensor_pipe_pct"]]}
    return out


def merged(paths: list[str]) -> tuple[list[dict], list[dict], list[dict], dict]:
    """Rows and sections of earlier records of this suite, made by the build, GPU and torch of this run."""
    here = suite_record("large-m")
    rows, power, ncu = [], [], []
    for path in paths:
        with open(path) as f:
            rec = json.load(f)
        for key in ("suite", "commit", "gpu", "torch"):
            if rec.get(key) != here.get(key):
                raise SystemExit(f"--merge {path}: its {key} is {rec.get(key)!r}, this run's {here.get(key)!r}")
        rows += rec.get("rows", [])
        power += rec.get("power", [])
        ncu += rec.get("ncu", [])
    return rows, power, ncu, {"merged": [os.path.basename(p) for p in paths]}


@register_suite("large-m", help="held-out and fresh zoo rows and the Llama grid against cuBLASLt, with the power "
                "and Nsight Compute sections at four large shapes", summary_title=SPEEDUP_TITLE,
                options={"--parts": dict(default=",".join(PARTS), help="large-m: rows of heldout, fresh, llama "
                                         "(comma list; none: '')"),
                         "--sections": dict(default="power,ncu", help="large-m: power, ncu (comma list; none: '')"),
                         "--turn-s": dict(type=float, default=3.0, help="large-m power: seconds per peer and turn"),
                         "--kernels": dict(default="", help="large-m sections: fp8ext kernels forced by name as "
                                           "peers too (comma list, scheduler options allowed); grouped: "
                                           "grouped kernels to time by name (fnmatch patterns)"),
                         "--section-shapes": dict(default="", help="large-m sections: these shapes (MxNxK,...) "
                                                  "instead of the four"),
                         "--merge": dict(default="", help="large-m: earlier records of this run's build to include"),
                         "--host-inclusive": HOST_OPTION})
def large_m(args) -> dict:
    parts = [p for p in args.parts.split(",") if p]
    sections = [s for s in args.sections.split(",") if s]
    for bad in set(parts) - set(PARTS) | set(sections) - {"power", "ncu"}:
        raise SystemExit(f"large-m: unknown part or section {bad!r}")
    rows, power, ncu, extra = merged([p for p in args.merge.split(",") if p]) if args.merge else ([], [], [], {})
    host = host_inclusive_timer(args.rep_ms) if args.host_inclusive else None

    # A run cut short by a time limit keeps what it measured: the record so far, rewritten after each part and
    # section (the full record replaces it at the end). Its header is read once (git and the GPU's name).
    head = suite_record("large-m") if args.json else None

    def checkpoint():
        if head is not None:
            write_record(args.json, {**head, "partial": True, "rows": rows, "power": power, "ncu": ncu, **extra},
                         quiet=True)

    for part in parts:
        rows += run_zoo(large_m_rows([part]), accums(args), Timer(rep_ms=args.rep_ms), check=not args.no_check,
                        progress=not args.quiet, rounds=args.rounds, host_timer=host)
        checkpoint()
    forced = [k for k in args.kernels.split(",") if k]
    shapes = parse_shapes(args.section_shapes) if args.section_shapes else SECTION_SHAPES
    for fast in accums(args):
        if "power" in sections:
            power += power_section(shapes, fast, args.turn_s, args.rounds, forced)
            checkpoint()
        if "ncu" in sections:
            for M, N, K in shapes:
                ncu += [ncu_row(p, M, N, K, fast) for p in ["torch_rowwise", "fp8ext"] + forced]
                checkpoint()
    print_zoo_table(rows)
    method = (timing_method(args) + (HOST_METHOD if host is not None else "") + " Sections: " + __doc__.split(
        "Sections at four large shapes (--sections):")[1].split("A long run")[0].strip())
    return {"method": method, "summary": {**summarize_large_m(rows), **summarize_sections(power, ncu)},
            "rows": rows, "power": power, "ncu": ncu, **extra}
