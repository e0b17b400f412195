#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over tools/sanitize_workload.py, with
# PyTorch's caching allocator off so that out-of-bounds accesses hit unallocated memory.
#   bash tools/sanitize.sh [out_dir] [tools]     (default tools: memcheck racecheck initcheck synccheck)
# FP8EXT_SANITIZE_ARGS passes arguments to the workload (e.g. --quick, --kernels 'gemv_*'); the log of each
# tool is $out_dir/sanitize-<tool>.log. The tools run side by side (they check, they do not time), each within
# FP8EXT_SANITIZE_TIMEOUT_S; FP8EXT_SANITIZE_RECORD=path.json writes their summaries as a record beside the bench's.
# Needs a built fp8ext (tools/gpu_check.sh stage build) on PYTHONPATH. Exit 1 if any tool reports anything.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-gpu_check_out}
TOOLS=${2:-${FP8EXT_SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}}
mkdir -p "$OUT_DIR"
export PYTORCH_NO_CUDA_MEMORY_CACHING=1

run_tool() {
  local tool=$1 extra="" args=""
  [ "$tool" = "memcheck" ] && extra="--leak-check no"
  # racecheck is slow (about 0.7 s a launch on the H200): one shape per kernel, at a pipeline-wrapping K, unless
  # FP8EXT_RACECHECK_FULL=1 asks for the whole tail sweep.
  [ "$tool" = "racecheck" ] && [ "${FP8EXT_RACECHECK_FULL:-0}" != 1 ] && args="--quick"
  # initcheck does not see the epilogue's TMA stores, so reading an output back is reported as uninitialized
  # (every element, on the H200); it runs the launches without the read-back and checks the kernels' own reads.
  [ "$tool" = "initcheck" ] && args="--no-check"
  local start=$(date +%s)
  timeout "${FP8EXT_SANITIZE_TIMEOUT_S:-1800}" \
  compute-sanitizer --tool "$tool" $extra --error-exitcode 3 \
    --print-limit 20 python3 tools/sanitize_workload.py $args ${FP8EXT_SANITIZE_ARGS:-} >"$OUT_DIR/sanitize-$tool.log" 2>&1
  echo "$? $(( $(date +%s) - start ))" >"$OUT_DIR/sanitize-$tool.rc"
}

for tool in $TOOLS; do run_tool "$tool" & done
wait

status=0
for tool in $TOOLS; do
  read -r rc seconds <"$OUT_DIR/sanitize-$tool.rc"
  log="$OUT_DIR/sanitize-$tool.log"
  errors=$(grep -oE "(ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard.*)" "$log" | tail -1)
  echo "compute-sanitizer $tool: rc=$rc ${errors:-no summary} ($seconds s)"
  grep -m1 "sanitize workload" "$log" || tail -5 "$log"
  # the launch each reported error followed (the workload announces every launch)
  awk '/^launch /{l=$0} /^========= [A-Z]/ && !/SUMMARY/{if (l) c[l]++} END{for (k in c) print "  " c[k] " report lines after: " k}' \
    "$log" | sort | head -10
  [ "$rc" -eq 0 ] || status=1
done

if [ -n "${FP8EXT_SANITIZE_RECORD:-}" ]; then
  python3 - "$OUT_DIR" "$FP8EXT_SANITIZE_RECORD" $TOOLS <<'PY'
import json, re, sys
from pathlib import Path
from fp8ext.bench.common import suite_record
out_dir, record, tools = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
runs = []
for tool in tools:
    log = (out_dir / f"sanitize-{tool}.log").read_text(errors="replace")
    rc, seconds = (out_dir / f"sanitize-{tool}.rc").read_text().split()
    summary = re.findall(r"(ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: [0-9]+ hazards?[^\n]*)", log)
    workload = re.findall(r"sanitize workload: ([^\n]*)", log)
    runs.append({"tool": tool, "rc": int(rc), "seconds": int(seconds), "summary": summary[-1] if summary else None,
                 "workload": workload[-1] if workload else None})
data = {**suite_record("sanitize"),
        "workload": "tools/sanitize_workload.py (bash tools/sanitize.sh): every built row-wise and block-wise kernel "
                    "forced by name on tail shapes and at a K that wraps every pipeline (2064: 17 K tiles), checked "
                    "against float64; quantize_rowwise and quantize_blockwise checked bit for bit against the CPU "
                    "path; the tensor-wise route and an empty call. racecheck --quick (one shape per kernel, at the "
                    "wrapping K), initcheck --no-check; PYTORCH_NO_CUDA_MEMORY_CACHING=1. Correctness only, no timing.",
        "runs": runs}
Path(record).write_text(json.dumps(data, indent=1) + "\n")
print(f"wrote {record}")
PY
fi
exit $status
