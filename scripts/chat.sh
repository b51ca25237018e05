#!/usr/bin/env bash
# The README's main job: chats with the embedded default model (models/mimo-v2-nano, unpacked by
# scripts/setup.sh) through its own chat template, tokenizer and the mimo parsers: two plain
# questions, then a tool-call round trip (the call parsed, run by scripts/demo/tools.py, the
# result fed back, the final answer).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
MIMO=build/bin/mimo
MODEL=${MIMO_MODEL:-models/mimo-v2-nano}
run() { echo; echo "== $1"; shift; "$MIMO" chat --model "$MODEL" --threads 2 "$@"; }
# The nano model is a toy (models-src/mimo-v2-nano/README.md): it knows a fictional fact table,
# column arithmetic on 0..40 and four tools; it copies unseen names imperfectly, cannot look a
# name up in facts given in the prompt, and spells only some words of its list.
run "A fact from its table" --message "Where does Venlo live?"
run "Arithmetic, worked column by column" --message "What is 27 + 15?"
run "Thinking mode (reasoning_content parsed apart)" --enable-thinking --message "What is Pelden's job?"
run "Tool call round trip" --tools scripts/demo/tools.json \
    --tool-exec "/usr/bin/python3 scripts/demo/tools.py" --message "What is the weather in Fenwick?"
