// Independent tokenizer oracle: @lenml/tokenizers (a JS port of transformers.js tokenizers) run on
// the same tokenizer.json. Reads a JSON array of texts (a file argument, or --corpus for
// corpus.mjs) and prints one JSON array with, per text:
//   {"text": t, "ids": encode(t) with added tokens recognised,
//    "ids_plain": encode(t) with NO added tokens (they stay text; our parse_special=false),
//    "nfc": t.normalize("NFC")}
// Usage: node encode.mjs --tokenizer DIR (--corpus | TEXTS.json)
import fs from "fs";
import path from "path";
import { createRequire } from "module";
import { fileURLToPath } from "url";
import { buildCorpus } from "./corpus.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
// Resolve the package from the project's third_party/node_modules.
const require = createRequire(path.join(here, "../../third_party/package.json"));
const { TokenizerLoader } = await import(require.resolve("@lenml/tokenizers"));

const args = process.argv.slice(2);
let dir = null, input = null, corpus = false;
for (let i = 0; i < args.length; ++i) {
  if (args[i] === "--tokenizer") dir = args[++i];
  else if (args[i] === "--corpus") corpus = true;
  else input = args[i];
}
if (!dir || (!corpus && !input)) {
  console.error("usage: node encode.mjs --tokenizer DIR (--corpus | TEXTS.json)");
  process.exit(2);
}
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const tokenizerConfig = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const withAdded = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
// Same file without its added tokens: everything is plain byte-level BPE text.
const plainConfig = { ...tokenizerConfig, added_tokens_decoder: {} };
const plain = TokenizerLoader.fromPreTrained({
  tokenizerJSON: { ...tokenizerJSON, added_tokens: [] },
  tokenizerConfig: plainConfig,
});

const texts = corpus ? buildCorpus() : JSON.parse(fs.readFileSync(input, "utf8"));
const out = texts.map((t) => ({
  text: t,
  ids: withAdded.encode(t, { add_special_tokens: false }),
  ids_plain: plain.encode(t, { add_special_tokens: false }),
  nfc: t.normalize("NFC"),
}));
process.stdout.write(JSON.stringify(out));
