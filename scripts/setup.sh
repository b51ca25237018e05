#!/usr/bin/env bash
# Installs what the main job needs on a fresh Debian 12 machine (idempotent; fast when done):
# the compiler and Debian -dev packages that building `mimo` needs, Node.js and the official
# `openai` npm client for the demo conversation (scripts/demo), and the unpacked default model.
# The test suite's own dependencies (GoogleTest, python3-torch, chromium, clang, OpenMPI, the
# clients and agents the server is tested with) are installed by scripts/setup-tests.sh, which
# the test command runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/apt_install.sh
source scripts/apt_install.sh

APT_PACKAGES=(
  build-essential cmake pkg-config curl xz-utils  # curl: scripts/chat.sh polls /health
  nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev libboost1.81-dev libssl-dev
  python3  # the demo's tool (scripts/demo/tools.py)
)
apt_install "${APT_PACKAGES[@]}"

# npm: the official openai client for the demo conversation (scripts/demo/chat_client.mjs).
if [ ! -d scripts/demo/node_modules/openai ] ||
   [ scripts/demo/package-lock.json -nt scripts/demo/node_modules/.package-lock.json ]; then
  echo "[setup] npm ci (scripts/demo)"
  (cd scripts/demo && npm ci --no-audit --no-fund --loglevel=error)
fi
# Later stages (model unpacking) live in scripts/setup.d/*.sh.
for s in scripts/setup.d/*.sh; do
  [ -e "$s" ] && bash "$s"
done
echo "[setup] ok"
