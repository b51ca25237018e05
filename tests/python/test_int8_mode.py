"""--precision int8, the int8-activation mode (issue 48, item 2), with int8 weights
(`--experts/--dense/--lm-head int8`): each token's activations are quantized per 32 columns by
Q8_0's rule (the weights' own, less its bf16 rounding of the scale) and every block's dot
product is exact in integers (AVX512_VNNI vpdpbusd,
AVX2 vpmaddubsw, NEON smull).

* Batch invariance within the mode: a token's logits are the same bits whether its sequence
  decodes alone, decodes beside others, or is prefilled in chunks (`mimo logits`), and the
  engine's requests give the same tokens and logprobs alone and batched (`mimo generate`).
* The mode's error on the trained nano models (BF16 and FP8 checkpoints), decode: against the
  same int8 weights run exact (the activations' share) and against the model as stored (the
  whole configuration): argmax agreement and the row's relative logit error (max |a - b| /
  max |b|) within the bounds measured when the mode was written (x ~1.25). The kernels' own
  definition test (tests/kernels/linear_test.cc, Int8ModeMatchesItsDefinition) checks the
  arithmetic; this checks what it does to a model.
* The int8 weights interleaved at load for the mode (kernels.h InterleaveInt8Rows, a grouped
  layout whose kernels sum in another fp32 order) and the row-major layout
  (`--no-int8-interleave`) both stay within the mode's bounds.
* The notes: on the scalar kernels (MIMO_ISA=scalar) the mode runs exact and says so; without
  int8 weights it changes nothing, and says so.
"""
import json
import os
import re
import subprocess

import numpy as np
import pytest

from test_bf16_mode import random_sequences, spec
from test_engine_batch import outputs, requests, run
from test_paged_kv_logits import REPO, nano_conversations, nano_logits_spec, run_logits

NO_INT8 = "int8 needs the avx2, avx512 or neon kernels"
INT8 = ("--experts", "int8", "--dense", "int8", "--lm-head", "int8")
MODE = ("--precision", "int8")


def skip_without_int8(stderr):
    if NO_INT8 in stderr:
        pytest.skip("scalar kernels: --precision int8 runs exact")


@pytest.mark.parametrize("variant", ["bf16", "fp8"])
def test_logits_bitwise_equal_alone_batched_and_chunked(mimo_bin, checkpoint, tmp_path, variant):
    model = checkpoint(variant)
    seqs = random_sequences(model, [70, 9, 33, 70, 17, 50, 26, 41])
    n0 = len(seqs[0])
    alone, err = run_logits(mimo_bin, model, spec(seqs[:1]), tmp_path / "alone.bin", *INT8, *MODE,
                            "--mode", "decode")
    skip_without_int8(err)
    alone = alone.reshape(n0, -1)
    exact, _ = run_logits(mimo_bin, model, spec(seqs[:1]), tmp_path / "exact.bin", *INT8,
                          "--mode", "decode")
    assert not np.array_equal(alone, exact.reshape(n0, -1)), "the int8 kernels did not run"
    runs = {"decode x8": ("--mode", "decode"), "chunks of 64": ("--chunk-size", "64"),
            "chunks of 5": ("--chunk-size", "5"), "whole prompts": ()}
    for name, flags in runs.items():
        got, _ = run_logits(mimo_bin, model, spec(seqs), tmp_path / "b.bin", *INT8, *MODE, *flags)
        got = got.reshape(sum(map(len, seqs)), -1)[:n0]
        assert np.array_equal(got.view(np.uint32), alone.view(np.uint32)), (
            f"{variant} {name}: max |diff| {np.abs(got - alone).max():.3g}")


def test_engine_outputs_equal_alone_and_batched(mimo_bin, checkpoint, tmp_path):
    """Steps mixing decode tokens and prompt chunks (budget 16) or whole prompts: each request
    gives the same tokens and bit-identical logprobs as when it runs alone."""
    model = checkpoint("bf16")
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    reqs = requests(vocab)[:6]
    alone = {}
    for r in reqs:
        p, lines = run(mimo_bin, model, [r], tmp_path, f"alone-{r['id']}", *INT8, *MODE,
                       "--max-num-seqs", "1")
        assert p.returncode == 0, p.stderr
        skip_without_int8(p.stderr)
        alone.update(outputs(lines))
    for budget in ["16", "4096"]:
        p, lines = run(mimo_bin, model, reqs, tmp_path, f"batch-{budget}", *INT8, *MODE,
                       "--max-num-batched-tokens", budget)
        assert p.returncode == 0, p.stderr
        got = outputs(lines)
        for r in reqs:
            assert got[r["id"]] == alone[r["id"]], (budget, r["id"])


# (median, 99th percentile, max) of the row's relative error and the least argmax agreement,
# widened by ~1.25 (the agreement by 0.5 point) from the worst of several realizations of the
# int8 weights, measured on a Zen 3 host (AVX2) on 2026-12-07: the rule with an fp32 scale (as the
# mode was written), the same with every scale times 1 + 2^-9, the scale rounded up to fp16,
# and the shipped rule (rounded up to bf16), each in both layouts where it can be. Their medians
# agree within 10%, but the tails swing: the 99th percentile by 0.145-0.209 and the max by
# 0.33-0.66 between realizations that the mode treats alike (a 0.2% rescale of the weights
# moves which positions sit at a routing tie), so bounds taken from one realization (0.185 and
# 0.41 for the first row, from the fp32 rule) fail the next one.
# "activations": int8 mode against the same int8 weights run exact; "all": int8 weights and mode
# against the checkpoint as stored.
BOUNDS = {
    ("mimo-v2-nano", "activations"): (0.0103, 0.246, 0.59, 0.973),
    ("mimo-v2-nano", "all"): (0.0161, 0.245, 0.59, 0.972),
    ("mimo-v2-nano-fp8", "activations"): (0.0105, 0.261, 0.83, 0.972),
    ("mimo-v2-nano-fp8", "all"): (0.0162, 0.257, 0.83, 0.973),
}


def check_error(what, bounds, got, want):
    rel = np.abs(got - want).max(axis=-1) / np.abs(want).max(axis=-1)
    same = (got.argmax(-1) == want.argmax(-1)).mean()
    print(f"{what}: relative logit error median {np.median(rel):.3g}, q99 "
          f"{np.quantile(rel, 0.99):.3g}, max {rel.max():.3g}; argmax agreement {same:.2%} of "
          f"{len(rel)} positions")
    med, q99, worst, agree = bounds
    assert np.median(rel) <= med
    assert np.quantile(rel, 0.99) <= q99
    assert rel.max() <= worst
    assert same >= agree


@pytest.mark.parametrize("name", ["mimo-v2-nano", "mimo-v2-nano-fp8"])
def test_int8_mode_error_on_trained_model(mimo_bin, tmp_path, name):
    model = os.path.join(REPO, "models", name)
    assert os.path.isdir(model), f"{model} missing: run scripts/setup.sh"
    seqs, _ = nano_conversations()
    ids, columns, ncols = nano_logits_spec(tmp_path, model, seqs)
    common = (*columns, "--mode", "decode")
    stored, _ = run_logits(mimo_bin, model, ids, tmp_path / "stored.bin", *common)
    exact, _ = run_logits(mimo_bin, model, ids, tmp_path / "exact.bin", *common, *INT8)
    mode, err = run_logits(mimo_bin, model, ids, tmp_path / "mode.bin", *common, *INT8, *MODE)
    skip_without_int8(err)
    assert "int8 weights interleaved in tiles of 4 rows for --precision int8" in err, err
    rows, err = run_logits(mimo_bin, model, ids, tmp_path / "rows.bin", *common, *INT8, *MODE,
                           "--no-int8-interleave")
    assert "interleaved" not in err, err
    stored, exact, mode, rows = (a.reshape(-1, ncols) for a in (stored, exact, mode, rows))
    assert stored.shape[0] > 4000
    check_error(f"{name} int8 mode vs int8 weights exact", BOUNDS[name, "activations"], mode,
                exact)
    check_error(f"{name} int8 weights and mode vs as stored", BOUNDS[name, "all"], mode, stored)
    # The row-major layout's kernels: the same definition in another fp32 order, within the same
    # bounds (a rounding difference flips an activation code now and then, so the two layouts'
    # logits differ by the mode's own noise, not by rounding alone).
    check_error(f"{name} int8 mode, row-major layout, vs int8 weights exact",
                BOUNDS[name, "activations"], rows, exact)


def test_notes(mimo_bin, checkpoint, tmp_path):
    model = checkpoint("bf16")
    ids = spec(random_sequences(model, [12]))
    plain, err = run_logits(mimo_bin, model, ids, tmp_path / "plain.bin", *MODE)
    skip_without_int8(err)
    assert "--precision int8 applies to int8 weights" in err, err
    exact, _ = run_logits(mimo_bin, model, ids, tmp_path / "exact.bin")
    np.testing.assert_array_equal(plain, exact)  # no int8 weights: nothing changes
    # The scalar kernels (the test oracle's ISA) have no int8 mode: exact, with a note.
    p = subprocess.run([mimo_bin, "logits", "--model", model, "--ids", ids, "--out",
                        str(tmp_path / "s.bin"), *INT8, *MODE], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "MIMO_ISA": "scalar"})
    assert p.returncode == 0, p.stderr
    assert NO_INT8 in p.stderr and "every step runs exact" in p.stderr, p.stderr
    p = subprocess.run([mimo_bin, "logits", "--model", model, "--ids", "1,2", "--out",
                        str(tmp_path / "x.bin"), "--precision", "int4"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--precision must be exact, bf16 or int8, got 'int4'" in p.stderr


def test_speculative_draft_vocab_over_the_interleaved_lm_head(mimo_bin, tmp_path):
    """MTP drafting over a draft vocabulary gathers lm_head rows (DraftHead): from an int8 lm_head
    interleaved for the mode it gathers the rows' codes and scales out of the tiles. Greedy
    speculative decoding gives the same tokens and logprobs as plain decoding in the mode (the
    verify steps are batch invariant), and the drafts are accepted (a head gathered from the
    wrong bytes proposes noise)."""
    model = os.path.join(REPO, "models", "mimo-v2-nano")
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    seqs, _ = nano_conversations()
    reqs = [{"id": f"c{i}", "prompt_ids": s[:40], "max_tokens": 24, "logprobs": 0}
            for i, s in enumerate(seqs[:3])]
    assert all(max(r["prompt_ids"]) < vocab for r in reqs)
    p, plain = run(mimo_bin, model, reqs, tmp_path, "plain", *INT8, *MODE)
    assert p.returncode == 0, p.stderr
    skip_without_int8(p.stderr)
    assert "int8 weights interleaved" in p.stderr, p.stderr
    p, spec_lines = run(mimo_bin, model, reqs, tmp_path, "spec", *INT8, *MODE, "--speculative",
                        "mtp", "--num-speculative-tokens", "2", "--speculative-draft-vocab",
                        os.path.join(model, "nano_used_tokens.json"))
    assert p.returncode == 0, p.stderr
    assert outputs(spec_lines) == outputs(plain)
    m = re.search(r"(\d+) of (\d+) draft tokens accepted", p.stderr)
    assert m and int(m.group(2)) > 0 and int(m.group(1)) >= 0.5 * int(m.group(2)), p.stderr
