"""`mimo tokenize` / `mimo detokenize` end to end against the independent JS tokenizer
(@lenml/tokenizers via tests/tokenizer_oracle/encode.mjs) and Python's unicodedata NFC.
The full >= 200-text corpus cross-check runs in C++ (tests/tokenizer/qwen3_oracle_test.cc);
this checks the CLI plumbing on a few texts. Binary: $MIMO_BIN (default build/bin/mimo)."""
import json
import os
import subprocess
import tempfile
import unicodedata

import pytest

from prereq import require_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIMO = os.environ.get("MIMO_BIN", os.path.join(ROOT, "build", "bin", "mimo"))
MODEL = os.path.join(ROOT, "third_party", "qwen3")

TEXTS = [
    "Hello world! I'm testing <think>x</think> and <|im_start|>user\nhi<|im_end|>",
    "def f(x):\n    return x ** 2  # 平方\n\n\tcaf\u0065\u0301 👨\u200d👩\u200d👧 12345",
    "  mixed   whitespace \r\n\r\n trailing   ",
    "<tool_call>\n<function=get_weather>\n<parameter=city>東京</parameter>\n</function>\n</tool_call>",
]

@pytest.fixture(autouse=True)
def _needs_mimo():
    require_file(MIMO, "mimo binary not built (set MIMO_BIN)")


def run(*args, check=True):
    return subprocess.run([MIMO, *args], capture_output=True, check=check, timeout=120)


@pytest.fixture(scope="module")
def oracle():
    assert os.path.exists(os.path.join(MODEL, "tokenizer.json")), "run scripts/setup.sh"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(TEXTS, f)
    try:
        out = subprocess.run(
            ["node", os.path.join(ROOT, "tests", "tokenizer_oracle", "encode.mjs"),
             "--tokenizer", MODEL, f.name], capture_output=True, check=True, timeout=300)
    finally:
        os.unlink(f.name)
    return json.loads(out.stdout)


@pytest.mark.parametrize("i", range(len(TEXTS)))
def test_tokenize_matches_oracle(oracle, i):
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(TEXTS[i].encode("utf-8"))
    try:
        ids = json.loads(run("tokenize", "--model", MODEL, "--file", f.name).stdout)
        plain = json.loads(run("tokenize", "--model", MODEL, "--file", f.name, "--no-special").stdout)
    finally:
        os.unlink(f.name)
    assert ids == oracle[i]["ids"]
    assert plain == oracle[i]["ids_plain"]
    text = run("detokenize", "--model", MODEL, "--ids", ",".join(map(str, ids))).stdout
    assert text.decode("utf-8") == unicodedata.normalize("NFC", TEXTS[i])


def test_text_flag_and_confirmed_ids():
    ids = json.loads(run("tokenize", "--model", MODEL, "--text",
                         "<|im_start|><|im_end|><think></think><|endoftext|>").stdout)
    assert ids == [151644, 151645, 151667, 151668, 151643]


def test_bad_input_is_a_clear_error():
    r = run("detokenize", "--model", MODEL, "--ids", "1,99999999", check=False)
    assert r.returncode != 0 and b"not in the vocabulary" in r.stderr
    r = run("tokenize", "--model", "/nonexistent", "--text", "x", check=False)
    assert r.returncode != 0 and b"tokenizer.json" in r.stderr
