#!/usr/bin/env bash
# Trains mimo-v2-nano exactly as shipped (see scripts/nano/py.sh for the BLAS/OpenMP setup):
#   scripts/nano/run_train.sh --out build-nano/run
exec "$(dirname "$0")/py.sh" train.py "$@"
