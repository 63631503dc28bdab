#!/usr/bin/env bash
# Installs the Python clients the HTTP API integration tests drive pdserve
# with into a private venv (nothing system-wide): the official `openai` and
# `anthropic` SDKs from PyPI, and jsonschema (the structured-output tests validate with it). Idempotent. The venv sees the system site
# packages, so Debian's python3-grpcio / python3-grpc-tools serve the tests'
# gRPC side.
#
#   scripts/setup-test-venv.sh
#
# Environment: PDSERVE_CACHE (default ~/.cache/pdserve); the venv goes to
# $PDSERVE_CACHE/test-venv. Needs python3 with the venv module (Debian:
# python3-venv) and PyPI. The tests skip (saying why) without it.
set -euo pipefail
CACHE="${PDSERVE_CACHE:-$HOME/.cache/pdserve}"
VENV="$CACHE/test-venv"
PY=python3
# Debian's interpreter when present: stable across pyenv shims.
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
say() { printf '[setup-test-venv] %s\n' "$*"; }

if "$VENV/bin/python" -c 'import openai, anthropic, grpc, grpc_tools, jsonschema' 2>/dev/null; then
  say "openai and anthropic SDKs present in $VENV"
  exit 0
fi
mkdir -p "$CACHE"
rm -rf "$VENV"
if ! "$PY" -m venv --system-site-packages "$VENV" 2>/dev/null; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    say "installing python3-venv"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    rm -rf "$VENV"
    "$PY" -m venv --system-site-packages "$VENV"
  else
    echo "setup-test-venv.sh: '$PY -m venv' failed; install python3-venv" >&2
    exit 1
  fi
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  'openai>=1.40,<3' 'anthropic>=0.40,<3' 'jsonschema>=4.17,<5'
say "openai and anthropic SDKs installed in $VENV"
