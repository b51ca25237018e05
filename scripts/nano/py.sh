#!/usr/bin/env bash
# Runs a scripts/nano/*.py script with OpenBLAS (Debian's python3-torch links the generic
# reference BLAS, ~5x slower): libopenblas0-pthread is fetched once with `apt-get download` into
# build-nano/blas and put first on LD_LIBRARY_PATH for this process only; the system BLAS is left
# alone. OMP_WAIT_POLICY=PASSIVE because busy-waiting OpenMP threads on a shared 2-core machine
# made a training step >10x slower. Falls back to the system BLAS if the download is impossible.
set -euo pipefail
cd "$(dirname "$0")/../.."
BLAS=build-nano/blas
LIB="$BLAS/root/usr/lib/x86_64-linux-gnu/openblas-pthread"
if [ ! -e "$LIB/libblas.so.3" ]; then
  mkdir -p "$BLAS"
  (cd "$BLAS" && apt-get download libopenblas0-pthread >/dev/null 2>&1 && dpkg -x libopenblas0-pthread_*.deb root) ||
    echo "[nano] OpenBLAS download failed; using the system BLAS (slow)" >&2
fi
if [ -e "$LIB/libblas.so.3" ]; then
  export LD_LIBRARY_PATH="$PWD/$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} OMP_WAIT_POLICY=PASSIVE
script="$1"; shift
exec /usr/bin/python3 "scripts/nano/$script" "$@"
