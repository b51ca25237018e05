// The tokenizer cross-check corpus: fixed edge cases (fixed_texts.json) plus texts generated
// deterministically from a seeded PRNG (same corpus on every run and machine).
// Excluded on purpose (the oracle differs from HF tokenizers there, see docs/PERFORMANCE.md):
// U+FEFF and U+0085 (JS \s vs Unicode White_Space) and characters assigned after Unicode 14.
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";

const here = path.dirname(fileURLToPath(import.meta.url));

function mulberry32(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FRAGMENTS = [
  "the", "The", "quick", "brown", "fox", " jumps", " over", "lazy", "dog", "I'm", "you'll",
  "they'RE", "it's", "We'VE", "don't", "I'd", "HELLO", "naïve", "café", "résumé", "Straße",
  "12", "3.14159", "1,000,000", "0x7fff", "2024-01-31", "42%", "$19.99", "１２３", "٣٤٥", "४२",
  "你好", "世界", "中文分词测试", "東京", "こんにちは", "カタカナ", "ｶﾀｶﾅ", "안녕하세요", "한국어",
  "مرحبا", "العربية", "שלום", "Привет", "мир", "Ελληνικά", "हिन्दी", "ภาษาไทย", "Tiếng Việt",
  "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇯🇵", "✅", "🤖", "e\u0301", "A\u030a", "\u1100\u1161\u11a8",
  "ñ", "n\u0303", "Å", "Ω", "ﬁ", "…", "—", "–", "«", "»", "“", "”", "‘", "’", "•", "€", "£", "¥",
  "(", ")", "[", "]", "{", "}", "<", ">", "=", "==", "!=", "=>", "->", "::", ";", ":", ",", ".",
  "...", "?", "!", "@", "#", "&&", "||", "/*", "*/", "//", "\\", "\"", "'", "`", "```", "~", "^",
  " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", "\u00a0", "\u3000", "\u2003",
  "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
  "<tool_response>", "</tool_response>", "<|endoftext|>", "<|fim_prefix|>", "<|im_start", "<thin",
  "<|", "|>", "<function=get_weather>", "<parameter=city>", "</parameter>", "</function>",
];

// Code point ranges assigned by Unicode 14 and stable since (letters, marks, digits, symbols).
const RANGES = [
  [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x17f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff],
  [0x5d0, 0x5ea], [0x620, 0x64a], [0x660, 0x669], [0x900, 0x97f], [0xe01, 0xe3a], [0x1100, 0x11ff],
  [0x1e00, 0x1eff], [0x2000, 0x200a], [0x2010, 0x2027], [0x2190, 0x21ff], [0x3041, 0x3096],
  [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff01, 0xff5e], [0x1f300, 0x1f64f],
  [0x1f900, 0x1f9ff], [0x1d400, 0x1d4ff],
];

function generated() {
  const rnd = mulberry32(20240531);
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const out = [];
  // Fragment soups: words, numbers, scripts, whitespace and special tokens glued together.
  for (let i = 0; i < 120; ++i) {
    const n = 1 + Math.floor(rnd() * 25);
    let s = "";
    for (let k = 0; k < n; ++k) {
      s += pick(FRAGMENTS);
      if (rnd() < 0.5) s += pick([" ", " ", " ", "", "\n", "  ", "\t"]);
    }
    out.push(s);
  }
  // Random code points from the ranges (combining marks and Hangul jamo exercise NFC).
  for (let i = 0; i < 60; ++i) {
    const n = 1 + Math.floor(rnd() * 40);
    let s = "";
    for (let k = 0; k < n; ++k) {
      const [lo, hi] = pick(RANGES);
      s += String.fromCodePoint(lo + Math.floor(rnd() * (hi - lo + 1)));
    }
    out.push(s);
  }
  // Digit runs of every length class, and whitespace runs before words/end/newlines.
  for (let len of [1, 2, 3, 4, 7, 16, 33, 100, 1000]) {
    let d = "";
    for (let k = 0; k < len; ++k) d += String(Math.floor(rnd() * 10));
    out.push(d);
    out.push("x" + d + "y " + d + ".");
  }
  for (let len of [1, 2, 3, 5, 17, 64, 300]) {
    out.push(" ".repeat(len) + "word");
    out.push("word" + " ".repeat(len));
    out.push("a" + " ".repeat(len) + "\n" + "\t".repeat(len % 5) + "b");
  }
  return out;
}

export function buildCorpus() {
  const fixed = JSON.parse(fs.readFileSync(path.join(here, "fixed_texts.json"), "utf8"));
  return fixed.concat(generated());
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  process.stdout.write(JSON.stringify(buildCorpus()));
}
