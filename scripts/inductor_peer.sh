#!/usr/bin/env bash
# fp8ext vs torch.compile max-autotune (persistent TMA templates on) on the 7 shapes of the inductor baseline,
# fast accumulation, one shape per process (cheapest compile first) until a time budget runs out; the rows go
# into one JSON in the bench format. Compiling takes 22-85 s per shape on the H200.
#   bash scripts/inductor_peer.sh OUT_DIR [budget_s]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?output folder}; BUDGET=${2:-600}
PY=${PYTHON:-python3}
T0=$(date +%s); TMP=$(mktemp -d)
for s in 16384x8192x8192 16x8192x8192 1024x10240x8192 2048x4096x14336 8192x8192x8192 128x28672x4096 4096x57344x8192; do
  left=$(( BUDGET - ($(date +%s) - T0) ))
  [ $left -lt 60 ] && { echo "inductor peer: out of time before $s"; break; }
  timeout $left $PY -m fp8ext.bench --suite custom --shapes $s --accum fast --compile-peer --quiet \
    --json "$TMP/$s.json" >"$TMP/$s.log" 2>&1 || { echo "inductor peer: $s did not finish"; tail -3 "$TMP/$s.log"; }
done
cat "$TMP"/*.log >"$OUT/inductor_peer.log" 2>/dev/null
$PY - "$TMP" "$OUT/inductor_peer.json" <<'PY'
import glob, json, sys
runs = [json.load(open(p)) for p in sorted(glob.glob(sys.argv[1] + "/*.json"))]
if runs:
    merged = {k: v for k, v in runs[0].items() if k not in ("rows", "summary")}
    merged["suite"] = "inductor"
    merged["rows"] = [r for run in runs for r in run["rows"]]
    json.dump(merged, open(sys.argv[2], "w"), indent=1)
    for r in merged["rows"]:
        print(f"{r['M']}x{r['N']}x{r['K']}: fp8ext {r['fp8ext_us']:.1f} us, compiled {r['torch_compile_rowwise_us']:.1f} us "
              f"({r['torch_compile_rowwise_us'] / r['fp8ext_us']:.3f}x), eager row-wise "
              f"{r['torch_rowwise_us'] / r['fp8ext_us']:.3f}x")
PY
