#!/usr/bin/env bash
# Same-run speed of the weight formats a user can choose at load (issue 48, item 1b): the model as
# stored, and with --lm-head / --dense / --experts quantized to fp8 or mxfp4, each in the exact and
# the bf16 precision modes. Interleaved: every configuration once per round, ROUNDS rounds.
#
#   scripts/bench/weight_formats.sh [MODEL] [ROUNDS] [PROMPT_LEN] [GEN_LEN]
#   (defaults: /tmp/bench-flash-fp8, 2, 512, 64; make it with
#    /usr/bin/python3 scripts/make_tiny_model.py --out /tmp/bench-flash-fp8 --variant bench-flash-fp8)
#
# Prints one TSV line per run: round, configuration, precision, prompt tok/s, decode tok/s, MB read
# per token, GB/s of weights streamed (decode tok/s x weight bytes per token), the same run's read
# probe, and its roofline fraction. MIMO_BIN overrides build/bin/mimo; CONFIGS (';'-separated flag
# sets, "-" for none) and PRECISIONS ("exact bf16") override the lists.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-/tmp/bench-flash-fp8}
ROUNDS=${2:-2}
PROMPT=${3:-512}
GEN=${4:-64}
BIN=${MIMO_BIN:-build/bin/mimo}
CONFIGS=${CONFIGS:-"-;--lm-head fp8;--dense fp8 --lm-head fp8;--experts mxfp4;--experts mxfp4 --dense fp8 --lm-head fp8;--experts mxfp4 --dense mxfp4 --lm-head fp8;--experts mxfp4 --dense mxfp4 --lm-head mxfp4"}
PRECISIONS=${PRECISIONS:-"exact bf16"}
[[ -d $MODEL ]] || { echo "weight_formats.sh: no model at $MODEL" >&2; exit 2; }
IFS=';' read -r -a configs <<<"$CONFIGS"
printf 'round\tconfig\tprecision\tprompt_tok_s\tdecode_tok_s\tMB_per_token\tweights_GB_s\tprobe_GB_s\troofline\n'
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${configs[@]}"; do
    flags=()
    [[ $c == "-" ]] || read -r -a flags <<<"$c"
    for p in $PRECISIONS; do
      j=$("$BIN" bench model --model "$MODEL" --prompt-len "$PROMPT" --gen-len "$GEN" --threads 2 \
        --probe-mib 512 --precision "$p" --json "${flags[@]}" 2>/dev/null)
      /usr/bin/python3 -c '
import json, sys
j = json.loads(sys.argv[1])
print("\t".join([sys.argv[2], sys.argv[3] if sys.argv[3] != "-" else "as stored", j["precision"],
                 "%.1f" % j["prefill_tok_s"], "%.2f" % j["decode_tok_s"],
                 "%.1f" % (j["active_bytes_per_token"] / 1e6),
                 "%.2f" % (j["decode_tok_s"] * j["weight_bytes_per_token"] / 1e9),
                 "%.2f" % j["measured_read_gbps"], "%.3f" % j["roofline_fraction"]]))
' "$j" "$r" "$c"
    done
  done
done
