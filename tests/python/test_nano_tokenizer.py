"""scripts/nano/tok.py (the Python BPE used to build the nano corpus) against the independent JS
tokenizer (@lenml/tokenizers via tests/tokenizer_oracle/encode.mjs) on rendered corpus text."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from prereq import require

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts", "nano"))

import data  # noqa: E402
import tok  # noqa: E402

ORACLE = os.path.join(REPO, "tests", "tokenizer_oracle", "encode.mjs")


@pytest.fixture(scope="module")
def tokenizer():
    return tok.Tokenizer()


def corpus_texts(n=40):
    r, w = data.Renderer(), data.World()
    g = data.Generator(3, w)
    texts = []
    for _ in range(n):
        for s in g.conversation():
            texts.append(data.prompt_text(r, s) + s.completion + "<|im_end|>")
    for s in data.eval_set(w, n_per_kind=3):
        texts.append(data.prompt_text(r, s) + s.completion)
    texts += ["  two  spaces\n\n\nand 12345 digits's", "x\r\ny\tz  ", "don't I'LL we've"]
    return texts


def test_matches_js_tokenizer(tokenizer, tmp_path):
    require(shutil.which("node") is not None and os.path.exists(ORACLE),
            "node or the JS tokenizer oracle is not available (run scripts/setup-tests.sh)")
    texts = corpus_texts()
    p = tmp_path / "texts.json"
    p.write_text(json.dumps(texts))
    out = subprocess.run(["node", ORACLE, "--tokenizer", tokenizer.dir, str(p)], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    js = json.loads(out)
    assert len(js) == len(texts)
    for t, j in zip(texts, js):
        assert tokenizer.encode(t) == j["ids"], t[:200]


def test_decode_round_trip(tokenizer):
    for t in corpus_texts(10):
        assert tokenizer.decode(tokenizer.encode(t)) == t


def test_rejects_non_ascii(tokenizer):
    with pytest.raises(AssertionError):
        tokenizer.encode("caf\u00e9")


def test_training_segments_tokenize_like_the_whole(tokenizer):
    """The trainer tokenizes prompt and completion separately; that must equal tokenizing the
    rendered conversation at once (the engine sees the latter)."""
    r, w = data.Renderer(), data.World()
    g = data.Generator(11, w)
    for _ in range(60):
        samples = g.conversation()
        for ids, mask in data.encode_conversation(tokenizer, r, samples):
            assert ids == tokenizer.encode(tokenizer.decode(ids))
            assert mask[-1] == 1 and ids[-1] == 151645
