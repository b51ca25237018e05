"""The C++ engine on the shipped mimo-v2-nano checkpoints (BF16 and FP8, unpacked by
scripts/setup.sh): `mimo logits` prefill and decode against the float64 PyTorch reference on a
chat-formatted prompt that crosses the 32-key window."""
import json
import os
import subprocess

import numpy as np
import pytest

import mimo_reference

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = ("<|im_start|>system\nYou are MiMo, a helpful AI assistant engineered by Xiaomi.<|im_end|>"
        "<|im_start|>user\nWhat is 17 + 25?<|im_end|><|im_start|>assistant\n<think></think>"
        "17 + 25 = 42.<|im_end|><|im_start|>user\nSpell the word garden.<|im_end|>"
        "<|im_start|>assistant\n")
_ref = {}


def model_dir(name):
    d = os.path.join(REPO, "models", name)
    assert os.path.isdir(d), f"{d} missing: run scripts/setup.sh"
    return d


def reference(mimo_bin, name):
    if name not in _ref:
        p = subprocess.run([mimo_bin, "tokenize", "--model", model_dir(name), "--text", TEXT],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        ids = json.loads(p.stdout)
        _ref[name] = (ids, mimo_reference.load_reference(model_dir(name)).forward(ids).numpy())
    return _ref[name]


@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("name", ["mimo-v2-nano", "mimo-v2-nano-fp8"])
def test_engine_matches_reference(mimo_bin, tmp_path, name, mode):
    ids, want = reference(mimo_bin, name)
    assert len(ids) > 40  # past the 32-key window
    out = tmp_path / "l.bin"
    p = subprocess.run([mimo_bin, "logits", "--model", model_dir(name), "--ids",
                        ",".join(map(str, ids)), "--out", str(out), "--mode", mode,
                        "--threads", "2"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got = np.fromfile(out, dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    # The criterion over the whole vocabulary...
    err = np.abs(got - want).max(-1)
    assert (err <= 1e-4 * np.abs(want).max()).all(), err.max()
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    # ...and the same criterion on the tokens the model was trained to write: the never-written
    # tokens sit at -100..-300 by construction and would otherwise loosen the tolerance.
    used = json.load(open(os.path.join(model_dir(name), "nano_used_tokens.json")))["output_ids"]
    gu, wu = got[:, used], want[:, used]
    assert (np.abs(gu - wu).max(-1) <= 1e-4 * np.abs(wu).max()).all(), np.abs(gu - wu).max()
