#!/usr/bin/env bash
# mimo and llama.cpp on the same weights, interleaved in one run (docs/PERFORMANCE.md): for each
# round, `mimo bench model` on every mimo checkpoint given, then `llama-bench` on every GGUF, and
# one line each: decode (and prompt) tok/s, bytes read per token, the roofline fraction. Print
# the load average with every round: llama.cpp's OpenMP threads collapse on a loaded machine.
#
#   bash scripts/bench/vs_llamacpp.sh [-r ROUNDS] [-p PROMPT] [-n GEN] [-t THREADS] \
#        --mimo DIR [--mimo-bf16 DIR] [--mimo-flags 'DIR|FLAGS'] ... --gguf FILE [--ik FILE] ...
# (--mimo-bf16: the same checkpoint with --precision bf16, the opt-in bf16 mode: decode too since
# issue 31's second part; measurements before it rounded prompts only. --mimo-flags: any
# `bench model` flags, e.g. 'DIR|--experts int8 --dense int8 --lm-head int8 --precision int8'.
# --ik: a GGUF for ik_llama.cpp's llama-bench (../shared/anchors/ik_llamacpp.sh builds it and
# writes the NAME-nomtp.gguf it can load), run with -rtr 1 -fa 1 as its docs advise.)
#
# Example (the bench-flash shape; issue 28's speed table):
#   python3 scripts/make_tiny_model.py --out /tmp/bench-flash-fp8 --variant bench-flash-fp8
#   build/bin/mimo quantize --model /tmp/bench-flash-fp8 --out /tmp/bench-flash-mxfp4
#   /usr/bin/python3 scripts/make_tiny_model.py --out /tmp/bench-flash-bf16 --variant bench-flash-bf16
#   bash ../shared/anchors/llamacpp.sh /tmp/bench-flash-bf16      # GGUF BF16 + Q8_0 in /tmp/anchors
#   (a CPU without AVX-512: bash scripts/bench/llamacpp_native.sh /tmp/bench-flash-bf16 instead)
#   L=/tmp/anchors/llama.cpp/build/bin; A=/tmp/anchors
#   $L/llama-quantize $A/bench-flash-bf16-bf16.gguf $A/bench-flash-bf16-q4_0.gguf Q4_0 2
#   bash scripts/bench/vs_llamacpp.sh -p 16 -n 64 --mimo /tmp/bench-flash-fp8 --mimo /tmp/bench-flash-mxfp4 \
#        --gguf $A/bench-flash-bf16-q8_0.gguf --gguf $A/bench-flash-bf16-q4_0.gguf
# Env: MIMO (build/bin/mimo), LLAMA_BIN (${ANCHORS:-/tmp/anchors}/llama.cpp/build/bin), IK_BIN
# (${ANCHORS:-/tmp/anchors}/ik_llama.cpp/build/bin).
set -euo pipefail
cd "$(dirname "$0")/../.."
MIMO="${MIMO:-build/bin/mimo}"
LLAMA_BIN="${LLAMA_BIN:-${ANCHORS:-${TMPDIR:-/tmp}/anchors}/llama.cpp/build/bin}"
IK_BIN="${IK_BIN:-${ANCHORS:-${TMPDIR:-/tmp}/anchors}/ik_llama.cpp/build/bin}"
ROUNDS=2 PROMPT=512 GEN=64 THREADS=2
mimos=() ggufs=() iks=()
while [ $# -gt 0 ]; do
  case "$1" in
    -r) ROUNDS=$2; shift 2 ;;
    -p) PROMPT=$2; shift 2 ;;
    -n) GEN=$2; shift 2 ;;
    -t) THREADS=$2; shift 2 ;;
    --mimo) mimos+=("$2"); shift 2 ;;
    --mimo-bf16) mimos+=("$2|--precision bf16"); shift 2 ;;
    --mimo-flags) mimos+=("$2"); shift 2 ;;
    --gguf) ggufs+=("$2"); shift 2 ;;
    --ik) iks+=("$2"); shift 2 ;;
    *) sed -n '2,22p' "$0" >&2; exit 2 ;;
  esac
done
[ ${#mimos[@]} -gt 0 ] || [ ${#ggufs[@]} -gt 0 ] || [ ${#iks[@]} -gt 0 ] ||
  { sed -n '2,22p' "$0" >&2; exit 2; }
PY=/usr/bin/python3
# llama_bench BIN LABEL GGUF [EXTRA...]: one line for llama.cpp's or ik_llama.cpp's llama-bench.
llama_bench() {
  local bin=$1 label=$2 g=$3
  shift 3
  "$bin/llama-bench" -m "$g" -p "$PROMPT" -n "$GEN" -t "$THREADS" -fa 1 "$@" -r 2 -o json \
    2>/dev/null | G="$g" L="$label" "$PY" -c '
import json, os, sys
rows = json.load(sys.stdin)
pp = [r for r in rows if r["n_prompt"] > 0]
tg = [r for r in rows if r["n_gen"] > 0]
print("%-9s %-40s prompt %7.1f tok/s  decode %6.2f tok/s  (file %.1f MB)" % (
    os.environ["L"], os.path.basename(os.environ["G"]), pp[0]["avg_ts"] if pp else float("nan"),
    tg[0]["avg_ts"] if tg else float("nan"), rows[0]["model_size"] / 1e6))'
}
for round in $(seq 1 "$ROUNDS"); do
  echo "# round $round: load average $(cut -d' ' -f1-3 /proc/loadavg), $THREADS threads, prompt $PROMPT, decode $GEN"
  for m in "${mimos[@]}"; do
    extra=()
    case "$m" in *"|"*) read -r -a extra <<<"${m#*|}" ;; esac
    "$MIMO" bench model --model "${m%%|*}" --threads "$THREADS" --kv-cache-dtype bf16 \
      --prompt-len "$PROMPT" --gen-len "$GEN" "${extra[@]}" --json 2>/dev/null | M="$m" "$PY" -c '
import json, os, sys
j = json.load(sys.stdin)
d, _, f = os.environ["M"].partition("|")
print("mimo      %-40s prompt %7.1f tok/s  decode %6.2f tok/s  %7.1f MB/token  %5.2f GB/s of %5.2f probed (%.3f)" % (
    os.path.basename(d) + (" " + f if f else ""), j["prefill_tok_s"], j["decode_tok_s"],
    j["active_bytes_per_token"] / 1e6, j["achieved_gbps"], j["measured_read_gbps"], j["roofline_fraction"]))'
  done
  for g in "${ggufs[@]}"; do llama_bench "$LLAMA_BIN" "llama.cpp" "$g"; done
  for g in "${iks[@]}"; do llama_bench "$IK_BIN" "ik_llama" "$g" -rtr 1; done
done
