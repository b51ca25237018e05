#!/usr/bin/env bash
# Configures and builds the release tree in build/ (CLI at build/bin/mimo); MIMO_BUILD_TARGETS
# (e.g. "mimo") builds only those targets.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${MIMO_CMAKE_ARGS:-} >/dev/null
targets=()
for t in ${MIMO_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build -j"${MIMO_JOBS:-2}" "${targets[@]}"
