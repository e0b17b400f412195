#!/usr/bin/env bash
# The whole GPU check of fp8ext in one command, for an H100/H200 machine with no network:
# build with all cores, run the full test suite (CPU and GPU tests), and a benchmark; logs and JSON go to
# $FP8EXT_OUT (default: gpu_check_out/).
#
#   FP8EXT_OUT=/tmp/out bash tools/gpu_check.sh                 # build + test + quick bench
#   FP8EXT_STAGES=build,tune FP8EXT_OUT=... bash tools/gpu_check.sh
#   FP8EXT_STAGES=build,test,bench FP8EXT_BENCH_SUITE=llama ...
#
# Stages, run in this order: build, test, calibrate (time the kernels the cost model offers on the tuning shapes:
# tune.py --calibrate), refit (fit csrc/sm90/dispatch/cost_model_coeffs.inc on this run's calibration, and rebuild),
# bench, zoo (the shape zoo, tuning and held-out parts), inductor (torch.compile max-autotune peer on the baseline's 7
# shapes, a process per shape within FP8EXT_INDUCTOR_BUDGET_S, default 420 s), multigpu (needs 2 GPUs), invariance
# (batch invariance through dispatch), host (host time per eager call), floor (decode against an empty kernel and a
# plain read), autotune (the autotuner's picks against the cost model's), decode-chain (a decode layer per candidate
# kernel, as chains replayed in CUDA graphs), edge (NaN, inf, zero scales and overflow against cuBLASLt), model (a
# Llama-3 8B/70B-shaped decoder stack end to end: bf16, fp8ext.convert, torch row-wise and torchao; prefill and decode
# tokens/s, top-1 agreement; plot in $OUT_DIR/model.png; FP8EXT_MODEL_ARGS adds options, e.g. "--config 8b
# --compile"), quantize (quantize_rowwise against copy bandwidth and an empty launch), linear (Float8Linear against
# bf16 nn.Linear on Llama-3 layers), blockwise (the block-scaled kernels against torch block-wise and fp8ext row-wise;
# with the stage selftest also, first, tests/test_blockwise_selftest.py), sanitize (tools/sanitize.sh), compile
# (fp8ext.compile: tests/test_compile_gpu.py, then the compile suite with FP8EXT_COMPILE_ARGS, e.g. "--no-models
# --shape-rows 0:8", "--no-shapes --model-layers 8", or "--gpus 0 --fanout-deadline-s 480" for every GPU of the host,
# a process each; a fresh inductor cache for each run), grouped (fp8ext.scaled_grouped_mm: tests/test_grouped_gpu.py
# and tests/test_moe_gpu.py, then the grouped suite with FP8EXT_GROUPED_ARGS). Each of inductor, invariance, host,
# floor, autotune, decode-chain, edge, model, quantize, linear, compile and grouped is `python -m fp8ext.bench --suite
# NAME` (NAME inductor-peer for inductor), its record in $OUT_DIR/NAME.json and its output in $OUT_DIR/NAME.log.
# Wheels that the machine lacks (nvidia-cutlass for the headers) may be placed in .whl/; they are installed to a
# private prefix first. The build is in place and incremental (build/ is reused when the machine is still warm).
#
# Wheel mode: FP8EXT_WHEEL=path/to/fp8ext-<version>-cp310-abi3-linux_x86_64.whl makes the build stage install that
# wheel (pip install --no-deps --force-reinstall, into $PYTHON's environment) instead of building, and every stage
# then runs the installed copy, not ./python; build.log and $OUT_DIR/run_info.json record what was installed and
# what it runs on. refit, which rebuilds from source, is refused in this mode.
set -euo pipefail
# A relative wheel path is the caller's, before the cd.
WHEEL=${FP8EXT_WHEEL:+$(realpath "$FP8EXT_WHEEL")}
cd "$(dirname "$0")/.."
OUT_DIR="${FP8EXT_OUT:-gpu_check_out}"
STAGES=",${FP8EXT_STAGES:-build,test,bench},"
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
T0=$(date +%s)
# Stages that can stop early (tune) finish by this time, so a run under a hard limit still returns its data.
DEADLINE=$(( T0 + ${FP8EXT_TIME_BUDGET_S:-100000} ))
export PYTHONUNBUFFERED=1

# Not an fp8ext wheel kept there: on PYTHONPATH it would shadow the copy under test.
rm -rf /tmp/fp8ext-site/fp8ext /tmp/fp8ext-site/fp8ext-*.dist-info
deps=()
for w in .whl/*.whl; do
  if [[ -f $w && $(basename "$w") != fp8ext-* ]]; then deps+=("$w"); fi
done
if [ ${#deps[@]} -gt 0 ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/fp8ext-site "${deps[@]}"
  export PYTHONPATH=/tmp/fp8ext-site${PYTHONPATH:+:$PYTHONPATH}
  if [ -z "${CUTLASS_DIR:-}" ] && [ -d /tmp/fp8ext-site/cutlass_library/source/include ]; then
    export CUTLASS_DIR=/tmp/fp8ext-site/cutlass_library/source
  fi
fi
if [ -z "$WHEEL" ]; then
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
fi

# The H200 image points the build at /opt/gcc/bin/g++ (CXX in its environment), and an extension built with it
# segfaults as soon as a C++ exception crosses it: a one-line load_inline extension with a failing TORCH_CHECK
# crashed with it and raised properly with /usr/bin/g++ (docs/design.md, Architecture). So the system
# compiler is used here, whatever the environment says; FP8EXT_CXX / FP8EXT_CC choose another.
FP8EXT_CXX=${FP8EXT_CXX:-/usr/bin/g++}
FP8EXT_CC=${FP8EXT_CC:-/usr/bin/gcc}
if [ -x "$FP8EXT_CXX" ] && [ -x "$FP8EXT_CC" ]; then export CXX=$FP8EXT_CXX CC=$FP8EXT_CC; fi
echo "host compilers: CC=${CC:-default} CXX=${CXX:-default}"

# Wheel mode's build stage: install the wheel, and record what runs.
install_wheel() {
  local start=$(date +%s)
  [ -f "$WHEEL" ] || { echo "FP8EXT_WHEEL: no such file: $WHEEL"; exit 1; }
  $PY -m pip install --no-index --no-deps --force-reinstall "$WHEEL" >>"$OUT_DIR/build.log" 2>&1 \
    || { tail -30 "$OUT_DIR/build.log"; exit 1; }
  $PY - "$WHEEL" "$OUT_DIR/run_info.json" <<'PY' 2>&1 | tee -a "$OUT_DIR/build.log"
import json, os, platform, sys
import torch
import fp8ext
wheel, record = sys.argv[1:3]
info = fp8ext.build_info()
print(f"installed {os.path.basename(wheel)}: fp8ext {fp8ext.__version__} from {fp8ext.__file__}")
print(f"  built with {info.get('built_with')}, for CUDA {info.get('cuda_major')}, torch >= {info.get('torch_floor')}")
print(f"  running on torch {torch.__version__} (CUDA {torch.version.cuda}), Python {platform.python_version()}")
source = os.path.realpath("python") + os.sep
assert not os.path.realpath(fp8ext.__file__).startswith(source), "fp8ext was imported from ./python, not the wheel"
# For tools/wheel_record.py.
with open(record, "w") as f:
    json.dump({"wheel": {"name": os.path.basename(wheel), "size_bytes": os.path.getsize(wheel)},
               "fp8ext": {"version": fp8ext.__version__, "file": fp8ext.__file__, "cuda_major": info.get("cuda_major"),
                          "torch_floor": info.get("torch_floor")},
               "built_with": info.get("built_with"),
               "run_with": {"torch": torch.__version__, "python": platform.python_version(),
                            "cuda": torch.version.cuda}}, f, indent=1)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
  echo "install: $(( $(date +%s) - start )) s"
}

build() {
  local start=$(date +%s)
  # The build is _C.abi3.so; an in-place _C.cpython-*.so left from an earlier build would be imported before it.
  rm -f python/fp8ext/_C.cpython-*.so
  MAX_JOBS=${MAX_JOBS:-$(nproc)} FP8EXT_PTXAS_VERBOSE=1 $PY setup.py build_ext --inplace >>"$OUT_DIR/build.log" 2>&1 \
    || { tail -50 "$OUT_DIR/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - start )) s"
}

if [[ $STAGES == *,build,* ]] && [ -n "$WHEEL" ]; then
  install_wheel
elif [[ $STAGES == *,build,* ]]; then
  build
  # ptxas findings worth a look: C7510 (wgmma serialized), spills, stack frames.
  grep -E "C75[0-9][0-9]|[1-9][0-9]* bytes spill|Compiling entry|Function properties for .*device_kernel" \
    "$OUT_DIR/build.log" | grep -E "C75|spill" | sort | uniq -c | sort -rn | head -20 || true
  grep -c "C7510" "$OUT_DIR/build.log" | sed 's/^/ptxas C7510 warnings: /' || true
fi

$PY - <<'PY'
import torch, fp8ext
info = fp8ext.build_info()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp8ext kernels: {len(info['registered_kernels'])}")
PY

if [[ $STAGES == *,test,* ]]; then
  set +e
  $PY -m pytest tests -q -p no:cacheprovider ${FP8EXT_PYTEST_ARGS:-} \
    >"$OUT_DIR/pytest.log" 2>&1
  rc=$?
  set -e
  grep -E "^(FAILED|ERROR)" "$OUT_DIR/pytest.log" | head -30 || true
  tail -3 "$OUT_DIR/pytest.log"
  [ $rc -eq 0 ] || echo "pytest exit code $rc"
fi

# The cost model's calibration: every kernel the model offers on the zoo's tuning part and the llama grid
# (tools/tune.py --calibrate), then the fit written to csrc/sm90/dispatch/cost_model_coeffs.inc and a rebuild.
if [[ $STAGES == *,calibrate,* ]]; then
  calib_log=${TMPDIR:-/tmp}/fp8ext-calibrate.log
  $PY tools/tune.py --calibrate --out "$OUT_DIR/calibration.json" --deadline "$DEADLINE" ${FP8EXT_CALIBRATE_ARGS:-} \
    >"$calib_log" 2>&1 || { tail -30 "$calib_log"; exit 1; }
  tail -2 "$calib_log"
fi
if [[ $STAGES == *,refit,* ]]; then
  [ -z "$WHEEL" ] || { echo "refit rebuilds fp8ext from source: unset FP8EXT_WHEEL to run it"; exit 1; }
  $PY tools/tune.py --fit "$OUT_DIR/calibration.json" --write
  cp csrc/sm90/dispatch/cost_model_coeffs.inc "$OUT_DIR/cost_model_coeffs.inc"
  build
fi

if [[ $STAGES == *,bench,* ]]; then
  suite=${FP8EXT_BENCH_SUITE:-quick}
  $PY -m fp8ext.bench --suite "$suite" --json "$OUT_DIR/bench-$suite.json" --plot "$OUT_DIR/bench-$suite.png" \
    --quiet ${FP8EXT_BENCH_ARGS:-} >"$OUT_DIR/bench-$suite.log" 2>&1 \
    || { tail -30 "$OUT_DIR/bench-$suite.log"; exit 1; }
  sed -n '/geomean/,$p' "$OUT_DIR/bench-$suite.log"
fi

# The shape zoo (python/fp8ext/zoo.py): other models' weights and odd M, tuning and held-out parts, default path
# and fp8ext's kernels alone against torch row-wise.
if [[ $STAGES == *,zoo,* ]]; then
  $PY -m fp8ext.bench --suite zoo --json "$OUT_DIR/bench-zoo.json" --quiet ${FP8EXT_ZOO_ARGS:-} \
    >"$OUT_DIR/bench-zoo.log" 2>&1 || { tail -30 "$OUT_DIR/bench-zoo.log"; exit 1; }
  sed -n '/geomean/,$p' "$OUT_DIR/bench-zoo.log"
fi

# The probes: one suite of the bench each, its record in $OUT_DIR/<suite>.json and its output in <suite>.log.
probe() {
  local name=$1; shift
  $PY -m fp8ext.bench --suite "$name" --json "$OUT_DIR/$name.json" "$@" >"$OUT_DIR/$name.log" 2>&1 \
    || { tail -30 "$OUT_DIR/$name.log"; exit 1; }
}

# A stage's GPU tests (the files in $2, run from /tmp so that the installed fp8ext is the one tested; a failure is
# reported and the suite still runs), then `probe $1` with the remaining arguments.
tests_then_probe() {
  local name=$1 t
  local -a paths=()
  for t in $2; do paths+=("$PWD/$t"); done
  shift 2
  set +e
  (cd /tmp && $PY -m pytest -q -p no:cacheprovider -rfs "${paths[@]}") >"$OUT_DIR/pytest-$name.log" 2>&1
  echo "$name pytest exit code $?"
  set -e
  tail -3 "$OUT_DIR/pytest-$name.log"
  probe "$name" "$@"
}

if [[ $STAGES == *,inductor,* ]]; then
  probe inductor-peer --budget-s "${FP8EXT_INDUCTOR_BUDGET_S:-420}"
  cat "$OUT_DIR/inductor-peer.log"
fi

if [[ $STAGES == *,multigpu,* ]]; then
  # Two or more GPUs (kind nvidia-h200-x2): device selection and the tensor-parallel linear. NVLink multicast
  # stays off (NCCL_NVLS_ENABLE=0).
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  set +e
  $PY -m pytest -q -p no:cacheprovider -m multigpu tests/test_multigpu.py >"$OUT_DIR/pytest-multigpu.log" 2>&1
  echo "multigpu pytest exit code $?"
  set -e
  tail -3 "$OUT_DIR/pytest-multigpu.log"
fi

if [[ $STAGES == *,invariance,* ]]; then
  probe invariance
  awk '$0 !~ /identical 100.00%/' "$OUT_DIR/invariance.log" | head -40
fi

for name in host floor autotune decode-chain; do
  if [[ $STAGES == *,$name,* ]]; then
    probe "$name"
    cat "$OUT_DIR/$name.log"
  fi
done

if [[ $STAGES == *,edge,* ]]; then
  probe edge
  grep -c '^{' "$OUT_DIR/edge.log" | sed 's/^/edge numerics rows: /'
  sed -n '/edge summary/,$p' "$OUT_DIR/edge.log"
fi

if [[ $STAGES == *,model,* ]]; then
  probe model --plot "$OUT_DIR/model.png" ${FP8EXT_MODEL_ARGS:-}
  sed -n '/model summary/,$p' "$OUT_DIR/model.log"
fi

if [[ $STAGES == *,compile,* ]]; then
  # A fresh Inductor cache: what the suite compiles is timed as a first compile, and no earlier run's autotune
  # times decide for it.
  export TORCHINDUCTOR_CACHE_DIR=$(mktemp -d /tmp/fp8ext-inductor-XXXXXX)
  # Inductor compiles Triton kernels on this many workers (its default: the CPUs it may use, at most 32); the
  # record says what it had.
  export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-$(nproc)}
  tests_then_probe compile tests/test_compile_gpu.py ${FP8EXT_COMPILE_ARGS:-}
  grep -E "^[0-9]+x|geomean|worst|below|model section" "$OUT_DIR/compile.log" | tail -40
fi

if [[ $STAGES == *,grouped,* ]]; then
  # fp8ext.scaled_grouped_mm: its GPU tests, then the grouped suite (FP8EXT_GROUPED_ARGS, e.g. "--tokens 1,128").
  tests_then_probe grouped "tests/test_grouped_gpu.py tests/test_moe_gpu.py" ${FP8EXT_GROUPED_ARGS:-}
  sed -n '/grouped summary/,$p' "$OUT_DIR/grouped.log"
fi

for name in quantize linear; do
  if [[ $STAGES == *,$name,* ]]; then
    probe "$name"
    sed -n "/$name summary/,\$p" "$OUT_DIR/$name.log"
  fi
done

if [[ $STAGES == *,blockwise,* ]]; then
  # The block-scaled kernels: the standalone self-test (no torch) first, then the suite (tuning part with every
  # kernel timed, held-out part) against torch block-wise and fp8ext row-wise.
  if [[ $STAGES == *,selftest,* ]]; then
    FP8EXT_SELFTEST=1 FP8EXT_SELFTEST_DIR="$OUT_DIR/selftest" $PY -m pytest -q -s -p no:cacheprovider \
      tests/test_blockwise_selftest.py >"$OUT_DIR/blockwise-selftest.log" 2>&1 \
      || { tail -30 "$OUT_DIR/blockwise-selftest.log"; exit 1; }
    tail -20 "$OUT_DIR/blockwise-selftest.log"
  fi
  probe blockwise --all-kernels ${FP8EXT_BLOCKWISE_ARGS:-}
  sed -n '/geomean/,$p' "$OUT_DIR/blockwise.log"
fi

if [[ $STAGES == *,sanitize,* ]]; then
  bash tools/sanitize.sh "$OUT_DIR"
fi
