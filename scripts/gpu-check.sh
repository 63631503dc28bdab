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
#   summary.json      test counts, failed tests, bench figures with their
#                     fractions of peak, GPU name, timings, phase status
#   configure.log build.log ctest.log junit.xml
#   gpu_decode_bench.{json,log} gpu_kernels_bench.log nvidia-smi.txt
# A failing test does not stop the benchmarks; the exit status is non-zero
# when the build failed or any test or bench failed.
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
GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)"
GPU_DRIVER="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
log "GPU: ${GPU_NAME:-none} driver ${GPU_DRIVER:-?}"
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
    --json "$OUT/gpu_decode_bench.json"
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
GPU_NAME="$GPU_NAME" GPU_DRIVER="$GPU_DRIVER" ELAPSED="$ELAPSED" OUT="$OUT" \
  python3 - <<'PY' || log "summary writer failed"
import json, os, xml.etree.ElementTree as ET
out = os.environ["OUT"]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            text = f.read().strip()
        # A bench may print log lines before its JSON object.
        return json.loads(text[text.index("{"):]) if text else None
    except Exception as e:  # missing or malformed
        return {"error": str(e)}
def load_lines(name):
    rows = []
    try:
        with open(os.path.join(out, name)) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError as e:
        return {"error": str(e)}
    return rows
phases = {}
with open(os.path.join(out, "phases.txt")) as f:
    for line in f:
        if "=" in line:
            k, v = line.strip().split("=", 1)
            phases[k] = v
tests = {"total": 0, "passed": 0, "failed": 0, "skipped": 0, "failed_names": []}
try:
    root = ET.parse(os.path.join(out, "junit.xml")).getroot()
    for case in root.iter("testcase"):
        tests["total"] += 1
        status = case.get("status", "")
        if case.find("failure") is not None or case.find("error") is not None \
                or status == "fail":
            tests["failed"] += 1
            tests["failed_names"].append(case.get("name"))
        elif case.find("skipped") is not None or status in ("notrun", "disabled"):
            tests["skipped"] += 1
        else:
            tests["passed"] += 1
except Exception as e:
    tests["error"] = str(e)
decode = load("gpu_decode_bench.json")
figures = []
if isinstance(decode, dict):
    for d in decode.get("decode", []) or []:
        figures.append({"name": f"decode batch {d['batch']} (context {d['context']})",
                        "value": d["hbm_tbps"], "unit": "TB/s HBM",
                        "fraction_of_peak": d["hbm_fraction"],
                        "peak": f"{decode.get('hbm_peak_tbps')} TB/s",
                        "step_ms": d["step_ms"], "tokens_per_s": d["tokens_per_s"],
                        "goal": 0.8 if d["batch"] == 1 else None})
    p = decode.get("prefill")
    if p:
        figures.append({"name": f"prefill {p['tokens']} tokens", "value": p["tflops"],
                        "unit": "TFLOP/s", "fraction_of_peak": p["peak_fraction"],
                        "peak": f"{decode.get('bf16_peak_tflops')} TFLOP/s dense bf16",
                        "ms": p["ms"], "goal": 0.5})
kernels = load_lines("gpu_kernels_bench.log")
if isinstance(kernels, list):
    for row in kernels:
        for key, val in row.items():
            if key.startswith("frac") and isinstance(val, (int, float)):
                label = ", ".join(f"{k} {v}" for k, v in row.items()
                                  if not isinstance(v, float) and k != "bench")
                figures.append({"name": f"kernel {row.get('bench')} ({label})",
                                "fraction_of_peak": val, "peak": key,
                                "value": val, "unit": "fraction"})
summary = {
    "gpu": os.environ.get("GPU_NAME") or None,
    "driver": os.environ.get("GPU_DRIVER") or None,
    "commit": open(os.path.join(out, "commit.txt")).read().strip(),
    "elapsed_s": int(os.environ["ELAPSED"]),
    "phases": phases,
    "tests": tests,
    "figures": figures,
    "gpu_decode_bench": decode,
    "gpu_kernels_bench": kernels,
}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
print(json.dumps({k: summary[k] for k in ("gpu", "elapsed_s", "phases", "tests")}, indent=2))
for fig in figures:
    print(f"{fig['name']}: {fig['value']:.3f} {fig['unit']} = "
          f"{100 * fig['fraction_of_peak']:.1f}% of {fig['peak']}")
PY

FAILED=0
while IFS='=' read -r k v; do
  case "$v" in 0|missing|skipped) ;; *) FAILED=1 ;; esac
done <"$STATUS_FILE"
log "done in $(($(date +%s) - START))s; summary: $OUT/summary.json"
exit "$FAILED"
