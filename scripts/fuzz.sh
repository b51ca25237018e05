#!/usr/bin/env bash
# Builds the libFuzzer harnesses in tests/fuzz/*_fuzz.cc with clang + ASan/UBSan into build-fuzz/
# and runs each one for a bounded time from its seed corpus (tests/fuzz/corpus/<name>/). Part of
# the README's test command (scripts/test.sh); see docs/TESTING.md.
#   MIMO_FUZZ_SECONDS   seconds per harness (default 20; 5 harnesses -> ~100 s of fuzzing)
#   MIMO_FUZZ_ONLY      run only this harness (e.g. tool_call_parser)
# A crash, leak, sanitizer report, timeout (> 10 s on one input) or out-of-memory fails the run;
# the input that did it is left in build-fuzz/artifacts/ (rerun: build-fuzz/<name>_fuzz FILE).
# Only the sources a harness needs are compiled (no CMake), so a cold build takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."

CXX="${MIMO_FUZZ_CXX:-clang++}"
SECONDS_PER="${MIMO_FUZZ_SECONDS:-20}"
OUT=build-fuzz
LAUNCH=""
command -v ccache >/dev/null 2>&1 && LAUNCH=ccache
command -v "$CXX" >/dev/null 2>&1 || { echo "[fuzz] $CXX not found: run scripts/setup-tests.sh" >&2; exit 1; }

# Every object gets the sanitizers and libFuzzer's coverage hooks (fuzzer-no-link), so the fuzzer
# sees which branches of the library code an input reaches.
FLAGS=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link
       -fno-sanitize-recover=undefined -Isrc)
PCRE2_LIBS=$(pkg-config --libs libpcre2-8)
CRYPTO_LIBS=$(pkg-config --libs libcrypto)  # core/sha256.cc

# Harness -> the library sources it links (src/ paths; globs allowed).
declare -A SOURCES=(
  [io_parsers]="src/io/safetensors.cc src/io/hf_config.cc src/io/torch_pickle.cc src/io/zip_archive.cc src/core/status.cc src/core/log.cc src/core/tensor.cc src/core/dtype.cc"
  [tokenizer_json]="src/tokenizer/*.cc src/core/status.cc src/core/log.cc"
  [jinja_template]="src/jinja/jinja_*.cc src/core/json_escape.cc src/core/status.cc src/core/log.cc"
  [tool_call_parser]="src/chat/tool_call_parser.cc src/chat/tool_schema.cc src/core/json_escape.cc src/core/status.cc src/core/log.cc"
  [request_parsers]="src/server/request_json.cc src/server/openai_request.cc src/server/anthropic_request.cc src/server/responses_request.cc src/server/parse_context.cc src/server/response_store.cc src/server/api_error.cc src/core/json_depth.cc src/core/base64.cc src/core/sha256.cc src/core/secure_random.cc src/engine/sampler.cc src/chat/chat_template.cc src/jinja/jinja_*.cc src/core/json_escape.cc src/core/status.cc src/core/log.cc"
)

# Largest input libFuzzer builds (the chat-template seeds are ~8.5 KB).
declare -A MAX_LEN=([io_parsers]=4096 [tokenizer_json]=8192 [jinja_template]=16384 [tool_call_parser]=2048
                   [request_parsers]=16384)

mkdir -p "$OUT/obj" "$OUT/artifacts"
obj_of() { echo "$OUT/obj/$(echo "$1" | tr / _).o"; }
export OUT LAUNCH CXX FLAGS_STR="${FLAGS[*]}"

start=$(date +%s)
names=("${!SOURCES[@]}")
[ -n "${MIMO_FUZZ_ONLY:-}" ] && names=("$MIMO_FUZZ_ONLY")
IFS=$'\n' names=($(sort <<<"${names[*]}")); unset IFS
# Every distinct source once, two at a time.
all=()
for n in "${names[@]}"; do
  for s in ${SOURCES[$n]} "tests/fuzz/${n}_fuzz.cc"; do all+=("$s"); done
done
printf '%s\n' "${all[@]}" | sort -u |
  xargs -P "${MIMO_JOBS:-2}" -I{} bash -c 'read -ra F <<<"$FLAGS_STR"; $LAUNCH "$CXX" "${F[@]}" -c {} -o "$OUT/obj/$(echo {} | tr / _).o"'
for n in "${names[@]}"; do
  objs=()
  for s in ${SOURCES[$n]} "tests/fuzz/${n}_fuzz.cc"; do objs+=("$(obj_of "$s")"); done
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "${objs[@]}" $PCRE2_LIBS $CRYPTO_LIBS -o "$OUT/${n}_fuzz"
done
echo "[fuzz] built ${#names[@]} harnesses in $(( $(date +%s) - start )) s"

for n in "${names[@]}"; do
  corpus="$OUT/corpus/$n"  # the run's working corpus starts from the checked-in seeds
  mkdir -p "$corpus"
  seeds="tests/fuzz/corpus/$n"
  [ -d "$seeds" ] || seeds=""
  t0=$(date +%s)
  if ! "$OUT/${n}_fuzz" -max_total_time="$SECONDS_PER" -timeout=10 -rss_limit_mb=2048 \
      -max_len="${MAX_LEN[$n]}" -print_final_stats=1 -artifact_prefix="$OUT/artifacts/${n}-" \
      "$corpus" $seeds >"$OUT/$n.log" 2>&1; then
    tail -n 60 "$OUT/$n.log" >&2
    echo "[fuzz] $n FAILED: input in $OUT/artifacts/${n}-*" >&2
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$OUT/$n.log" | grep -o '[0-9]*$' || echo '?')
  echo "[fuzz] $n ok: $runs inputs in $(( $(date +%s) - t0 )) s"
done
echo "[fuzz] total $(( $(date +%s) - start )) s"
