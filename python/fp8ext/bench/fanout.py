"""A suite's work spread over the GPUs of one host: each job is `python -m fp8ext.bench` in a process of its own,
pinned to one GPU (CUDA_VISIBLE_DEVICES), with an Inductor cache of its own and an even share of the CPUs for
Inductor's compile workers. Jobs start longest first as GPUs come free.

A record's ratios compare peers that one job timed, on one GPU, in interleaved turns; jobs share only the host
(its CPUs, while they compile). A job still running at the deadline is stopped and recorded as such, so that the
merged record comes back even where the work does not fit.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass
class Job:
    name: str
    argv: list  # the arguments of `python -m fp8ext.bench` after --suite NAME, without --json
    expected_s: float  # for the order: the longest start first


def bench_command(suite: str) -> list:
    return [sys.executable, "-m", "fp8ext.bench", "--suite", suite]


def run_jobs(command: list, jobs: list, gpus: int, deadline_s: Optional[float], quiet: bool = False) -> list:
    """Runs ``jobs`` on GPUs 0..gpus-1 of this host, each as ``command + job.argv + ["--json", PATH]`` (command:
    bench_command(suite), say). Returns one entry per job, in the order given: name, gpu,
    seconds, status ("done", "failed", "stopped at the deadline", "not started: deadline"), its record where it
    wrote one, and the last lines of its output where it did not finish."""
    cpus = len(os.sched_getaffinity(0))
    threads = max(1, cpus // gpus)
    work = Path(tempfile.mkdtemp(prefix="fp8ext-fanout-"))
    queue = sorted(range(len(jobs)), key=lambda i: -jobs[i].expected_s)
    free, running, results = list(range(gpus)), {}, [None] * len(jobs)
    start = time.perf_counter()

    def finish(i: int, status: str) -> None:
        proc, gpu, began = running.pop(i)
        log = (work / f"{i}.log").read_text(errors="replace")
        entry = {"name": jobs[i].name, "gpu": gpu, "seconds": round(time.perf_counter() - began, 1),
                 "status": status}
        path = work / f"{i}.json"
        if status == "done" and path.exists():
            entry["record"] = json.loads(path.read_text())
        else:
            entry["status"] = "failed" if status == "done" else status
            entry["output_tail"] = log.splitlines()[-20:]
        if not quiet:
            print(f"fanout: {jobs[i].name} on GPU {gpu}: {entry['status']} in {entry['seconds']} s", flush=True)
            print("".join(f"  | {line}\n" for line in log.splitlines() if line.strip()), end="", flush=True)
        results[i] = entry
        free.append(gpu)

    while queue or running:
        late = deadline_s is not None and time.perf_counter() - start > deadline_s
        while queue and free and not late:
            i, gpu = queue.pop(0), free.pop(0)
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), "TORCHINDUCTOR_COMPILE_THREADS": str(threads),
                   "TORCHINDUCTOR_CACHE_DIR": str(work / f"inductor-{i}")}
            argv = [*command, *jobs[i].argv, "--json", str(work / f"{i}.json")]
            with open(work / f"{i}.log", "w") as log:
                proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
            running[i] = (proc, gpu, time.perf_counter())
        if late:
            for i in list(running):
                running[i][0].kill()
                running[i][0].wait()
                finish(i, "stopped at the deadline")
            for i in queue:
                results[i] = {"name": jobs[i].name, "gpu": None, "seconds": 0.0, "status": "not started: deadline"}
            queue = []
            break
        for i in list(running):
            if running[i][0].poll() is not None:
                finish(i, "done")
        time.sleep(0.5)
    return results


def visible_gpus() -> int:
    import torch
    return torch.cuda.device_count()
