#!/usr/bin/env bash
# Configures and builds the release tree in build/ (CLI at build/bin/mimo).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${MIMO_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"${MIMO_JOBS:-2}"
