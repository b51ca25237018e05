#!/bin/bash
# The RAM tier's bound, measured as the server's memory: replays the recorded agents' sessions
# (tests/data/agents/sessions) cold through `mimo serve` with --prefix-cache-ram 0 and with each
# SIZE given, and prints per run the tier's bytes and evictions (/metrics) and the process's peak
# and final resident memory (VmHWM, VmRSS from /proc). What the tier adds is the RSS difference
# against the run without it; it should stay within SIZE (plus the allocator's slack).
#
# Usage: scripts/bench/prefix_tiers_rss.sh [MODEL_DIR] [SIZE...]   (default sizes: 64M 256M)
#   env: THREADS (2), PORT, SESSIONS (comma list), MIMO (build/bin/mimo)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-models/mimo-v2-nano}
shift || true
SIZES=(0 "$@")
[ $# -gt 0 ] || SIZES=(0 64M 256M)
PORT=${PORT:-8393}
MIMO=${MIMO:-build/bin/mimo}
THREADS=${THREADS:-2}
SESSIONS=${SESSIONS:-tests/data/agents/sessions/claude-code.json,tests/data/agents/sessions/codex.json,tests/data/agents/sessions/opencode.json}
NAME=$(basename "$MODEL")
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

kib() { awk -v k="$1" '$1 == k":" { print $2 }' "/proc/$PID/status"; }
metric() {
  curl -s "http://127.0.0.1:$PORT/metrics" |
    awk -v n="mimo:prefix_cache_tier_$1{model_name=\"$NAME\",tier=\"ram\"}" '$1 == n { print $2 }'
}

printf '%-10s %14s %10s %12s %12s\n' ram tier_MiB evictions VmHWM_MiB VmRSS_MiB
for size in "${SIZES[@]}"; do
  "$MIMO" serve --model "$MODEL" --served-model-name "$NAME" --port "$PORT" --threads "$THREADS" \
    --max-model-len 32768 --prefix-cache-ram "$size" >"$LOG" 2>&1 &
  PID=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.5
  done
  "$MIMO" bench serve --base-url "http://127.0.0.1:$PORT" --model "$NAME" --sessions "$SESSIONS" \
    --label "ram-$size" >/dev/null
  bytes=$(metric bytes); bytes=${bytes:-0}
  ev=$(metric evictions_total); ev=${ev:-0}
  awk -v s="$size" -v b="$bytes" -v e="$ev" -v h="$(kib VmHWM)" -v r="$(kib VmRSS)" \
    'BEGIN { printf "%-10s %14.1f %10d %12.1f %12.1f\n", s, b / 1048576, e, h / 1024, r / 1024 }'
  kill -TERM $PID
  wait $PID || true
done
