#!/usr/bin/env bash
# ../shared/anchors/llamacpp.sh for hosts without AVX-512 (e.g. AMD EPYC Zen 3): that script builds
# llama.cpp with the AVX-512 family forced on (GGML_NATIVE=OFF, GGML_AVX512*=ON), so llama-bench
# dies with SIGILL on an AVX2-only CPU. This runs the same script with those flags replaced by
# GGML_NATIVE=ON (what a user on that host would build); everything else (source, converter shim,
# GGUF BF16 + Q8_0 next to it in $ANCHORS) is unchanged.
#
#   bash scripts/bench/llamacpp_native.sh [BF16_CHECKPOINT_DIR]
#
# A build made by the other script is reused as is: delete ${ANCHORS:-/tmp/anchors}/llama.cpp/build first.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)/../shared/anchors/llamacpp.sh"
[ -f "$SRC" ] || { echo "no $SRC" >&2; exit 1; }
TMP="$(mktemp "${TMPDIR:-/tmp}/llamacpp_native.XXXXXX.sh")"
trap 'rm -f "$TMP"' EXIT
sed -e 's/-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON/-DGGML_NATIVE=ON/' \
    -e '/-DGGML_AVX_VNNI=ON -DGGML_AVX512=ON/d' \
    -e 's/    -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF/    -DGGML_AMX_TILE=OFF/' "$SRC" >"$TMP"
if grep -q "AVX512" "$TMP" || ! grep -q "GGML_NATIVE=ON" "$TMP"; then
  echo "llamacpp_native.sh: $SRC changed; its cmake flags were not rewritten (edit this script)" >&2
  exit 1
fi
bash "$TMP" "$@"
