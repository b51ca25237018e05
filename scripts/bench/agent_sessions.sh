#!/bin/bash
# Replays the recorded agents' multi-turn sessions (tests/data/agents/sessions, built by
# agent_sessions.py) through `mimo serve` three times: a fresh server (cold), the same server again
# (its KV pool and RAM tier), and a restarted server on the same --prefix-cache-dir (the disk tier).
# Prints `mimo bench serve --sessions` tables (TTFT per turn; prompt tokens reused in all, from
# RAM, from disk) and writes them as JSON under OUT.
#
# With LLAMA_SERVER (a llama-server binary, ../shared/anchors/llamacpp.sh builds it) and GGUF (the
# same model, scripts/bench/gguf_real_vocab.py), the same sessions then go through llama-server
# in the same run, with its defaults (--cache-ram, --ctx-checkpoints): cold, warm, restarted.
#
# Usage: scripts/bench/agent_sessions.sh [MODEL_DIR] [OUT]
#   env: THREADS (2), PORT, SERVE_FLAGS, SESSIONS (comma list), LLAMA_SERVER, GGUF, LLAMA_FLAGS
#   (default: the GGUF's training context raised to 32768, which llama-server caps a slot at)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-models/mimo-v2-nano}
OUT=${2:-/tmp/mimo-agent-sessions}
PORT=${PORT:-8391}
MIMO=${MIMO:-build/bin/mimo}
SESSIONS=${SESSIONS:-tests/data/agents/sessions/claude-code.json,tests/data/agents/sessions/codex.json,tests/data/agents/sessions/opencode.json}
THREADS=${THREADS:-2}
mkdir -p "$OUT"
CACHE="$OUT/prefix-cache"
rm -rf "$CACHE"
NAME=$(basename "$MODEL")

serve() {
  "$MIMO" serve --model "$MODEL" --served-model-name "$NAME" --port "$PORT" \
    --max-model-len 32768 --prefix-cache-dir "$CACHE" --threads "$THREADS" \
    ${SERVE_FLAGS:-} >"$OUT/serve-$1.log" 2>&1 &
  PID=$!
  wait_up "$OUT/serve-$1.log"
}
# Until /health answers 200 (llama-server: once the model is loaded).
wait_up() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    kill -0 $PID 2>/dev/null || { cat "$1"; exit 1; }
    sleep 0.5
  done
  echo "the server did not come up: $1" >&2; exit 1
}
stop() { kill -TERM $PID; wait $PID || true; }
bench() {
  echo "== $1"
  "$MIMO" bench serve --base-url "http://127.0.0.1:$PORT" --model "$NAME" --sessions "$SESSIONS" \
    --label "$1" --result-json "$OUT/$1.json"
}
llama() {
  "$LLAMA_SERVER" -m "$GGUF" --port "$PORT" -c 32768 -t "$THREADS" --jinja -np 1 \
    ${LLAMA_FLAGS:---override-kv mimo2.context_length=int:32768} \
    >"$OUT/llama-$1.log" 2>&1 &
  PID=$!
  wait_up "$OUT/llama-$1.log"
}

serve first
bench cold
bench warm
stop
serve restarted
bench restart
stop
du -sh "$CACHE"
if [ -n "${LLAMA_SERVER:-}" ]; then
  llama first
  bench llama-cold
  bench llama-warm
  stop
  llama restarted
  bench llama-restart
  stop
fi
