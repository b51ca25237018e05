#!/usr/bin/env bash
# GGUF files of a MiMo-V2 checkpoint for llama.cpp baselines, with the checkpoint's REAL vocab.
#
#   bash scripts/bench/llamacpp_gguf.sh MODEL_DIR OUT_PREFIX
#
# MODEL_DIR: BF16/F32 safetensors + config.json + tokenizer.json (HF MiMo-V2 layout).
# Writes (each skipped when it exists):
#   OUT_PREFIX-bf16.gguf            convert_hf_to_gguf.py through scripts/bench/gguf_real_vocab.py
#   OUT_PREFIX-q8_0.gguf            llama-quantize Q8_0
#   OUT_PREFIX-q4_0.gguf            llama-quantize Q4_0
#   OUT_PREFIX-q4_k_m.gguf          llama-quantize Q4_K_M
#   OUT_PREFIX-bf16-exps-q4_0.gguf  BF16 everywhere except the routed experts
#                                   (ffn_{gate,up,down}_exps) in Q4_0 (--tensor-type overrides)
# Needs llama.cpp built by ../shared/anchors/llamacpp.sh (source + build/bin).
# Env: LLAMA_DIR (default ${ANCHORS:-${TMPDIR:-/tmp}/anchors}/llama.cpp), PY (python3 with
# torch+numpy; default /usr/bin/python3), JOBS (threads for llama-quantize, 2), NICE (19).
# Logs go to OUT_PREFIX-*.log.
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL="$(cd "$1" && pwd)"
OUT="$2"
A="${ANCHORS:-${TMPDIR:-/tmp}/anchors}"
L="${LLAMA_DIR:-$A/llama.cpp}"
BIN="$L/build/bin"
PY="${PY:-/usr/bin/python3}"
JOBS="${JOBS:-2}"
NICE="nice -n ${NICE:-19}"
log() { echo "[llamacpp_gguf] $*" >&2; }

[ -f "$L/convert_hf_to_gguf.py" ] || { echo "no llama.cpp source at $L (run ../shared/anchors/llamacpp.sh)" >&2; exit 1; }
[ -x "$BIN/llama-quantize" ] || { echo "no $BIN/llama-quantize (run ../shared/anchors/llamacpp.sh)" >&2; exit 1; }
[ -f "$MODEL/tokenizer.json" ] || { echo "$MODEL has no tokenizer.json (use ../shared/anchors/llamacpp.sh's synthetic vocab)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"

G16="$OUT-bf16.gguf"
if [ ! -f "$G16" ]; then
  log "converting $MODEL -> $G16"
  $NICE "$PY" "$HERE/gguf_real_vocab.py" "$L" "$MODEL" --outtype bf16 --outfile "$G16.tmp" \
    >"$OUT-convert.log" 2>&1 || { echo "conversion failed, see $OUT-convert.log" >&2; exit 1; }
  mv "$G16.tmp" "$G16"
fi

quant() {  # quant SUFFIX TYPE [extra llama-quantize args...]
  local suf="$1" type="$2"; shift 2
  local dst="$OUT-$suf.gguf"
  if [ -f "$dst" ]; then log "exists: $dst"; return; fi
  log "quantizing -> $dst ($type $*)"
  $NICE "$BIN/llama-quantize" "$@" "$G16" "$dst.tmp" "$type" "$JOBS" >"$OUT-quantize-$suf.log" 2>&1 ||
    { echo "quantize failed, see $OUT-quantize-$suf.log" >&2; exit 1; }
  mv "$dst.tmp" "$dst"
}
quant q8_0 Q8_0
quant q4_0 Q4_0
quant q4_k_m Q4_K_M
# Experts-only Q4_0. --tensor-type NAME=TYPE is a regex searched in the tensor names
# (blk.N.ffn_up_exps.weight), first match wins, but llama-quantize applies the overrides only
# when the base type is a quantized one (base BF16/COPY ignores them). So: base Q4_0, routed
# experts -> q4_0, every other quantizable tensor (attention, dense/shared FFN, token_embd,
# output) -> bf16; norms, sinks and the router (ffn_gate_inp) are never quantized (kept as
# converted).
quant bf16-exps-q4_0 Q4_0 --tensor-type 'ffn_(gate|up|down)_exps=q4_0' --tensor-type '.=bf16'

for s in bf16 q8_0 q4_0 q4_k_m bf16-exps-q4_0; do
  printf '%s\t%s\n' "$(stat -c %s "$OUT-$s.gguf")" "$OUT-$s.gguf"
done
