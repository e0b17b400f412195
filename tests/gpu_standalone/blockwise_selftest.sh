#!/usr/bin/env bash
# Builds and runs the standalone GPU self-test of the block-scaled kernels (blockwise_selftest.cu beside this
# file, with csrc/sm90/blockwise/blockwise_registry.cpp, every csrc/sm90/blockwise/kernels/*.cu and the
# block-scaled decode kernels csrc/sm90/decode/bw_gemv_*.cu).
# Needs nvcc and the CUTLASS headers that tools/build_env.py finds; no torch, no Python packages beyond that.
# tests/test_blockwise_selftest.py runs it under pytest (FP8EXT_SELFTEST=1); by hand:
#   bash tests/gpu_standalone/blockwise_selftest.sh [build_dir]      (default /tmp/fp8ext_blockwise_selftest)
# Extra arguments for the test binary go in FP8EXT_SELFTEST_ARGS (e.g. --no-timing).
# Every translation unit compiles in its own nvcc process, as many at once as there are cores; ptxas's resource
# usage goes to $build_dir/<name>.log. Exits non-zero if a compile, the link or any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-/tmp/fp8ext_blockwise_selftest}
mkdir -p "$BUILD"
PY=${PYTHON:-python3}

# The project's nvcc flags and include directories, from the module setup.py uses.
read -r -a FLAGS <<<"$($PY -c 'import sys; sys.path.insert(0, "tools"); import build_env as b; print(" ".join(b.NVCC_FLAGS))')"
read -r -a INCS <<<"$($PY -c 'import sys; sys.path.insert(0, "tools"); import build_env as b; print(" ".join("-I" + str(d) for d in b.include_dirs(True)))')"
CUDA_HOME=$($PY -c 'import sys; sys.path.insert(0, "tools"); import build_env as b; print(b.find_cuda_home() or "")')
NVCC=${CUDA_HOME:+$CUDA_HOME/bin/}nvcc

SOURCES=(csrc/sm90/blockwise/blockwise_registry.cpp tests/gpu_standalone/blockwise_selftest.cu
         csrc/sm90/blockwise/kernels/*.cu csrc/sm90/decode/bw_gemv_*.cu)
JOBS=$(nproc)
echo "building ${#SOURCES[@]} sources with $JOBS parallel nvcc jobs into $BUILD"
start=$(date +%s)
pids=() objs=()
for src in "${SOURCES[@]}"; do
  name=$(basename "${src%.*}")
  obj="$BUILD/$name.o"
  objs+=("$obj")
  # Throttle to $JOBS compiles at once.
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  ( "$NVCC" "${FLAGS[@]}" -Xptxas=-v "${INCS[@]}" -c "$src" -o "$obj" >"$BUILD/$name.log" 2>&1 \
      || { echo "compile failed: $src (log: $BUILD/$name.log)"; tail -20 "$BUILD/$name.log"; exit 1; } ) &
  pids+=($!)
done
fail=0
for pid in "${pids[@]}"; do wait "$pid" || fail=1; done
[ "$fail" = 0 ] || { echo "BUILD FAILED"; exit 1; }
"$NVCC" "${FLAGS[@]}" "${objs[@]}" -o "$BUILD/blockwise_selftest"
echo "built in $(( $(date +%s) - start )) s"
# Spills or serialized wgmma in any kernel are worth knowing before reading the timings.
grep -hE "spill stores|C7510|C7514|C7517" "$BUILD"/*.log | grep -vE " 0 bytes spill stores, 0 bytes spill loads" || true

"$BUILD/blockwise_selftest" ${FP8EXT_SELFTEST_ARGS:-}
