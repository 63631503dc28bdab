#!/usr/bin/env bash
# One-shot GPU check for a CUDA machine (written for one H200, 16 cores):
# configure with CUDA, build only the CUDA plugin, the gpu tests and the GPU
# benchmarks, run `ctest -L gpu`, run the benchmarks with short repetitions
# and write a JSON summary. Finishes in about 8 minutes including the build.
#
#   scripts/gpu-check.sh                 # results in $OUT, else ./gpu-results
#
# Environment: OUT (results folder), PDSERVE_BUILD_DIR (default build-gpu),
# PDSERVE_JOBS (default 16), GPU_CHECK_LAYERS (decode bench layers, default
# 36), GPU_CHECK_SKIP_BUILD=1 (reuse an existing build), GPU_CHECK_BUDGET_S
# (default 470: each phase's time limit is cut to keep the whole run within
# it, leaving time for the phases after it).
# Everything is logged under the results folder:
#   summary.json      test counts, failed tests, every bench figure (the
#                     HBM read and bf16 GEMM peaks measured in the same run,
#                     decode batch 1/8/64, prefill 4096, decode attention at
#                     4K/32K, batch-1 ITL p99/p50 over 512 tokens, GPU idle
#                     between steps) with its fraction of the measured peak
#                     and its issue-18 goal, GPU name/driver/clocks,
#                     timings, phase status, verdict
#   configure.log build.log ctest.log junit.xml
#   gpu_decode_bench.{json,log} gpu_kernels_bench.log nvidia-smi.txt
#   gpu.txt verdict.txt (scripts/gpu_check_summary.py: its checks)
# A failing test does not stop the benchmarks; the exit status is non-zero
# unless every phase ran and passed, the gpu tests ran (not all skipped) and
# every figure is present (scripts/gpu_check_summary.py's verdict).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
OUT="${OUT:-$ROOT/gpu-results}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${PDSERVE_BUILD_DIR:-build-gpu}"
JOBS="${PDSERVE_JOBS:-16}"
LAYERS="${GPU_CHECK_LAYERS:-36}"
START=$(date +%s)
STATUS_FILE="$OUT/phases.txt"
: >"$STATUS_FILE"

log() { echo "[gpu-check $(($(date +%s) - START))s] $*" | tee -a "$OUT/gpu-check.log"; }
phase() { echo "$1=$2" >>"$STATUS_FILE"; }

BUDGET="${GPU_CHECK_BUDGET_S:-470}"  # whole run, seconds

# Runs "$@" with a time limit, output to $OUT/<name>.log; records the status.
# The limit is cut so that `reserve` seconds of the budget stay for the
# phases after this one.
run_phase() {
  local name="$1" limit="$2" reserve="$3"
  shift 3
  local left=$((BUDGET - ($(date +%s) - START) - reserve))
  ((left < limit)) && limit=$left
  ((limit < 10)) && limit=10
  log "$name (limit ${limit}s): $*"
  local rc=0
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  phase "$name" "$rc"
  log "$name exit $rc"
  return 0
}

log "results in $OUT"
{ nvidia-smi || echo "nvidia-smi failed"; } >"$OUT/nvidia-smi.txt" 2>&1
# Name, driver and clocks (now and max) for summary.json: the fields, in
# order, of GPU_FIELDS in scripts/gpu_check_summary.py.
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,memory.total,power.limit \
  --format=csv,noheader 2>/dev/null | head -1 >"$OUT/gpu.txt" || true
log "GPU: $(cat "$OUT/gpu.txt" 2>/dev/null || echo none)"
git -C "$ROOT" rev-parse HEAD >"$OUT/commit.txt" 2>/dev/null || echo unknown >"$OUT/commit.txt"

BENCHES=(gpu_decode_bench gpu_kernels_bench)

if [[ "${GPU_CHECK_SKIP_BUILD:-0}" != 1 ]]; then
  GEN=()
  [[ -f "$BUILD/CMakeCache.txt" ]] || GEN=(-G "Unix Makefiles")
  run_phase configure 120 300 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DPDSERVE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DPDSERVE_BUILD_TESTS=ON -DPDSERVE_BUILD_BENCH=ON
  if grep -q "^configure=0$" "$STATUS_FILE"; then
    # The plugin and the benches that exist in this tree, then every target
    # of tests/gpu (all gpu-labelled tests live there).
    HELP="$(cmake --build "$BUILD" --target help 2>/dev/null || true)"
    TARGETS=()
    for t in pdserve_cuda "${BENCHES[@]}"; do
      if grep -qE "(^|[ .])$t(:|$)" <<<"$HELP"; then TARGETS+=("$t"); fi
    done
    log "building: ${TARGETS[*]} + tests/gpu"
    run_phase build 330 130 bash -c 'cmake --build "$1" -j "$2" --target "${@:3}" &&
      cmake --build "$1/tests/gpu" -j "$2"' _ "$BUILD" "$JOBS" "${TARGETS[@]}"
  else
    phase build skipped
  fi
fi

# Tests: keep going on failure; JUnit for the counts.
if [[ -d "$BUILD" ]]; then
  run_phase ctest 150 80 ctest --test-dir "$BUILD" -L gpu --output-on-failure \
    --timeout 120 --output-junit "$OUT/junit.xml"
fi

# Benchmarks, short repetitions.
DECODE_BENCH="$BUILD/bench/gpu_decode_bench"
if [[ -x "$DECODE_BENCH" ]]; then
  run_phase gpu_decode_bench 120 30 "$DECODE_BENCH" --layers "$LAYERS" \
    --batches 1,8,64 --context 512 --steps 10 --prefill 4096 --prefill_reps 2 \
    --itl_steps 512 --json "$OUT/gpu_decode_bench.json"
else
  phase gpu_decode_bench missing
fi
KERNEL_BENCH="$BUILD/bench/gpu_kernels_bench"
if [[ -x "$KERNEL_BENCH" ]]; then
  # One JSON object per line on stdout (gpu_kernels_bench.log).
  run_phase gpu_kernels_bench 90 0 "$KERNEL_BENCH" --quick
else
  phase gpu_kernels_bench missing
fi

ELAPSED=$(($(date +%s) - START))
log "writing summary ($ELAPSED s)"
SUMMARY_ARGS=(--elapsed "$ELAPSED")
[[ "${GPU_CHECK_SKIP_BUILD:-0}" == 1 ]] && SUMMARY_ARGS+=(--skip-build)
FAILED=0
python3 "$ROOT/scripts/gpu_check_summary.py" "$OUT" "${SUMMARY_ARGS[@]}" \
  2>&1 | tee "$OUT/verdict.txt" || FAILED=1

log "done in $(($(date +%s) - START))s; summary: $OUT/summary.json"
exit "$FAILED"
