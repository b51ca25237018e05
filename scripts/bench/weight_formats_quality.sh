#!/usr/bin/env bash
# Quality of the weight formats a user can choose at load (issue 48, item 1b), as
# `mimo bench quality` against the BF16 default model: for each (model, flags) pair, the mean KL
# divergence, its p99 and top-1 agreement over the held-out answers (--dataset) and over the whole
# text llama-perplexity scores (--text, chunks of 512, the second half of each scored; the protocol
# of docs/PERFORMANCE.md "Quality", where llama.cpp's Q8_0 / Q4_0 of the same model were measured).
#
#   scripts/bench/weight_formats_quality.sh [THREADS]
#
# Prints one TSV line per (configuration, protocol). MIMO_BIN overrides build/bin/mimo; RUNS
# ("MODEL|flags" items, ';'-separated, "-" for no flags) overrides the list.
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS=${1:-2}
BIN=${MIMO_BIN:-build/bin/mimo}
REF=models/mimo-v2-nano
FP8=models/mimo-v2-nano-fp8
RUNS=${RUNS:-"$FP8|-;$FP8|--dense fp8 --lm-head fp8;$REF|--experts fp8 --dense fp8 --lm-head fp8;$REF|--experts mxfp4;$FP8|--experts mxfp4;$FP8|--experts mxfp4 --dense fp8 --lm-head fp8;$FP8|--experts mxfp4 --dense mxfp4 --lm-head fp8;$FP8|--experts mxfp4 --dense mxfp4 --lm-head mxfp4;$REF|--experts int8 --dense int8 --lm-head int8;$REF|--experts int8 --dense int8 --lm-head int8 --precision int8;$FP8|--experts int8 --dense int8 --lm-head int8 --precision int8;$FP8|--experts int8 --precision int8"}
IFS=';' read -r -a runs <<<"$RUNS"
printf 'model\tflags\tprotocol\tmean_kld\tse\tp99\tsame_top1\n'
for item in "${runs[@]}"; do
  model=${item%%|*}
  c=${item#*|}
  flags=()
  [[ $c == "-" ]] || read -r -a flags <<<"$c"
  for proto in answers text; do
    if [[ $proto == answers ]]; then
      src=(--dataset scripts/demo/nano_quality.jsonl)
    else
      src=(--text scripts/demo/nano_quality.txt --ctx 512 --parse-special)
    fi
    out=$("$BIN" bench quality --model "$model" --reference "$REF" "${src[@]}" --threads "$THREADS" \
      "${flags[@]}" 2>/dev/null)
    kld=$(awk '/^mean KLD/ {print $3 "\t" $5}' <<<"$out")
    p99=$(awk '/^KLD median/ {gsub(",", "", $5); print $5}' <<<"$out")
    top=$(awk '/^same top-1/ {print $3}' <<<"$out")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(basename "$model")" "$([[ $c == - ]] && echo "as stored" || echo "$c")" "$proto" "$kld" \
      "$p99" "$top"
  done
done
