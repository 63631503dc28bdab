#!/usr/bin/env bash
# The sanitizer and fuzzing stage (scripts/test.sh runs it after ctest unless
# PDSERVE_SANITIZE_STAGE=0; cold it takes about 7 + 1.5 minutes on 2 cores:
# unity builds at -O1 with line tables, the SIMD kernel files without UBSan,
# which costs minutes per file on their intrinsics):
#  1. build-asan (clang, -fsanitize=address,undefined, libFuzzer coverage):
#     the unit tests of the parsers, tokenizers, chat templates, policy,
#     KV accounting, sampler, forward pass validation, HTTP server, config,
#     and the 7 fuzz targets; the tests run, then each fuzzer runs for
#     PDSERVE_FUZZ_SECONDS (default 5) from its committed corpus (new
#     inputs go to a scratch folder, never into the repository).
#  2. build-tsan (clang, -fsanitize=thread): the thread pool, the HTTP
#     server (the front end's IO threads), the scheduler's live request ids
#     and the front end's delayed runner.
# Any sanitizer report, test failure or fuzzer crash fails the stage.
#   scripts/sanitize.sh            # both
#   scripts/sanitize.sh asan|tsan  # one
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${PDSERVE_JOBS:-$(nproc)}"
FUZZ_SECONDS="${PDSERVE_FUZZ_SECONDS:-5}"
# A fixed seed: CI explores the same inputs every run (a finding is not a
# coin toss between runs); PDSERVE_FUZZ_SEED=0 lets libFuzzer pick one.
FUZZ_SEED="${PDSERVE_FUZZ_SEED:-1}"
WHICH="${1:-all}"
say() { printf '[sanitize] %s\n' "$*"; }

ASAN_TESTS=(
  formats_gguf_test formats_safetensors_test loader_test
  tokenizer_synthetic_test tokenizer_unicode_test tokenizer_detokenizer_test
  chat_jinja_test chat_template_test chat_output_parser_test
  policy_test kv_ledger_test prefix_cache_test model_sampler_test
  model_forward_test http_server_test config_test frontend_request_test
)
FUZZERS=(gguf safetensors llama2c tokenizer jinja request step)
# name[:gtest filter].
TSAN_TESTS=(thread_pool_tsan_test http_server_test live_request_ids_test
            delayed_runner_test)

configure() {  # dir, sanitizer list, fuzz ON/OFF
  local launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
              -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  cmake -S . -B "$1" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DPDSERVE_CUDA=OFF -DPDSERVE_BUILD_BENCH=OFF \
    -DPDSERVE_SANITIZE="$2" -DPDSERVE_BUILD_FUZZ="$3" -DCMAKE_UNITY_BUILD=ON \
    "${launcher[@]}" \
    >/dev/null || return 1
}

run_tests() {  # dir, tests (name[:gtest filter])...
  local dir="$1"; shift
  local failed=0
  for spec in "$@"; do
    local t="${spec%%:*}" filter="*"
    [ "$spec" != "$t" ] && filter="${spec#*:}"
    local bin
    bin="$(find "$dir/tests" -name "$t" -type f -perm -u+x | head -1)"
    if [ -z "$bin" ]; then say "FAILED $t: not built"; failed=1; continue; fi
    if (cd "$(dirname "$bin")" && "./$t" --gtest_brief=1 --gtest_filter="$filter" >"$dir/$t.log" 2>&1); then
      say "passed $t"
    else
      say "FAILED $t (log: $dir/$t.log)"; tail -40 "$dir/$t.log"; failed=1
    fi
  done
  return $failed
}

asan() {
  local dir="$PWD/build-asan"
  say "ASan+UBSan: configuring $dir"
  configure "$dir" address,undefined ON || return 1
  local targets=("${ASAN_TESTS[@]}")
  for f in "${FUZZERS[@]}"; do targets+=("fuzz_$f"); done
  say "building ${#targets[@]} targets with $JOBS jobs"
  cmake --build "$dir" -j "$JOBS" --target "${targets[@]}" || return 1
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  local failed=0
  run_tests "$dir" "${ASAN_TESTS[@]}" || failed=1
  for f in "${FUZZERS[@]}"; do
    local scratch="$dir/fuzz-scratch/$f"
    rm -rf "$scratch"; mkdir -p "$scratch"
    if "$dir/tests/fuzz/fuzz_$f" -max_total_time="$FUZZ_SECONDS" -seed="$FUZZ_SEED" \
        -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix="$dir/fuzz-scratch/$f-" \
        "$scratch" "tests/fuzz/corpus/$f" >"$dir/fuzz_$f.log" 2>&1; then
      say "fuzzed $f ${FUZZ_SECONDS}s: $(grep -Eo '#[0-9]+' "$dir/fuzz_$f.log" | tail -1 | tr -d '#') runs"
    else
      say "FAILED fuzz_$f (log: $dir/fuzz_$f.log; the input is in $dir/fuzz-scratch/)"
      tail -40 "$dir/fuzz_$f.log"; failed=1
    fi
  done
  return $failed
}

tsan() {
  local dir="$PWD/build-tsan"
  say "TSan: configuring $dir"
  configure "$dir" thread OFF || return 1
  local targets=()
  for spec in "${TSAN_TESTS[@]}"; do targets+=("${spec%%:*}"); done
  say "building ${#targets[@]} tests with $JOBS jobs"
  cmake --build "$dir" -j "$JOBS" --target "${targets[@]}" || return 1
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
  run_tests "$dir" "${TSAN_TESTS[@]}"
}

status=0
case "$WHICH" in
  all) asan || status=1; tsan || status=1 ;;
  asan) asan || status=1 ;;
  tsan) tsan || status=1 ;;
  *) echo "usage: scripts/sanitize.sh [asan|tsan]" >&2; exit 2 ;;
esac
if [ $status -ne 0 ]; then say "FAILED"; else say "all passed"; fi
exit $status
