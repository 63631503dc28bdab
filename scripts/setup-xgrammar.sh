#!/usr/bin/env bash
# Builds xgrammar's C++ core (the grammar engine vLLM, SGLang and
# TensorRT-LLM use for structured output; Apache-2.0) from its PyPI source
# distribution and installs the static library and headers into a cache
# folder, where CMake finds it (engine/grammar). No Python bindings, no LTO.
# Idempotent: skips when the pinned version is installed.
#
#   scripts/setup-xgrammar.sh
#
# Environment: PDSERVE_CACHE (default ~/.cache/pdserve); installs into
# $PDSERVE_CACHE/xgrammar-$VERSION. Needs pip (PyPI), cmake and a C++17
# compiler.
set -euo pipefail
VERSION=0.2.8
SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
CACHE="${PDSERVE_CACHE:-$HOME/.cache/pdserve}"
PREFIX="$CACHE/xgrammar-$VERSION"
say() { printf '[setup-xgrammar] %s\n' "$*"; }

if [ -s "$PREFIX/lib/libxgrammar.a" ] && [ -s "$PREFIX/include/xgrammar/xgrammar.h" ]; then
  say "xgrammar $VERSION present in $PREFIX"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
PIP=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then PIP=(/usr/bin/python3 -m pip); fi
say "fetching the xgrammar $VERSION source distribution from PyPI"
# --no-binary for xgrammar alone: its build tools may come as wheels.
"${PIP[@]}" download --no-deps --quiet --disable-pip-version-check \
  --no-binary xgrammar -d "$tmp" "xgrammar==$VERSION"
sdist="$tmp/xgrammar-$VERSION.tar.gz"
echo "$SHA256  $sdist" | sha256sum -c --quiet -
tar -xzf "$sdist" -C "$tmp"
src="$tmp/xgrammar-$VERSION"
mkdir -p "$tmp/build"
# The build folder's config.cmake is read first and turns the bindings off.
printf 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n' \
  >"$tmp/build/config.cmake"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
command -v ninja >/dev/null 2>&1 && launcher+=(-G Ninja)
say "building xgrammar $VERSION (static, no Python bindings)"
cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-O2 -fno-lto -Wno-error" -DCMAKE_INSTALL_PREFIX="$PREFIX.part" \
  "${launcher[@]}" >/dev/null
cmake --build "$tmp/build" -j "${PDSERVE_JOBS:-$(nproc)}" >/dev/null
rm -rf "$PREFIX.part"
cmake --install "$tmp/build" >/dev/null
mkdir -p "$PREFIX.part/share"
cp "$src/LICENSE" "$PREFIX.part/share/LICENSE"
rm -rf "$PREFIX"
mv "$PREFIX.part" "$PREFIX"
say "xgrammar $VERSION installed in $PREFIX"
