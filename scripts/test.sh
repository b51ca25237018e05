#!/usr/bin/env bash
# The README's test command: install, build, run every C++ (ctest) and Python (pytest) test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
MIMO_CMAKE_ARGS="${MIMO_CMAKE_ARGS:-} -DMIMO_WERROR=ON" bash scripts/build.sh
(cd build && ctest --output-on-failure --timeout 900)
# Python helpers run on Debian's interpreter (it sees python3-torch / numpy / jinja2).
/usr/bin/python3 -m pytest -q tests/python -p no:cacheprovider
