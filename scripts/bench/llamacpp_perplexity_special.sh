#!/usr/bin/env bash
# llama-perplexity that parses special tokens in its text (stock llama-perplexity tokenizes with
# parse_special = false, so "<|im_start|>" becomes plain-text tokens while its added tokens such
# as <think> still match: neither is the token stream `mimo bench quality --text F --parse-special`
# scores). Built beside llama.cpp from its own perplexity.cpp with that one argument changed,
# linked against the libraries ../shared/anchors/llamacpp.sh built (build llama-perplexity there
# first: cmake --build $L/build --target llama-perplexity).
#
#   bash scripts/bench/llamacpp_perplexity_special.sh   # -> $A/ppl-special/llama-perplexity-special
set -euo pipefail
A="${ANCHORS:-${TMPDIR:-/tmp}/anchors}"
L="${LLAMA_DIR:-$A/llama.cpp}"
B="$L/build"
O="$A/ppl-special"
[ -f "$B/tools/perplexity/CMakeFiles/llama-perplexity.dir/main.cpp.o" ] ||
  nice -n 19 cmake --build "$B" --target llama-perplexity -j"${JOBS:-2}" >/dev/null
mkdir -p "$O"
sed 's/common_tokenize(ctx, params.prompt, true)/common_tokenize(ctx, params.prompt, true, \/*parse_special=*\/ true)/' \
  "$L/tools/perplexity/perplexity.cpp" >"$O/perplexity.cpp"
grep -q 'parse_special=\*/ true' "$O/perplexity.cpp" || { echo "perplexity.cpp changed upstream" >&2; exit 1; }
c++ -O3 -DNDEBUG -DGGML_USE_CPU -DLLAMA_SUBPROCESS -I"$L/tools/perplexity" -I"$L/common" \
  -I"$L/vendor" -I"$L/include" -I"$L/ggml/include" -c "$O/perplexity.cpp" -o "$O/perplexity.o"
c++ -O3 "$B/tools/perplexity/CMakeFiles/llama-perplexity.dir/main.cpp.o" "$O/perplexity.o" \
  -o "$O/llama-perplexity-special" "$B/common/libllama-common.a" "$B/common/libllama-common-base.a" \
  "$B/vendor/cpp-httplib/libcpp-httplib.a" "$B/src/libllama.a" "$B/ggml/src/libggml.a" -ldl \
  "$B/ggml/src/libggml-cpu.a" "$B/ggml/src/libggml-base.a" -lm \
  "$(c++ -print-file-name=libgomp.so)" -lpthread
echo "$O/llama-perplexity-special"
