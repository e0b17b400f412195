#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over tools/sanitize_workload.py, with
# PyTorch's caching allocator off so that out-of-bounds accesses hit unallocated memory.
#   bash tools/sanitize.sh [out_dir] [tools]     (default tools: memcheck racecheck initcheck synccheck)
# FP8EXT_SANITIZE_ARGS passes arguments to the workload (e.g. --quick, --kernels 'gemv_*'); the log of each
# tool is $out_dir/sanitize-<tool>.log.
# Needs a built fp8ext (tools/gpu_check.sh stage build) on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-gpu_check_out}
TOOLS=${2:-${FP8EXT_SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}}
mkdir -p "$OUT_DIR"
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
status=0
for tool in $TOOLS; do
  extra="" args=""
  [ "$tool" = "memcheck" ] && extra="--leak-check no"
  # racecheck is slow (about 0.7 s a launch on the H200): one shape per kernel, at a pipeline-wrapping K, unless
  # FP8EXT_RACECHECK_FULL=1 asks for the whole tail sweep (about 4 minutes).
  [ "$tool" = "racecheck" ] && [ "${FP8EXT_RACECHECK_FULL:-0}" != 1 ] && args="--quick"
  # initcheck does not see the epilogue's TMA stores, so reading an output back is reported as uninitialized
  # (every element, on the H200); it runs the launches without the read-back and checks the kernels' own reads.
  [ "$tool" = "initcheck" ] && args="--no-check"
  start=$(date +%s)
  timeout "${FP8EXT_SANITIZE_TIMEOUT_S:-1800}" \
  compute-sanitizer --tool "$tool" $extra --error-exitcode 3 \
    --print-limit 20 python3 tools/sanitize_workload.py $args ${FP8EXT_SANITIZE_ARGS:-} >"$OUT_DIR/sanitize-$tool.log" 2>&1
  rc=$?
  errors=$(grep -oE "(ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard.*)" "$OUT_DIR/sanitize-$tool.log" | tail -1)
  echo "compute-sanitizer $tool: rc=$rc ${errors:-no summary} ($(( $(date +%s) - start )) s)"
  grep -m1 "sanitize workload" "$OUT_DIR/sanitize-$tool.log" || tail -5 "$OUT_DIR/sanitize-$tool.log"
  # the launch each reported error followed (the workload announces every launch)
  awk '/^launch /{l=$0} /^========= [A-Z]/ && !/SUMMARY/{if (l) c[l]++} END{for (k in c) print "  " c[k] " report lines after: " k}' \
    "$OUT_DIR/sanitize-$tool.log" | sort | head -10
  [ $rc -eq 0 ] || status=1
done
exit $status
