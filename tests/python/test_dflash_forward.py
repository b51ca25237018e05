"""The engine's DFlash draft forward (`mimo logits --dflash`: target features captured after the
drafter's target layers, the drafter's context K/V, one non-causal block) against the float64
PyTorch reference written from shared/spec/dflash.md (scripts/dflash_reference.py), on every
sibling variant's random drafter, with the prompt longer than the drafter's window so the
symmetric window cuts the context; every RoPE reading on one variant. And the loader's refusals:
a drafter of another shape, a missing mask embedding, a mask id that disagrees."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

import dflash_reference as D
from nano_chat import NANO, nano_chat_ids
import make_tiny_model

TOL = 1e-4  # max |engine - reference| relative to the largest reference logit
VARIANTS = sorted(make_tiny_model.VARIANTS)


def prompt_ids(vocab, n=40, seed=5):
    return [int(x) for x in np.random.default_rng(seed).integers(0, min(vocab, 1000), n)]


def engine_draft(mimo_bin, model, ids, out, *extra):
    cmd = [mimo_bin, "logits", "--dflash", "--model", model, "--ids", ",".join(map(str, ids)),
           "--out", str(out), "--threads", "2", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return p


def compare(mimo_bin, model, ids, out, rope):
    p = engine_draft(mimo_bin, model, ids, out, "--dflash-rope", rope)
    assert p.returncode == 0, p.stderr
    ref = D.DFlashReference(model, rope=rope).draft_logits(ids[:-1], ids[-1]).numpy()
    got = np.fromfile(out, dtype="<f4").reshape(ref.shape)
    err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
    return err, got, ref


@pytest.mark.parametrize("variant", VARIANTS)
def test_draft_forward_matches_reference(mimo_bin, checkpoint, tmp_path, variant):
    model = checkpoint(variant)
    cfg = json.load(open(os.path.join(model, "dflash", "config.json")))
    ids = prompt_ids(cfg["vocab_size"])
    assert len(ids) - 1 > cfg["dflash_config"]["swa_window_size"]  # the window cuts the context
    err, got, ref = compare(mimo_bin, model, ids, tmp_path / "d.bin", "split")
    assert err <= TOL, f"{variant}: max relative error {err:.3g}"
    assert got.shape == (cfg["block_size"] - 1, cfg["vocab_size"])
    # The drafts are not degenerate: the rows' argmaxes are not all the same token.
    assert len(set(ref.argmax(axis=1).tolist())) > 1 or np.ptp(ref) > 1.0


@pytest.mark.parametrize("variant", ["bf16", "v2.5-pro"])
def test_batched_blocks_match_reference_and_single(mimo_bin, checkpoint, tmp_path, variant):
    """Three sequences of different lengths (one inside the window, two across it) drafted in
    ONE batched pass (the speculator's DraftBatch): every block matches its own reference, and
    equals, bit for bit, the block drafted alone."""
    model = checkpoint(variant)
    cfg = json.load(open(os.path.join(model, "config.json")))
    seqs = [prompt_ids(cfg["vocab_size"], n, seed) for n, seed in ((6, 1), (40, 2), (23, 3))]
    out = tmp_path / "batch.bin"
    p = subprocess.run([mimo_bin, "logits", "--dflash", "--model", model, "--ids",
                        ";".join(",".join(map(str, ids)) for ids in seqs), "--out", str(out),
                        "--threads", "2"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    ref = D.DFlashReference(model)
    got = np.fromfile(out, dtype="<f4").reshape(len(seqs), -1, cfg["vocab_size"])
    for i, ids in enumerate(seqs):
        want = ref.draft_logits(ids[:-1], ids[-1]).numpy()
        err = np.abs(got[i] - want).max() / max(1.0, np.abs(want).max())
        assert err <= TOL, (variant, i, err)
        alone = engine_draft(mimo_bin, model, ids, tmp_path / f"alone{i}.bin")
        assert alone.returncode == 0, alone.stderr
        assert np.array_equal(np.fromfile(tmp_path / f"alone{i}.bin", dtype="<f4"),
                              got[i].reshape(-1)), (variant, i)


def nano_greedy(mimo_bin, tmp_path, ids, n):
    src, dst = tmp_path / "g.jsonl", tmp_path / "g.out"
    src.write_text(json.dumps({"id": 0, "prompt_ids": ids, "max_tokens": n}) + "\n")
    p = subprocess.run([mimo_bin, "generate", "--model", NANO, "--requests", str(src), "--out",
                        str(dst), "--threads", "2"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(dst.read_text())["output_ids"]


def test_trained_nano_drafter_matches_reference(mimo_bin, tmp_path):
    """The default model's shipped drafter (trained by scripts/nano/train_dflash.py) on a real
    chat prompt: the engine's block against the reference, and drafts that are what the target
    itself writes next (its greedy answer: the anchor is the answer's first token, the drafts
    guess the next ones)."""
    assert os.path.isdir(os.path.join(NANO, "dflash")), "the nano drafter: run scripts/setup.sh"
    prompt = nano_chat_ids(mimo_bin, tmp_path, "What is 27 + 15?", False)
    answer = nano_greedy(mimo_bin, tmp_path, prompt, 8)
    err, got, ref = compare(mimo_bin, NANO, prompt + answer[:1], tmp_path / "d.bin", "split")
    assert err <= TOL, f"max relative error {err:.3g}"
    assert (got.argmax(1) == ref.argmax(1)).all()
    assert got.argmax(1)[:3].tolist() == answer[1:4], (got.argmax(1).tolist(), answer)


@pytest.mark.parametrize("rope", ["split", "backbone", "draft"])
def test_every_rope_reading_matches_reference(mimo_bin, checkpoint, tmp_path, rope):
    model = checkpoint("fp8")
    cfg = json.load(open(os.path.join(model, "dflash", "config.json")))
    err, got, _ = compare(mimo_bin, model, prompt_ids(cfg["vocab_size"]), tmp_path / "d.bin", rope)
    assert err <= TOL, f"{rope}: max relative error {err:.3g}"
    # The readings differ, so the comparison above can tell them apart.
    other = "draft" if rope != "draft" else "split"
    p = engine_draft(mimo_bin, model, prompt_ids(cfg["vocab_size"]), tmp_path / "o.bin",
                     "--dflash-rope", other)
    assert p.returncode == 0, p.stderr
    assert np.abs(np.fromfile(tmp_path / "o.bin", dtype="<f4").reshape(got.shape) - got).max() > 1e-3


def copy_drafter(model, tmp_path):
    d = tmp_path / "dflash"
    shutil.copytree(os.path.join(model, "dflash"), d)
    return d


def test_refuses_a_drafter_of_another_target(mimo_bin, checkpoint, tmp_path):
    model = checkpoint("bf16")
    d = copy_drafter(model, tmp_path)
    cfg = json.load(open(d / "config.json"))
    ids = prompt_ids(cfg["vocab_size"], 12)
    bad = dict(cfg, hidden_size=cfg["hidden_size"] * 2)
    json.dump(bad, open(d / "config.json", "w"))
    p = engine_draft(mimo_bin, model, ids, tmp_path / "x.bin", "--speculative-draft-model", str(d))
    assert p.returncode != 0 and "hidden_size" in p.stderr, p.stderr
    layers = json.load(open(os.path.join(model, "config.json")))["num_hidden_layers"]
    bad = dict(cfg, dflash_config=dict(cfg["dflash_config"], target_layer_ids=[0, layers]))
    json.dump(bad, open(d / "config.json", "w"))
    p = engine_draft(mimo_bin, model, ids, tmp_path / "x.bin", "--speculative-draft-model", str(d))
    assert p.returncode != 0 and f"reads target layer {layers}" in p.stderr, p.stderr


def test_refuses_a_missing_or_mismatched_mask_embedding(mimo_bin, checkpoint, tmp_path):
    model = checkpoint("bf16")
    d = copy_drafter(model, tmp_path)
    cfg = json.load(open(d / "config.json"))
    ids = prompt_ids(cfg["vocab_size"], 12)
    saved = torch.load(str(d / "mask_embedding.pt"), map_location="cpu")
    if isinstance(saved, dict) and "mask_token_id" in saved:
        bad = dict(cfg, dflash_config=dict(cfg["dflash_config"],
                                           mask_token_id=cfg["dflash_config"]["mask_token_id"] + 1))
        json.dump(bad, open(d / "config.json", "w"))
        p = engine_draft(mimo_bin, model, ids, tmp_path / "x.bin", "--speculative-draft-model",
                         str(d))
        assert p.returncode != 0 and "mask_token_id" in p.stderr, p.stderr
        json.dump(cfg, open(d / "config.json", "w"))
    os.remove(d / "mask_embedding.pt")
    p = engine_draft(mimo_bin, model, ids, tmp_path / "x.bin", "--speculative-draft-model", str(d))
    assert p.returncode != 0 and "mask_embedding.pt" in p.stderr, p.stderr
