#!/usr/bin/env bash
# The AArch64 (ARM NEON) leg of the test command (scripts/test.sh), run on the x86-64 host:
# cross-builds the kernel and core tests and a `mimo` CLI with only its `logits` subcommand (no server:
# -DMIMO_CLI_COMMANDS=logits) into build-aarch64/ with Debian's g++-aarch64-linux-gnu
# (cmake/aarch64-linux-gnu.cmake), then runs under qemu-user:
#   1. kernels_tests on qemu's default CPU ("max": NEON and FEAT_BF16 claimed and executed),
#   2. the dispatch and probe tests on a Cortex-A72 (ARMv8.0: no BF16, so the probe says no),
#   3. tests/python/test_logits_vs_reference.py against the aarch64 `mimo` (MIMO_BIN, and
#      MIMO_LAUNCHER = the qemu command): every generated checkpoint, prefill and decode, within
#      the x86 bounds of the float64 reference;
#   4. the denormal-flush tests of core_tests (FPCR.FZ in every compute thread), and the thread
#      pool's wake-up test 100 times over (a lost wake-up hangs it).
# Installs what is missing first (idempotent): the cross compiler, qemu-user and the arm64
# libraries the build links (dpkg multiarch; --no-remove, so nothing of the host is replaced).
# Each step runs under a time limit (MIMO_AARCH64_TIMEOUT seconds, default 900) so an emulator
# hang fails the test command instead of stalling it.
set -euo pipefail
cd "$(dirname "$0")/.."

TRIPLE=aarch64-linux-gnu
BUILD=build-aarch64
# -L /: the arm64 dynamic loader and libraries of the multiarch packages (libc6:arm64). Not
# /usr/$TRIPLE (the cross toolchain's copy): its loader with the multiarch libc.so.6 of another
# glibc build hangs in the first pthread_create.
QEMU="qemu-aarch64 -L /"
LIMIT="${MIMO_AARCH64_TIMEOUT:-900}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"

# apt_install_arm64 PKG...: installs the missing packages (names may carry :arm64) without
# removing anything (a multiarch install may otherwise swap out a host -dev package).
apt_install_arm64() {
  local missing=() p
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "[test-aarch64] installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends --no-remove \
      "${missing[@]}"
  fi
}
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "[test-aarch64] dpkg --add-architecture arm64"
  $sudo dpkg --add-architecture arm64
fi
apt_install_arm64 g++-$TRIPLE qemu-user nlohmann-json3-dev \
  libc6:arm64 libstdc++6:arm64 libssl-dev:arm64 libpcre2-dev:arm64 libgtest-dev:arm64

start=$(date +%s)
cmake -S . -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE=cmake/$TRIPLE.cmake -DCMAKE_BUILD_TYPE=Release \
  -DMIMO_WERROR=ON -DMIMO_BUILD_TESTS=ON -DMIMO_MPI=OFF -DMIMO_CLI_COMMANDS=logits >/dev/null
cmake --build "$BUILD" -j"${MIMO_JOBS:-2}" --target kernels_tests core_tests mimo
echo "[test-aarch64] cross build: $(($(date +%s) - start)) s"

step() {  # step NAME CMD...: runs CMD under the time limit, reporting its duration
  local name=$1 t0
  shift
  t0=$(date +%s)
  echo "[test-aarch64] $name"
  timeout --kill-after=10 "$LIMIT" "$@"
  echo "[test-aarch64] $name: ok ($(($(date +%s) - t0)) s)"
}
# gtest runs from the repo root, as ctest does (tests read fixtures relative to it).
step "kernels_tests (qemu -cpu max: NEON + BF16)" $QEMU "$BUILD/bin/kernels_tests"
step "dispatch and probes (qemu -cpu cortex-a72: no BF16)" \
  qemu-aarch64 -cpu cortex-a72 -L / "$BUILD/bin/kernels_tests" \
  --gtest_filter='CpuFeatures*:Dispatch*:Linear.EveryIsaMatchesReferenceOnOddShapes'
step "denormal flushing (FPCR.FZ) in compute threads" $QEMU "$BUILD/bin/core_tests" \
  --gtest_filter='Denormals.*'
# The pool's sleep/wake handshake, repeated: qemu-user does not order an STLR before a later LDAR,
# and the pool once relied on that (src/core/thread_pool.h); this hung within ~30 repeats then.
step "thread pool wake-ups (100 repeats)" $QEMU "$BUILD/bin/core_tests" \
  --gtest_filter='ThreadPool.SlowWorkersWakeASleepingCaller' --gtest_repeat=100
step "mimo logits vs the float64 reference" env MIMO_BIN="$BUILD/bin/mimo" MIMO_LAUNCHER="$QEMU" \
  /usr/bin/python3 -m pytest -q tests/python/test_logits_vs_reference.py -p no:cacheprovider
echo "[test-aarch64] ok ($(($(date +%s) - start)) s)"
