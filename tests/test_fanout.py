"""bench/fanout.py and the compile suite's --gpus: jobs pinned one to a GPU with caches of their own, the longest
first, failures and the deadline recorded; the merged record takes every ratio from one job. CPU only: the jobs
here are a stand-in script, and the suite's jobs are replaced by their records."""
import json
import os
import sys
from types import SimpleNamespace

import pytest

from fp8ext.bench import fanout
from fp8ext.bench.compile_models import merge_model_parts
from fp8ext.bench.suites import compile_switch

# Writes what a job saw to the path after --json; "fail" exits non-zero, "sleep=S" waits first.
STAND_IN = """
import json, os, sys, time
args = sys.argv[1:]
if "fail" in args:
    print("the job failed on purpose")
    sys.exit(3)
for a in args:
    if a.startswith("sleep="):
        time.sleep(float(a[6:]))
seen = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_COMPILE_THREADS",
                                   "TORCHINDUCTOR_CACHE_DIR")}
json.dump({"seen": seen, "args": args, "began": time.time()}, open(args[args.index("--json") + 1], "w"))
"""
COMMAND = [sys.executable, "-c", STAND_IN]


def test_jobs_run_one_to_a_gpu_with_caches_of_their_own_and_the_longest_first():
    jobs = [fanout.Job(f"job{i}", [f"sleep={0.2 * i}"], expected_s=i) for i in range(4)]
    done = fanout.run_jobs(COMMAND, jobs, gpus=2, deadline_s=None, quiet=True)
    assert [e["name"] for e in done] == ["job0", "job1", "job2", "job3"]
    assert all(e["status"] == "done" for e in done)
    seen = [e["record"]["seen"] for e in done]
    assert {s["CUDA_VISIBLE_DEVICES"] for s in seen} == {"0", "1"}
    assert all(s["CUDA_VISIBLE_DEVICES"] == str(e["gpu"]) for s, e in zip(seen, done))
    assert len({s["TORCHINDUCTOR_CACHE_DIR"] for s in seen}) == 4
    cpus = len(os.sched_getaffinity(0))
    assert all(s["TORCHINDUCTOR_COMPILE_THREADS"] == str(max(1, cpus // 2)) for s in seen)
    began = [e["record"]["began"] for e in done]
    # job3 and job2 (the longest) start first, one on each GPU; job0 waits for a GPU to come free
    assert began[3] < began[0] and began[2] < began[0]


def test_a_failed_job_is_recorded_with_its_output_and_the_others_go_on():
    jobs = [fanout.Job("bad", ["fail"], 1.0), fanout.Job("good", [], 1.0)]
    bad, good = fanout.run_jobs(COMMAND, jobs, gpus=1, deadline_s=None, quiet=True)
    assert bad["status"] == "failed" and "record" not in bad
    assert "the job failed on purpose" in bad["output_tail"]
    assert good["status"] == "done" and good["record"]["args"][0] == "--json"


def test_the_deadline_stops_running_jobs_and_starts_no_more():
    jobs = [fanout.Job("slow", ["sleep=30"], 2.0), fanout.Job("later", [], 1.0)]
    slow, later = fanout.run_jobs(COMMAND, jobs, gpus=1, deadline_s=1.0, quiet=True)
    assert slow["status"] == "stopped at the deadline" and slow["seconds"] < 20
    assert later["status"] == "not started: deadline"


def suite_args(**kw):
    base = dict(no_shapes=False, no_models=False, shape_rows=None, shape_max_m=None, gpus=4, rep_ms=60, rounds=3,
                shape_budget_s=900, model_runs=None, model_shapes="decode_b1", model_layers=4, model_budget_s=None, inductor_pdl=False,
                fanout_deadline_s=500, quiet=True)
    return SimpleNamespace(**{**base, **kw})


def test_the_shape_rows_chosen_by_slice_by_index_and_by_m():
    every = compile_switch.shapes()
    assert [i for i, _ in compile_switch.chosen_rows(suite_args(shape_rows="2:5"))] == [2, 3, 4]
    assert [i for i, _ in compile_switch.chosen_rows(suite_args(shape_rows="7,1"))] == [1, 7]
    small = compile_switch.chosen_rows(suite_args(shape_max_m=128))
    assert small and all(row["M"] <= 128 for _, row in small)
    assert len(small) == sum(r["M"] <= 128 for r in every)
    assert compile_switch.chosen_rows(suite_args(no_shapes=True)) == []


def model_part(ms: dict, compile_s: dict, profiles=None) -> dict:
    return {"config": "8b", "layers": 4, "attention": "sdpa_packed_gqa", "ms": ms, "compile_s": compile_s,
            "compile_phases_s": {}, "profile_decode_b1": profiles or {}, "errors": {}}


def test_merged_model_parts_divide_only_times_one_part_took():
    fused = model_part({"decode_b1": {"bf16": 3.0, "fp8ext_fused": 2.0, "fp8ext_fused_no_switch": 2.5}},
                       {"bf16": 10.0, "fp8ext_fused": 20.0, "fp8ext_fused_no_switch": 15.0},
                       {"fp8ext_fused": {"kernels_per_layer": 9.0},
                        "fp8ext_fused_no_switch": {"kernels_per_layer": 11.0}})
    ao_b1 = model_part({"decode_b1": {"torchao": 2.4, "torchao_switch": 2.0}},
                       {"torchao": 30.0, "torchao_switch": 33.0})
    ao_b8 = model_part({"decode_b8": {"torchao": 5.0, "torchao_switch": 4.0}},
                       {"torchao": 31.0, "torchao_switch": 35.0})
    merged = merge_model_parts([fused, ao_b1, ao_b8])
    assert merged["torchao"]["decode_b1_ratio"] == pytest.approx(1.2)
    assert merged["torchao"]["decode_b8_ratio"] == pytest.approx(1.25)
    assert merged["torchao"]["prefill_ratio"] is None
    assert merged["fp8ext_fused"]["decode_b1_vs_bf16"] == pytest.approx(1.5)
    assert merged["compile_s"]["torchao_switch"] == pytest.approx(68.0)
    assert merged["kernels_per_layer"] == {"with_fused_quantize": 9.0, "without": 11.0}


def test_the_suite_spread_over_gpus_makes_its_jobs_and_merges_their_records(monkeypatch):
    seen = {}

    def fake_run_jobs(command, jobs, gpus, deadline_s, quiet=False):
        seen.update(command=command, jobs=jobs, gpus=gpus, deadline_s=deadline_s)
        out = []
        for gpu, job in enumerate(jobs):
            if job.name.startswith("shape rows"):
                rows = [int(i) for i in job.argv[job.argv.index("--shape-rows") + 1].split(",")]
                if rows[0] == 3:
                    out.append({"name": job.name, "gpu": gpu, "seconds": 1.0, "status": "failed"})
                    continue
                record = {"inductor": {"compile_threads": 4, "cpus": 16},
                          "rows": [{"row": i, "M": 16, "N": 64, "K": 64, "ratio": 1.0 + i / 100,
                                    "chosen": "swap_pp_64x16x128_c1x1", "compile_with_s": 1.0} for i in rows]}
            else:
                runs = job.argv[job.argv.index("--model-runs") + 1].split(",")
                record = {"rows": [], "model": model_part({"decode_b1": {r: 1.0 + k for k, r in enumerate(runs)}},
                                                          {r: 5.0 for r in runs})}
            out.append({"name": job.name, "gpu": gpu, "seconds": 1.0, "status": "done", "record": record})
        return out

    monkeypatch.setattr(fanout, "run_jobs", fake_run_jobs)
    record = compile_switch.fanned_out(suite_args(shape_rows="0:7"))
    names = [job.name for job in seen["jobs"]]
    assert names[:3] == ["shape rows 0,1,2", "shape rows 3,4,5", "shape rows 6"]
    assert names[3:] == ["model decode_b1 bf16,fp8ext_fused,fp8ext_fused_no_switch",
                         "model decode_b1 torchao_switch,torchao"]
    assert seen["command"][-2:] == ["--suite", "compile"] and seen["gpus"] == 4 and seen["deadline_s"] == 500
    assert all("--json" not in job.argv for job in seen["jobs"])
    assert [r["row"] for r in record["rows"]] == [0, 1, 2, 6]
    assert [r["gpu"] for r in record["rows"]] == [0, 0, 0, 2]
    assert record["summary"]["rows not measured (their job failed or was stopped)"] == "3,4,5"
    assert record["model"]["torchao"]["decode_b1_ratio"] == pytest.approx(2.0 / 1.0)
    assert record["inductor"] == {"compile_threads": 4, "cpus": 16, "gpus": 4}
    assert all("record" not in job for job in record["jobs"])
    json.dumps(record)
