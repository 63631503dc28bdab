#!/usr/bin/env bash
# Builds the two CPU peers pdserve is compared against, natively, from the
# llama.cpp sources vendored in their PyPI sdists (never timed through Python):
#   llama.cpp    from llama-cpp-python==0.3.36     (vendor/llama.cpp)
#   ik_llama.cpp from ik-llama-cpp-python==0.1.5   (vendor/ik_llama.cpp)
# Targets: llama-bench, llama-batched-bench, llama-server. Release,
# GGML_NATIVE=ON (-march=native), static, no CURL/OpenSSL, no tests.
#
#   bench/peers/build_peers.sh [llamacpp|ik ...]     (default: both)
#
# Output, under $PDSERVE_CACHE (default ~/.cache/pdserve):
#   peers/<name>/bin/{llama-bench,llama-batched-bench,llama-server}
#   peers/<name>/peer.json   (name, package, version, commit, cmake flags, compiler, cpu)
#   peers/sdist/*.tar.gz, peers/<name>/src, peers/<name>/build
# Idempotent: a peer whose peer.json and binaries exist is skipped (delete
# peers/<name> to rebuild). Builds with `nice` and -j${PEER_JOBS:-2}; on this
# 2-core machine the two peers take tens of minutes together.
set -euo pipefail

CACHE="${PDSERVE_CACHE:-$HOME/.cache/pdserve}"
PEERS="$CACHE/peers"
JOBS="${PEER_JOBS:-2}"
TARGETS=(llama-bench llama-batched-bench llama-server)

log() { echo "[build_peers] $*" >&2; }

# name package version sdist-basename vendored-subdir
peer_spec() {
  case "$1" in
    llamacpp) echo "llamacpp llama-cpp-python 0.3.36 llama_cpp_python-0.3.36 vendor/llama.cpp" ;;
    ik) echo "ik ik-llama-cpp-python 0.1.5 ik_llama_cpp_python-0.1.5 vendor/ik_llama.cpp" ;;
    *) log "unknown peer '$1' (llamacpp|ik)"; exit 2 ;;
  esac
}

fetch_sdist() {  # package version basename
  local pkg=$1 ver=$2 base=$3
  mkdir -p "$PEERS/sdist"
  if [[ -f "$PEERS/sdist/$base.tar.gz" ]]; then
    log "sdist $base.tar.gz cached"
    return
  fi
  # --no-binary for this package only: its build dependencies come as
  # wheels (with :all: pip builds setuptools & co. from source first).
  log "pip download --no-deps --no-binary $pkg $pkg==$ver"
  python3 -m pip download --quiet --no-deps --no-binary "$pkg" "$pkg==$ver" \
    -d "$PEERS/sdist"
}

# ik's sdist lacks common/cmake/build-info-gen-cpp.cmake, the script behind
# the custom command that generates common/build-info.cpp. Writing
# build-info.cpp from its .in template is enough; a no-op stand-in for the
# script keeps Ninja (which runs a custom command it has no record of) happy.
write_build_info() {  # srcdir commit
  local src=$1 commit=$2 cc
  cc="$(${CC:-cc} --version | head -1)"
  if grep -q "build-info-gen-cpp.cmake" "$src/common/CMakeLists.txt" &&
     [[ ! -f "$src/common/cmake/build-info-gen-cpp.cmake" ]]; then
    log "writing $src/common/build-info.cpp from build-info.cpp.in"
    sed -e "s|@BUILD_NUMBER@|0|" -e "s|@BUILD_COMMIT@|$commit|" \
        -e "s|@BUILD_COMPILER@|$cc|" -e "s|@BUILD_TARGET@|$(${CC:-cc} -dumpmachine)|" \
        "$src/common/build-info.cpp.in" > "$src/common/build-info.cpp"
    mkdir -p "$src/common/cmake"
    echo "# Stand-in written by pdserve bench/peers/build_peers.sh: build-info.cpp is already written." \
      > "$src/common/cmake/build-info-gen-cpp.cmake"
  fi
}

peer_built() {  # dir
  [[ -f "$1/peer.json" ]] || return 1
  local t
  for t in "${TARGETS[@]}"; do [[ -x "$1/bin/$t" ]] || return 1; done
}

build_peer() {
  read -r name pkg ver base sub <<<"$(peer_spec "$1")"
  local dir="$PEERS/$name" src build
  src="$dir/src/$base/$sub"
  build="$dir/build"
  # One build per peer at a time (a second invocation waits, then finds it
  # built): two Ninjas in one build folder corrupt each other's outputs.
  mkdir -p "$PEERS"
  exec 9>"$PEERS/$name.lock"
  flock 9
  if peer_built "$dir"; then
    log "$name ($pkg $ver) already built: $dir/bin (delete $dir to rebuild)"
    return
  fi
  fetch_sdist "$pkg" "$ver" "$base"
  if [[ ! -d "$src" ]]; then
    log "unpacking $base.tar.gz into $dir/src"
    mkdir -p "$dir/src"
    tar -xzf "$PEERS/sdist/$base.tar.gz" -C "$dir/src"
  fi
  # llama-cpp-python's sdist carries the submodule's git data; ik's does not.
  local commit
  commit="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "unknown (sdist $pkg $ver)")"
  write_build_info "$src" "$commit"
  local flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=ON -DGGML_CUDA=OFF)
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  log "configuring $name: cmake ${flags[*]}"
  cmake -S "$src" -B "$build" "${flags[@]}" "${launcher[@]}" > "$dir/configure.log" 2>&1 ||
    { tail -30 "$dir/configure.log" >&2; exit 1; }
  log "building $name (${TARGETS[*]}) with nice -j$JOBS; log: $dir/build.log"
  local t0=$SECONDS
  nice -n 5 cmake --build "$build" -j "$JOBS" --target "${TARGETS[@]}" > "$dir/build.log" 2>&1 ||
    { tail -40 "$dir/build.log" >&2; exit 1; }
  mkdir -p "$dir/bin"
  for t in "${TARGETS[@]}"; do cp "$build/bin/$t" "$dir/bin/$t"; done
  local secs=$((SECONDS - t0))
  local version_line
  version_line="$("$dir/bin/llama-bench" --version 2>&1 | head -2 | tr '\n' ' ' || true)"
  python3 - "$dir/peer.json" <<EOF
import json, platform, subprocess, sys
model = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True,
         text=True).stdout.splitlines() if l.startswith("Model name")]
json.dump({
  "name": "$name", "package": "$pkg", "version": "$ver",
  "source": "PyPI sdist $base.tar.gz, $sub",
  "commit": "$commit",
  "llama_bench_version": """$version_line""".strip(),
  "cmake_flags": "${flags[*]}".split(),
  "targets": "${TARGETS[*]}".split(),
  "compiler": subprocess.run(["${CC:-cc}", "--version"], capture_output=True,
                             text=True).stdout.splitlines()[0],
  "built_on": {"cpu": model[0] if model else platform.processor(), "jobs": $JOBS},
  "build_seconds": $secs,
}, open(sys.argv[1], "w"), indent=2)
EOF
  log "$name built in ${secs}s: $dir/bin ($(cat "$dir/peer.json" | wc -c) bytes of peer.json)"
}

peers=("$@")
[[ ${#peers[@]} -gt 0 ]] || peers=(llamacpp ik)
for p in "${peers[@]}"; do build_peer "$p"; done
log "done: $PEERS"
