"""--precision bf16 (alias --prefill-precision), the opt-in reduced-precision mode: every step's BF16
and FP8 GEMMs, decode included, round the activations to bf16 and run AVX512_BF16 vdpbf16ps.

* Batch invariance within the mode: a token's logits are the same bits whether its sequence
  decodes alone (steps of one token), decodes beside others (steps of several tokens) or is
  prefilled in chunks (steps of tens of tokens), through `mimo logits`, and through the engine
  (`mimo generate --requests`, which mixes decode tokens and prompt chunks in one step): the bf16
  kernels reduce each output element in one order whatever T (tests/kernels/linear_test.cc).
* The flag: --prefill-precision is the same flag by its older name; other values are refused.
* The error of the mode in decode on the trained nano models (BF16 and FP8 weights): argmax
  agreement and relative logit error against exact, all sequences decoded together. A row's
  relative error is max |bf16 - exact| / max |exact| over its vocabulary columns.

Every test skips on a CPU without AVX512_BF16 (the mode then runs exact, with a note)."""
import json
import os
import subprocess

import numpy as np
import pytest

from test_engine_batch import outputs, requests, run
from test_paged_kv_logits import REPO, nano_conversations, nano_logits_spec, run_logits
from test_bf16_prefill import REL_ERR, check_bf16_error

NO_BF16 = "needs AVX512_BF16"


def skip_without_bf16(stderr):
    if NO_BF16 in stderr:
        pytest.skip("this CPU has no AVX512_BF16: --precision bf16 runs exact")


def random_sequences(model, lengths, seed=5):
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, n).tolist() for n in lengths]


def spec(seqs):
    return ";".join(",".join(map(str, s)) for s in seqs)


@pytest.mark.parametrize("variant", ["bf16", "fp8"])
def test_logits_bitwise_equal_alone_batched_and_chunked(mimo_bin, checkpoint, tmp_path, variant):
    model = checkpoint(variant)
    seqs = random_sequences(model, [70, 9, 33, 70, 17, 50, 26, 41])
    n0 = len(seqs[0])
    bf16 = ("--precision", "bf16")
    alone, err = run_logits(mimo_bin, model, spec(seqs[:1]), tmp_path / "alone.bin", *bf16,
                            "--mode", "decode")
    skip_without_bf16(err)
    alone = alone.reshape(n0, -1)
    exact, _ = run_logits(mimo_bin, model, spec(seqs[:1]), tmp_path / "exact.bin", "--mode",
                          "decode")
    assert not np.array_equal(alone, exact.reshape(n0, -1)), "the bf16 kernels did not run"
    # Decode steps of 8, then fewer tokens as sequences end; prompt chunks of 64 and 5 tokens
    # (every sequence's chunk in one step: up to ~300 tokens).
    runs = {"decode x8": ("--mode", "decode"), "chunks of 64": ("--chunk-size", "64"),
            "chunks of 5": ("--chunk-size", "5"), "whole prompts": ()}
    for name, flags in runs.items():
        got, _ = run_logits(mimo_bin, model, spec(seqs), tmp_path / "b.bin", *bf16, *flags)
        got = got.reshape(sum(map(len, seqs)), -1)[:n0]
        assert np.array_equal(got.view(np.uint32), alone.view(np.uint32)), (
            f"{variant} {name}: max |diff| {np.abs(got - alone).max():.3g}")


@pytest.mark.parametrize("variant", ["bf16", "fp8"])
def test_engine_outputs_equal_alone_and_batched(mimo_bin, checkpoint, tmp_path, variant):
    """The engine's steps mix decode tokens and prompt chunks (budget 16) or whole prompts; each
    request gives the same tokens and bit-identical logprobs as when it runs alone."""
    model = checkpoint(variant)
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    reqs = requests(vocab)[:8]
    alone = {}
    for r in reqs:
        p, lines = run(mimo_bin, model, [r], tmp_path, f"alone-{r['id']}", "--precision", "bf16",
                       "--max-num-seqs", "1")
        assert p.returncode == 0, p.stderr
        skip_without_bf16(p.stderr)
        alone.update(outputs(lines))
    for budget in ["16", "4096"]:
        p, lines = run(mimo_bin, model, reqs, tmp_path, f"batch-{budget}", "--precision", "bf16",
                       "--max-num-batched-tokens", budget)
        assert p.returncode == 0, p.stderr
        got = outputs(lines)
        for r in reqs:
            assert got[r["id"]] == alone[r["id"]], (variant, budget, r["id"])


def test_prefill_precision_is_an_alias(mimo_bin, checkpoint, tmp_path):
    model = checkpoint("fp8")
    ids = spec(random_sequences(model, [20, 3]))
    new, err = run_logits(mimo_bin, model, ids, tmp_path / "new.bin", "--precision", "bf16",
                          "--mode", "decode")
    skip_without_bf16(err)
    old, _ = run_logits(mimo_bin, model, ids, tmp_path / "old.bin", "--prefill-precision",
                        "bf16", "--mode", "decode")
    both, _ = run_logits(mimo_bin, model, ids, tmp_path / "both.bin", "--precision", "bf16",
                         "--prefill-precision", "bf16", "--mode", "decode")
    exact, _ = run_logits(mimo_bin, model, ids, tmp_path / "exact.bin", "--precision", "exact",
                          "--mode", "decode")
    default, _ = run_logits(mimo_bin, model, ids, tmp_path / "default.bin", "--mode", "decode")
    np.testing.assert_array_equal(old, new)
    np.testing.assert_array_equal(both, new)
    np.testing.assert_array_equal(exact, default)
    assert not np.array_equal(new, exact)


@pytest.mark.parametrize("flags,message", [
    (("--precision", "fp16"), "--precision must be exact, bf16 or int8, got 'fp16'"),
    (("--prefill-precision", "BF16"), "--prefill-precision must be exact, bf16 or int8, got 'BF16'"),
    (("--precision", "bf16", "--prefill-precision", "exact"),
     "--precision bf16 and --prefill-precision exact disagree"),
])
def test_bad_precision_is_refused(mimo_bin, checkpoint, tmp_path, flags, message):
    p = subprocess.run([mimo_bin, "logits", "--model", checkpoint("fp8"), "--ids", "1,2",
                        "--out", str(tmp_path / "x.bin"), *flags],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert message in p.stderr


# The decode error on the trained nano models, bf16 mode against exact: the bounds of the prompt
# measurement (test_bf16_prefill.py, ~1.2x the shipped models' figures). The rounding is the same,
# and so are the numbers: the mode is batch invariant (asserted below), so a decoded position
# gives the bits it gives in a prompt chunk.
@pytest.mark.parametrize("name", ["mimo-v2-nano", "mimo-v2-nano-fp8"])
def test_bf16_decode_error_on_trained_model(mimo_bin, tmp_path, name):
    model = os.path.join(REPO, "models", name)
    assert os.path.isdir(model), f"{model} missing: run scripts/setup.sh"
    seqs, masks = nano_conversations()
    ids, columns, ncols = nano_logits_spec(tmp_path, model, seqs)
    common = (*columns, "--mode", "decode")
    exact, _ = run_logits(mimo_bin, model, ids, tmp_path / "exact.bin", *common)
    bf16, err = run_logits(mimo_bin, model, ids, tmp_path / "bf16.bin", *common,
                           "--precision", "bf16")
    skip_without_bf16(err)
    exact, bf16 = exact.reshape(-1, ncols), bf16.reshape(-1, ncols)
    mask = np.array(sum(masks, []), dtype=bool)
    assert exact.shape[0] == len(mask) > 4000
    check_bf16_error(f"{name} bf16 mode, decode", REL_ERR[name], exact, bf16, mask)

    # And the trained model's logits are batch invariant within the mode: prefilled in chunks of
    # 32 (all sequences in each step), the same bits as decoded.
    chunked, _ = run_logits(mimo_bin, model, ids, tmp_path / "bf16_chunked.bin", *columns,
                            "--mode", "prefill", "--chunk-size", "32", "--precision", "bf16")
    assert np.array_equal(chunked.reshape(-1, ncols).view(np.uint32), bf16.view(np.uint32))
