#!/usr/bin/env bash
# Hardware counters of fp8ext's kernel and cuBLASLt's (torch._scaled_mm row-wise) on one shape, one launch
# each after two warm-ups: speed of light, compute and memory workload sections, as CSV under $1.
# Clocks are left alone (--clock-control none). Needs ncu with counter access (the Firecracker machines).
#
#   bash scripts/ncu_compare.sh OUT_DIR [M N K]
set -euo pipefail
OUT=${1:?output folder}; M=${2:-8192}; N=${3:-8192}; K=${4:-8192}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
for peer in fp8ext torch; do
  case $peer in
    fp8ext) regex='regex:device_kernel|gemv' ;;
    torch) regex='regex:nvjet|sm90_xmma|cutlass' ;;
  esac
  ncu --clock-control none -k "$regex" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section LaunchStats --section Occupancy --csv --page details \
      "$PY" - "$peer" "$M" "$N" "$K" >"$OUT/ncu_${peer}_${M}x${N}x${K}.csv" 2>"$OUT/ncu_${peer}.err" <<'PY' \
    || { echo "ncu failed for $peer"; tail -5 "$OUT/ncu_${peer}.err"; }
import sys, torch, fp8ext
from fp8ext.bench import make_operands
peer, M, N, K = sys.argv[1], *map(int, sys.argv[2:5])
a, b, sa, sb, _, _ = make_operands(M, N, K)
for _ in range(3):
    if peer == "fp8ext":
        fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
    else:
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
torch.cuda.synchronize()
PY
  grep -E '"(Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Hit Rate|L1/TEX Hit Rate|Registers Per Thread|Grid Size|Block Size|Dynamic Shared Memory Per Block|Executed Ipc Active|Mem Busy|Max Bandwidth)"' \
    "$OUT/ncu_${peer}_${M}x${N}x${K}.csv" | awk -F'","' -v p=$peer '{print p": "$(NF-2)" = "$NF" "$(NF-1)}' | tr -d '"' || true
done
