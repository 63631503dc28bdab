#!/usr/bin/env bash
# Builds pdserve and runs every test (ctest; gpu-labelled tests skip without a
# device). Installs the build dependencies and the default model first.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${PDSERVE_BUILD_DIR:-build}"
JOBS="${PDSERVE_JOBS:-$(nproc)}"
scripts/setup.sh
echo "[test] configuring $BUILD"
# The CUDA plugin is built (ON, not AUTO: nvcc is on this machine kind), so a
# kernel that does not compile for sm_90 or fails the CPU emulator (emu_*
# tests) fails CI. PDSERVE_CUDA=AUTO|OFF for a machine without nvcc.
# Unity batches (CMAKE_UNITY_BUILD) build cold in about half the time on
# 2 cores; PDSERVE_UNITY=OFF builds file by file.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DPDSERVE_CUDA="${PDSERVE_CUDA:-ON}" \
  -DCMAKE_UNITY_BUILD="${PDSERVE_UNITY:-ON}" >/dev/null
echo "[test] building with $JOBS jobs"
cmake --build "$BUILD" -j "$JOBS"
echo "[test] running tests"
# Parallel: unit tests share the cores; integration tests (which start the
# real processes) hold the pdserve_processes lock, one at a time.
ctest --test-dir "$BUILD" --output-on-failure --timeout 600 \
  -j "${PDSERVE_TEST_JOBS:-$JOBS}" "$@"
# Sanitizers and fuzzing (clang ASan+UBSan, libFuzzer, TSan; unity builds at
# -O1): about 8 minutes cold on 2 cores. Part of the whole run (CI); skipped
# when ctest arguments pick a subset, or with PDSERVE_SANITIZE_STAGE=0. The
# ordinary build replays every fuzz corpus under ctest either way.
if [ "${PDSERVE_SANITIZE_STAGE:-1}" = "1" ] && [ $# -eq 0 ]; then
  echo "[test] sanitizer and fuzzing stage"
  scripts/sanitize.sh
fi
