#!/usr/bin/env bash
# Runs tests/deploy/check_deploy.py CHECK with a Python that has PyYAML: the
# deploy-tools venv (deploy/tools/setup-validators.sh), else Debian's python3
# (python3-yaml comes with yamllint), else python3 on PATH. Exit 77 = skipped.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${PDSERVE_CACHE:-$HOME/.cache/pdserve}"
for py in "$cache/deploy-tools-venv/bin/python" /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import yaml' 2>/dev/null; then
    exec "$py" "$here/check_deploy.py" "$@"
  fi
done
echo "SKIPPED: no python3 with PyYAML (Debian package python3-yaml)"
exit 77
