#!/usr/bin/env bash
# The README's main job, through the server: starts `mimo serve` on the embedded default model
# (models/mimo-v2-nano, unpacked by scripts/setup.sh), waits for GET /health 200, runs the demo
# conversation with the official `openai` npm client (scripts/demo/chat_client.mjs: a fact,
# arithmetic, a thinking-mode turn, a tool-call round trip whose tool scripts/demo/tools.py runs on
# the client side), then stops the server with SIGTERM (it drains and exits 0).
set -euo pipefail
cd "$(dirname "$0")/.."
MIMO_BUILD_TARGETS=mimo bash scripts/build.sh >/dev/null
MIMO=${MIMO_BIN:-build/bin/mimo}
MODEL=${MIMO_MODEL:-models/mimo-v2-nano}
LOG=$(mktemp /tmp/mimo-serve-XXXXXX.log)
# The nano model is a toy (models-src/mimo-v2-nano/README.md): it knows a fictional fact table,
# column arithmetic on 0..40 and four tools; it copies unseen names imperfectly, cannot look a
# name up in facts given in the prompt, and spells only some words of its list.
"$MIMO" serve --model "$MODEL" --port "${MIMO_PORT:-0}" --threads 2 2>"$LOG" &
SERVER=$!
stop_server() {
  if kill -0 "$SERVER" 2>/dev/null; then
    kill -TERM "$SERVER"
    wait "$SERVER" || true
  fi
}
trap 'stop_server; rm -f "$LOG"' EXIT
URL=""
for _ in $(seq 1 1200); do  # up to 120 s: listening at once, /health 200 once loaded
  kill -0 "$SERVER" 2>/dev/null || { cat "$LOG" >&2; echo "mimo serve exited" >&2; exit 1; }
  [ -z "$URL" ] && URL=$(sed -n 's/.*listening on \(http:\/\/[0-9.]*:[0-9]*\).*/\1/p' "$LOG" | head -n1)
  if [ -n "$URL" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ]; then break; fi
  sleep 0.1
done
[ -n "$URL" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] ||
  { cat "$LOG" >&2; echo "mimo serve did not become ready" >&2; exit 1; }
echo "mimo serve is up at $URL (model $MODEL); the conversation goes through its OpenAI API:"
node scripts/demo/chat_client.mjs --base-url "$URL/v1"
stop_server
echo
echo "(server stopped: $(tail -n1 "$LOG"))"
