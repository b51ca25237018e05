"""The C++ engine on the shipped mimo-v2-nano checkpoints (BF16 and FP8, unpacked by
scripts/setup.sh): `mimo logits` prefill and decode against the float64 PyTorch reference on a
chat-formatted prompt that crosses the 64-key window."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mimo_reference

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = ("<|im_start|>system\nYou are MiMo, a helpful AI assistant engineered by Xiaomi.<|im_end|>"
        "<|im_start|>user\nWhat is 17 + 25?<|im_end|><|im_start|>assistant\n<think></think>"
        "17 + 25 = 42.<|im_end|><|im_start|>user\nSpell the word garden.<|im_end|>"
        "<|im_start|>assistant\n<think></think>garden is spelled g-a-r-d-e-n.<|im_end|>"
        "<|im_start|>user\nWhere does Venlo live?<|im_end|><|im_start|>assistant\n")
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
    assert len(ids) > 80  # past the 64-key window
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


@pytest.mark.parametrize("name", ["mimo-v2-nano", "mimo-v2-nano-fp8"])
def test_engine_greedy_equals_training_module_on_heldout(mimo_bin, name):
    """`mimo generate` (greedy) writes the same completions as the PyTorch module that
    scripts/nano/evaluate.py scores, on held-out prompts of every kind, so the evaluation's numbers
    are the engine's. A divergence is accepted only at a near-tie of the module's top two logits."""
    sys.path.insert(0, os.path.join(REPO, "scripts", "nano"))
    import data  # noqa: E402
    import evaluate  # noqa: E402
    import nano_io  # noqa: E402
    import tok as toklib  # noqa: E402
    import torch

    torch.set_num_threads(1)
    model, _ = nano_io.load_model(model_dir(name))
    used = json.load(open(os.path.join(model_dir(name), "nano_used_tokens.json")))["output_ids"]
    tk, r = toklib.Tokenizer(), data.Renderer()
    items = data.eval_set(data.World(), seed=99, n_per_kind=3)
    for s in items:
        prompt = tk.encode(data.prompt_text(r, s))
        want = evaluate.greedy(model, prompt, max_new=96)
        p = subprocess.run([mimo_bin, "generate", "--model", model_dir(name), "--ids",
                            ",".join(map(str, prompt)), "--max-tokens", "96", "--json",
                            "--threads", "2"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)["output_ids"]
        if got != want:
            n = min(len(got), len(want))  # one a prefix of the other: they part at n
            j = next((i for i in range(n) if got[i] != want[i]), n)
            with torch.no_grad():
                lg = model.logits(model.hidden(torch.tensor([prompt + want[:j]])))[0, -1]
            # Near-tie relative to the logits the model writes (as the tolerance above): the
            # never-written tokens sit at -100..-300 and would make any gap look small.
            lu = lg[used]
            top2 = lu.topk(2).values
            assert float(top2[0] - top2[1]) < 1e-3 * float(lu.abs().max()), \
                (s.kind, j, float(top2[0] - top2[1]), tk.decode(got), tk.decode(want))
