#!/usr/bin/env bash
# Installs the offline validators the deploy/ tests use into a private venv
# (nothing system-wide): kubernetes-validate (Kubernetes API JSON schemas,
# shipped in the package, used with --strict) and dockerfile (BuildKit's
# Dockerfile parser). Idempotent; about 150 MB.
#
#   deploy/tools/setup-validators.sh
#
# Environment: PDSERVE_CACHE (default ~/.cache/pdserve); the venv goes to
# $PDSERVE_CACHE/deploy-tools-venv. Needs python3 with the venv module
# (Debian: python3-venv) and PyPI.
set -euo pipefail
CACHE="${PDSERVE_CACHE:-$HOME/.cache/pdserve}"
VENV="$CACHE/deploy-tools-venv"
PY=python3
# Debian's interpreter when present: stable across pyenv shims.
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
say() { printf '[setup-validators] %s\n' "$*"; }

if "$VENV/bin/python" -c 'import kubernetes_validate, dockerfile, yaml' 2>/dev/null; then
  say "validators present in $VENV"
  exit 0
fi
mkdir -p "$CACHE"
if ! "$PY" -m venv "$VENV" 2>/dev/null; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    say "installing python3-venv"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
  else
    echo "setup-validators.sh: '$PY -m venv' failed; install python3-venv" >&2
    exit 1
  fi
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  'kubernetes-validate==1.37.0' 'dockerfile==3.4.0' 'pyyaml>=6'
say "validators installed in $VENV"
