#!/usr/bin/env bash
# Installs what the test command needs beyond the main job's scripts/setup.sh (idempotent; fast
# when done): GoogleTest, the Python test oracles (python3-torch, numpy, jinja2, pytest,
# jsonschema), Chromium for the chat-page tests, clang's libFuzzer/sanitizer runtimes, OpenMPI for
# the tensor-parallel tests, and from npm (third_party) the real Qwen3 tokenizer.json, an
# independent JS tokenizer, puppeteer-core, and the clients and agents the server is tested with
# (openai, @anthropic-ai/sdk, the AI SDK, LangChain, zod, Claude Code, the Codex CLI).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck source=scripts/apt_install.sh
source scripts/apt_install.sh

APT_PACKAGES=(
  git libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy python3-jinja2 python3-pytest python3-jsonschema
  chromium  # headless, for the web UI tests (tests/webui)
  openmpi-bin libopenmpi-dev  # tensor/expert parallelism (src/parallel) and its mpirun tests
  clang libclang-rt-14-dev  # libFuzzer + ASan/UBSan runtimes for scripts/fuzz.sh (tests/fuzz)
)
apt_install "${APT_PACKAGES[@]}"

if [ ! -d third_party/node_modules ] ||
   [ third_party/package-lock.json -nt third_party/node_modules/.package-lock.json ]; then
  # `npm install --no-save` installs exactly the locked versions and leaves the lock as it is.
  # Not `npm ci`: the agents ship their binaries as optional per-platform packages
  # (opencode-darwin-arm64, ...), and the registry reachable here has only the Linux ones, so the
  # lock cannot list the others and `npm ci` refuses it as out of sync.
  echo "[setup-tests] npm install --no-save (third_party)"
  (cd third_party && npm install --no-save --no-audit --no-fund --loglevel=error)
fi
for s in scripts/setup-tests.d/*.sh; do
  [ -e "$s" ] && bash "$s"
done
echo "[setup-tests] ok"
