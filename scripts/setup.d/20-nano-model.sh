#!/usr/bin/env bash
# Unpacks the committed mimo-v2-nano checkpoints (models-src/mimo-v2-nano/*.tar.xz) to
# models/mimo-v2-nano (BF16) and models/mimo-v2-nano-fp8 (FP8 block-quantized). models/ is
# git-ignored. Re-unpacks when an archive changes (its sha256 is kept next to the unpacked folder).
# The trained DFlash drafter (models-src/mimo-v2-nano/mimo-v2-nano-dflash.tar.xz, trained by
# scripts/nano/train_dflash.py) goes to dflash/ inside both, where --speculative dflash finds it.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p models
dflash_tar="models-src/mimo-v2-nano/mimo-v2-nano-dflash.tar.xz"
for name in mimo-v2-nano mimo-v2-nano-fp8; do
  tar_path="models-src/mimo-v2-nano/${name}.tar.xz"
  for f in "$tar_path" "$dflash_tar"; do
    if [ ! -f "$f" ]; then
      echo "[setup] missing $f" >&2
      exit 1
    fi
  done
  sum=$(cat "$tar_path" "$dflash_tar" | sha256sum | cut -d' ' -f1)
  stamp="models/.${name}.sha256"
  if [ -f "models/${name}/model.safetensors" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
    continue
  fi
  echo "[setup] unpacking $tar_path -> models/${name}"
  rm -rf "models/${name}" "models/.${name}.tmp"
  mkdir -p "models/.${name}.tmp"
  tar -C "models/.${name}.tmp" -xJf "$tar_path"
  tar -C "models/.${name}.tmp/${name}" -xJf "$dflash_tar"
  mv "models/.${name}.tmp/${name}" "models/${name}"
  rm -rf "models/.${name}.tmp"
  echo "$sum" > "$stamp"
done
