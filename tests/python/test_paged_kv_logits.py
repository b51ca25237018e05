"""The paged KV cache under the whole model, against the PyTorch reference:
every attention backend x block size 16/64 x prefill/decode (f32 KV: engine tolerance), bf16 and
fp8 KV (tolerances ~1.2x the measurement, argmax kept at every position but near-ties), several sequences batched in one
step (continuous batching, chunked prefill), and prefix-cache reuse across the SWA window edge.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from test_logits_vs_reference import REL_TOL, reference_logits

# Variants with both layer kinds, sinks and the two FP8 grids; 40 ids cross the 8-key window.
VARIANTS = ["bf16", "fp8", "fp8-fused"]
BACKENDS = ["reference", "cpu_paged"]
# Quantized KV on the nano model, relative to max |logit| over the vocabulary it writes: (bound on
# every position, bound on the 99th percentile of positions). About 1.2x the shipped model's
# measurement (since its pass-key phase, 2026-12-03: bf16 max 0.0458, q99 0.0020; fp8 max 0.1562,
# q99 0.0702; before it: 0.0495 / 0.0077 and 0.1330 / 0.0640), so that a real regression fails
# (docs/TESTING.md has the mutant). Documented in docs/PERFORMANCE.md.
KV_TOL = {"bf16": (0.055, 0.0024), "fp8": (0.19, 0.084)}
# Near-tie exemption of the argmax check, relative to the same max |logit|: the argmax may move only
# where the f32-KV top-2 gap is below this. About 1.2x the largest gap at which it moves on the
# shipped model (bf16: 0.0247, at a prompt position; fp8: 0.1117; before the pass-key phase 0.00097
# and 0.0801).
KV_NEAR_TIE = {"bf16": 0.030, "fp8": 0.134}


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


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NANO = os.path.join(REPO, "models", "mimo-v2-nano")


def nano_conversations():
    """Held-out conversations of every kind in the nano model's own format (prompt rendered by its
    chat template + the expected completion), as token ids, with a mask of the positions that
    predict an assistant-written token (the positions greedy decoding reads)."""
    sys.path.insert(0, os.path.join(REPO, "scripts", "nano"))
    import data  # noqa: E402
    import tok as toklib  # noqa: E402
    tk, r = toklib.Tokenizer(), data.Renderer()
    seqs, masks = [], []
    for s in data.eval_set(data.World(), seed=4242, n_per_kind=6):
        p = tk.encode(data.prompt_text(r, s))
        c = tk.encode(s.completion + "<|im_end|>")
        seqs.append(p + c)
        masks.append([False] * (len(p) - 1) + [True] * len(c) + [False])  # position t predicts t+1
    return seqs, masks


def nano_logits_spec(tmp_path, model, seqs):
    """Files for `mimo logits` over seqs, restricted to the vocabulary columns the nano model
    writes: (the --ids argument, ("--columns", FILE), number of columns)."""
    with open(os.path.join(model, "nano_used_tokens.json")) as f:
        cols = json.load(f)["output_ids"]
    ids = tmp_path / "ids.txt"
    ids.write_text(";".join(",".join(map(str, x)) for x in seqs))
    colf = tmp_path / "cols.txt"
    colf.write_text(",".join(map(str, cols)))
    return "@" + str(ids), ("--columns", "@" + str(colf)), len(cols)


_nano_cache = {}


def nano_logits(mimo_bin, tmp_path, kv_dtype):
    """(f32-KV logits, kv_dtype logits, assistant mask) over the nano conversations, decode mode,
    all sequences batched, [positions, used output ids] each."""
    assert os.path.isdir(NANO), f"{NANO} missing: run scripts/setup.sh"
    if "f32" not in _nano_cache:
        seqs, masks = nano_conversations()
        ids, columns, ncols = nano_logits_spec(tmp_path, NANO, seqs)
        spec = (ids, *columns)
        want, _ = run_logits(mimo_bin, NANO, spec[0], tmp_path / "f32.bin", *spec[1:], "--mode", "decode")
        _nano_cache.update(spec=spec, f32=want.reshape(-1, ncols),
                           mask=np.array(sum(masks, []), dtype=bool))
    spec, want = _nano_cache["spec"], _nano_cache["f32"]
    if kv_dtype not in _nano_cache:
        got, _ = run_logits(mimo_bin, NANO, spec[0], tmp_path / "q.bin", *spec[1:],
                            "--kv-cache-dtype", kv_dtype, "--mode", "decode")
        _nano_cache[kv_dtype] = got.reshape(want.shape)
    return want, _nano_cache[kv_dtype], _nano_cache["mask"]


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
def test_quantized_kv_tolerance_on_trained_model(mimo_bin, tmp_path, kv_dtype):
    """Quantized KV on the trained nano model (random-weight fixtures are chaotic: their MoE
    routing flips under any perturbation, so they say nothing about KV precision). Reference: the
    same engine with f32 KV, which test_logits_vs_reference ties to the PyTorch reference."""
    want, got, mask = nano_logits(mimo_bin, tmp_path, kv_dtype)
    assert want.shape[0] > 4000 and mask.sum() > 500
    tol_all, tol_q99 = KV_TOL[kv_dtype]
    assert_close(got, want, tol_all, f"nano/{kv_dtype}")
    err = np.abs(got - want).max(axis=-1) / np.abs(want).max()
    q99 = np.quantile(err, 0.99)
    print(f"nano/{kv_dtype}: max {err.max():.4f}, q99 {q99:.4f}, assistant max {err[mask].max():.4f}")
    assert q99 <= tol_q99, f"nano/{kv_dtype}: 99th percentile error {q99:.3g} > {tol_q99}"


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
def test_quantized_kv_keeps_argmax(mimo_bin, tmp_path, kv_dtype):
    """The argmax is kept at every position (prompt and assistant alike) except at near-ties: where
    it moves, the f32-KV top-2 gap must be below KV_NEAR_TIE x max |logit|."""
    want, got, mask = nano_logits(mimo_bin, tmp_path, kv_dtype)
    same = got.argmax(-1) == want.argmax(-1)
    top2 = np.sort(want, axis=-1)[:, -2:]
    gap = (top2[:, 1] - top2[:, 0]) / np.abs(want).max()
    bad = ~same & ~(gap < KV_NEAR_TIE[kv_dtype])
    report = (f"nano/{kv_dtype}: argmax kept on {same.mean():.2%} of all {len(same)} positions "
              f"({same[mask].mean():.2%} of the {mask.sum()} assistant positions); relative top-2 "
              f"gaps where it moved: {np.round(np.sort(gap[~same]), 4).tolist()}")
    print(report)
    assert not bad.any(), (f"argmax moved at {int(bad.sum())} positions with a top-2 gap >= "
                           f"{KV_NEAR_TIE[kv_dtype]} (first {np.flatnonzero(bad)[:10].tolist()}); "
                           + report)


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


def test_columns_select_vocabulary_columns(mimo_bin, checkpoint, reference, tmp_path):
    ids, want, _ = reference_logits(reference, "bf16")
    cols = [7, 0, want.shape[1] - 1, 7, 31]
    got, _ = run_logits(mimo_bin, checkpoint("bf16"), ",".join(map(str, ids[:12])),
                        tmp_path / "c.bin", "--columns", ",".join(map(str, cols)))
    assert_close(got.reshape(12, len(cols)), want[:12][:, cols], REL_TOL, "--columns")
    p = subprocess.run([mimo_bin, "logits", "--model", checkpoint("bf16"), "--ids", "1,2",
                        "--out", str(tmp_path / "x.bin"), "--columns", f"3,{want.shape[1]}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--columns: id" in p.stderr and "out of range" in p.stderr


@pytest.mark.parametrize("block", [16, 64])
def test_prefix_cache_equals_recompute(mimo_bin, checkpoint, reference, tmp_path, block):
    """Sequence 2 shares a 150-token prefix with sequence 1 (more than two blocks at both block
    sizes); it must reuse exactly the full blocks inside that prefix (144 tokens at block 16, 128
    at block 64), and the hit reaches far past the 8-token window, so SWA layers must have kept
    what the window needs. The positions it computes equal the PyTorch reference."""
    variant = "bf16"
    ids, want, _ = reference_logits(reference, variant)
    ref = reference(variant)
    rng = np.random.default_rng(11)
    vocab = want.shape[1]
    shared = ids + [int(x) for x in rng.integers(0, vocab, 150 - len(ids))]
    tail1 = [int(x) for x in rng.integers(0, vocab, 20)]
    tail2 = [int(x) for x in rng.integers(0, vocab, 24)]
    assert len(shared) == 150 and tail1[0] != tail2[0]  # the sequences part at 150
    seq1, ids2 = shared + tail1, shared + tail2
    want2 = ref.forward(ids2).numpy()
    spec = ",".join(map(str, seq1)) + ";" + ",".join(map(str, ids2))
    got, err = run_logits(mimo_bin, checkpoint(variant), spec, tmp_path / "p.bin", "--prefix-cache",
                          "--block-size", str(block))
    got = got.reshape(-1, want.shape[1])[len(seq1):]
    assert "sequence 0: 0 of" in err, err  # the first sequence finds an empty cache
    hit = int(err.split("sequence 1: ")[1].split(" ")[0])
    expected_hit = len(shared) // block * block
    assert expected_hit >= 2 * block
    assert hit == expected_hit, err
    computed = ~np.isnan(got[:, 0])
    np.testing.assert_array_equal(np.flatnonzero(computed), np.arange(hit, len(ids2)))
    assert_close(got[computed], want2[computed], REL_TOL, f"prefix hit {hit}, block {block}")
    np.testing.assert_array_equal(got[computed].argmax(-1), want2[computed].argmax(-1))
