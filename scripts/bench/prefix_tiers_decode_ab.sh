#!/bin/bash
# Decode with the tiers writing behind vs off: same server flags otherwise, interleaved.
cd "$(dirname "$0")/../.."
PORT=8395
run() {
  rm -rf /tmp/decode-ab-cache
  build/bin/mimo serve --model models/mimo-v2-nano --port $PORT --threads 2 --no-webui $1 >/tmp/decode-ab.log 2>&1 &
  P=$!
  for i in $(seq 120); do curl -sf http://127.0.0.1:$PORT/health >/dev/null && break; sleep 0.5; done
  build/bin/mimo bench serve --base-url http://127.0.0.1:$PORT --model mimo-v2-nano --endpoint completions \
    --num-prompts 6 --input-len 64 --output-len 512 --max-concurrency 1 --ignore-eos --seed 1 2>&1 | grep -E "Output token throughput|Mean TPOT"
  curl -s http://127.0.0.1:$PORT/metrics | grep -E 'tier_stores_total|tier_dropped' | grep disk
  kill $P; wait $P 2>/dev/null
}
for r in 1 2; do
  echo "== tiers on (RAM default + disk)"; run "--prefix-cache-dir /tmp/decode-ab-cache"
  echo "== tiers off"; run "--prefix-cache-ram 0"
done
