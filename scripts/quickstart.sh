#!/usr/bin/env bash
# The main job on a fresh machine: install, build, start the service on the
# default model (SmolLM2-135M-Instruct Q4_1) and stream a chat reply.
#   scripts/quickstart.sh ["your message"]
# Leaves nothing running: the service is stopped (SIGTERM, drained) at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${PDSERVE_BUILD_DIR:-build}"
MESSAGE="${1:-Write a short poem about the sea.}"
MODEL="${PDSERVE_CACHE:-$HOME/.cache/pdserve}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PORT="${PDSERVE_PORT:-50051}"

scripts/setup.sh
echo "[quickstart] building"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target pdserve >/dev/null
PDSERVE="$BUILD/server/cli/pdserve"

echo "[quickstart] starting: pdserve serve --model $MODEL --port $PORT"
LOG="$(mktemp)"
"$PDSERVE" serve --model "$MODEL" --port "$PORT" > >(tee "$LOG") &
SERVE_PID=$!
trap 'kill -TERM $SERVE_PID 2>/dev/null; wait $SERVE_PID 2>/dev/null || true; rm -f "$LOG"' EXIT

# serve prints "pdserve serve: ready" once the model is loaded and every
# process answers its health check.
for _ in $(seq 1 240); do
  if grep -q "pdserve serve: ready" "$LOG"; then break; fi
  if ! kill -0 $SERVE_PID 2>/dev/null; then echo "[quickstart] serve exited" >&2; exit 1; fi
  sleep 0.5
done
grep -q "pdserve serve: ready" "$LOG" || { echo "[quickstart] serve not ready after 120 s" >&2; exit 1; }
echo "[quickstart] you: $MESSAGE"
printf '[quickstart] assistant: '
"$PDSERVE" chat --target "127.0.0.1:$PORT" --max-tokens 128 --temperature 0 "$MESSAGE"
echo
