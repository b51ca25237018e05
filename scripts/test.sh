#!/usr/bin/env bash
# The README's test command: install, build, run every C++ (ctest), Python (pytest), AArch64
# (a cross build under qemu: scripts/test-aarch64.sh), end-to-end
# server (node --test tests/server: the official API clients) and browser (node --test: the chat
# page in headless Chromium) test, then the fuzzers for a bounded time (scripts/fuzz.sh;
# docs/TESTING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-tests.sh
MIMO_CMAKE_ARGS="${MIMO_CMAKE_ARGS:-} -DMIMO_WERROR=ON -DMIMO_BUILD_TESTS=ON" bash scripts/build.sh
(cd build && ctest --output-on-failure --timeout 900)
# Python helpers run on Debian's interpreter (it sees python3-torch / numpy / jinja2).
/usr/bin/python3 -m pytest -q tests/python -p no:cacheprovider
# The AArch64 NEON build under qemu-user: a cross build of the kernel tests and `mimo logits`,
# run against the float64 reference (scripts/test-aarch64.sh; ~10 min on 2 cores).
bash scripts/test-aarch64.sh
# `mimo serve` end to end through the official openai and @anthropic-ai/sdk clients (random-weight
# and default models; MIMO_BIN / MIMO_SERVE_LAUNCHER pick the binary and a launcher prefix). One
# file at a time: each starts its own servers and the suite is sized for a 2-core machine.
node --test --test-concurrency=1 tests/server/
# The chat page of `mimo serve` in headless Chromium. A missing browser fails here (never skips).
MIMO_REQUIRE_BROWSER=1 node --test tests/webui/
# libFuzzer + ASan/UBSan on the parsers of untrusted input, 20 s each (MIMO_FUZZ_SECONDS).
bash scripts/fuzz.sh
