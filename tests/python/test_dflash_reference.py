"""Self-checks of the DFlash draft reference (scripts/dflash_reference.py) and of the random
drafters make_tiny_model.py writes into every test checkpoint (<ckpt>/dflash/).

Each choice of the reference (shared/spec/dflash.md section 3) is checked against an expectation
computed differently: a deliberately naive loop implementation of the whole draft forward (own
safetensors reading, per-element RoPE, per-query per-head attention with python floats), and
perturbations that must (or must not) reach the output: the mask sidecar vs the vocabulary row,
the symmetric window's edge at both ends of the block, non-causality inside the block, the three
RoPE theta variants, and the feature capture point (after the layer, before the final norm).
"""
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

import dflash_reference as D
import make_tiny_model as M
import mimo_reference as R
from conftest import REPO, VARIANTS

P = 40  # context length: crosses every drafter's window (10..16)


def context_ids(vocab, n=P, salt=0):
    return [(7 * i + 3 + salt) % vocab for i in range(n)]


@pytest.fixture(scope="module")
def dflash(checkpoint, reference):
    refs = {}

    def get(variant: str) -> D.DFlashReference:
        if variant not in refs:
            refs[variant] = D.DFlashReference(checkpoint(variant), target=reference(variant))
        return refs[variant]

    return get


@pytest.fixture(scope="module")
def feats(dflash):
    cache = {}

    def get(variant: str):
        if variant not in cache:
            ref = dflash(variant)
            cache[variant] = ref.features(context_ids(ref.target.cfg.vocab))
        return cache[variant]

    return get


# ----------------------------------------------------------------------------------------------
# Independent reading of the drafter files.
def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def read_drafter(d):
    """name (as stored) -> float64 numpy array, via the index; plus name -> (dtype, shape)."""
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        wmap = json.load(f)["weight_map"]
    arrays, meta = {}, {}
    for fn in sorted(set(wmap.values())):
        header, base = read_header(os.path.join(d, fn))
        blob = open(os.path.join(d, fn), "rb").read()
        for name, info in header.items():
            if name == "__metadata__":
                continue
            assert wmap.get(name) == fn, f"{name} in {fn} but the index says {wmap.get(name)}"
            b, e = info["data_offsets"]
            meta[name] = (info["dtype"], info["shape"])
            u = np.frombuffer(blob[base + b:base + e], dtype="<u2").astype(np.uint32)
            arrays[name] = (u << 16).view(np.float32).astype(np.float64).reshape(info["shape"])
    assert set(arrays) == set(wmap)
    return arrays, meta


def expected_geometry(cfg):
    H, I, nh, nkv, hd = (cfg[k] for k in ("hidden_size", "intermediate_size",
                                          "num_attention_heads", "num_key_value_heads",
                                          "head_dim"))
    n = len(cfg["dflash_config"]["target_layer_ids"])
    out = {"fc.weight": [H, n * H], "hidden_norm.weight": [H], "norm.weight": [H]}
    for i in range(cfg["num_hidden_layers"]):
        a, m = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        out.update({f"layers.{i}.input_layernorm.weight": [H],
                    f"layers.{i}.post_attention_layernorm.weight": [H],
                    a + "q_proj.weight": [nh * hd, H], a + "k_proj.weight": [nkv * hd, H],
                    a + "v_proj.weight": [nkv * hd, H], a + "o_proj.weight": [H, nh * hd],
                    a + "q_norm.weight": [hd], a + "k_norm.weight": [hd],
                    a + "attention_sink_bias": [nh], m + "gate_proj.weight": [I, H],
                    m + "up_proj.weight": [I, H], m + "down_proj.weight": [H, I]})
    return out


def drafter_prefix(names):
    return "model." if all(n.startswith("model.") for n in names) else ""


# ----------------------------------------------------------------------------------------------
def test_every_variant_has_a_drafter_entry():
    # Every test variant, and of the others only the Flash-shaped benchmark checkpoint.
    assert set(M.DFLASH) == set(M.VARIANTS) | {"bench-flash-fp8"}
    assert not set(M.DFLASH) & (set(M.SERVER_VARIANTS) | set(M.FIXTURE_VARIANTS))


@pytest.mark.parametrize("variant", VARIANTS)
def test_drafter_files(checkpoint, variant):
    ckpt = checkpoint(variant)
    d = os.path.join(ckpt, "dflash")
    with open(os.path.join(ckpt, "config.json")) as f:
        tcfg = json.load(f)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    dc = cfg["dflash_config"]
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["hidden_size"] == tcfg["hidden_size"]
    assert cfg["vocab_size"] == tcfg["vocab_size"]
    assert cfg["num_target_layers"] == tcfg["num_hidden_layers"]
    ids = dc["target_layer_ids"]
    assert 2 <= len(ids) <= 3 and ids == sorted(set(ids)) and ids[0] >= 0
    assert ids[-1] == tcfg["num_hidden_layers"] - 1
    assert 0 <= dc["mask_token_id"] < tcfg["vocab_size"]
    assert cfg["block_size"] == dc["block_size"] == 8
    assert dc["use_swa"] and cfg["sliding_window"] == dc["swa_window_size"]
    assert cfg["sliding_window"] < P - 8  # the tests' contexts cross the window
    assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
    rot = int(cfg["head_dim"] * cfg["partial_rotary_factor"])
    assert cfg["head_dim"] % 2 == 0 and rot % 2 == 0 and cfg["head_dim"] >= 2 * rot
    assert cfg["rope_theta"] == 10000 and dc["backbone_rotary_base"] == 5000000
    assert dc["attention_value_scale"] == 0.612 and dc["attention_sink_bias"] is True
    assert cfg["tie_word_embeddings"] is False and cfg["hidden_act"] == "silu"

    arrays, meta = read_drafter(d)
    prefix = drafter_prefix(meta)
    want = {prefix + n: s for n, s in expected_geometry(cfg).items()}
    assert set(meta) == set(want)
    for n, (dtype, shape) in meta.items():
        assert dtype == "BF16" and shape == want[n], n
        assert np.isfinite(arrays[n]).all()

    obj = torch.load(os.path.join(d, "mask_embedding.pt"), map_location="cpu")
    emb = obj["embedding"] if isinstance(obj, dict) else obj
    if isinstance(obj, dict):
        assert obj["mask_token_id"] == dc["mask_token_id"]
    assert emb.dtype == torch.bfloat16 and list(emb.shape) == [cfg["hidden_size"]]
    row = R.Weights(ckpt, R.parse_config(tcfg)).plain("model.embed_tokens.weight")[
        dc["mask_token_id"]]
    ratio = float(emb.double().norm() / row.norm())
    assert ratio < 0.5, f"mask embedding norm {ratio:.2f}x the vocabulary row's"


def test_spellings_covered(checkpoint):
    """One drafter has `model.`-prefixed names and one a bare-tensor mask sidecar; the others not;
    one is sharded."""
    prefixed, bare, sharded = [], [], []
    for v in VARIANTS:
        d = os.path.join(checkpoint(v), "dflash")
        with open(os.path.join(d, "model.safetensors.index.json")) as f:
            wmap = json.load(f)["weight_map"]
        if drafter_prefix(wmap):
            prefixed.append(v)
        if not isinstance(torch.load(os.path.join(d, "mask_embedding.pt")), dict):
            bare.append(v)
        if len(set(wmap.values())) > 1:
            sharded.append(v)
    assert len(prefixed) == 1 and len(bare) == 1 and len(sharded) == 1
    assert len(VARIANTS) > 2


def test_no_drafter_outside_variants(checkpoint):
    assert not os.path.exists(os.path.join(checkpoint("ctest-ref"), "dflash"))


# ----------------------------------------------------------------------------------------------
# The naive implementation.
def naive_rms(v, w, eps):
    n = v.shape[-1]
    return v / math.sqrt(float((v * v).sum()) / n + eps) * w


def naive_rope(v, pos, rot, theta):
    out = v.clone()
    half = rot // 2
    for i in range(half):
        a = pos * theta ** (-2.0 * i / rot)
        c, s = math.cos(a), math.sin(a)
        out[i] = v[i] * c - v[i + half] * s
        out[i + half] = v[i + half] * c + v[i] * s
    return out


def naive_draft(ckpt, target, ctx_ids, anchor, rope, window=None):
    d = os.path.join(ckpt, "dflash")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    dc = cfg["dflash_config"]
    arrays, _ = read_drafter(d)
    w = {n[len("model."):] if n.startswith("model.") else n: torch.from_numpy(a)
         for n, a in arrays.items()}
    obj = torch.load(os.path.join(d, "mask_embedding.pt"), map_location="cpu")
    mask = (obj["embedding"] if isinstance(obj, dict) else obj).double()
    H, nh, nkv, hd = (cfg[k] for k in ("hidden_size", "num_attention_heads",
                                       "num_key_value_heads", "head_dim"))
    rot, eps, B = int(hd * cfg["partial_rotary_factor"]), cfg["rms_norm_eps"], dc["block_size"]
    W = dc["swa_window_size"] if window is None else window
    vs = dc["attention_value_scale"]
    th_ctx, th_blk = {"split": (dc["backbone_rotary_base"], cfg["rope_theta"]),
                      "backbone": (dc["backbone_rotary_base"],) * 2,
                      "draft": (cfg["rope_theta"],) * 2}[rope]
    # features: a target truncated after layer i, hidden states before the final norm
    caps = []
    for i in dc["target_layer_ids"]:
        t = target.with_options(R.Options())
        t.cfg.n_layers = i + 1
        caps.append(t.hidden_states(ctx_ids))
    F = torch.cat(caps, dim=1)
    Pn = len(ctx_ids)
    c = torch.stack([naive_rms(F[t] @ w["fc.weight"].T, w["hidden_norm.weight"], eps)
                     for t in range(Pn)])
    x = torch.stack([target.embed([anchor])[0]] + [mask] * (B - 1))
    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."
        g = lambda n: w[p + n]  # noqa: E731
        keys = []  # (position, [nkv] k vectors, [nkv] v vectors)
        for t in range(Pn):
            kk = c[t] @ g("self_attn.k_proj.weight").T
            vv = c[t] @ g("self_attn.v_proj.weight").T
            keys.append((t, [naive_rope(naive_rms(kk[j * hd:(j + 1) * hd],
                                                  g("self_attn.k_norm.weight"), eps), t, rot, th_ctx)
                             for j in range(nkv)],
                         [vv[j * hd:(j + 1) * hd] * vs for j in range(nkv)]))
        hs, qs = [], []
        for r in range(B):
            h = naive_rms(x[r], g("input_layernorm.weight"), eps)
            hs.append(h)
            qq, kk, vv = (h @ g(f"self_attn.{n}_proj.weight").T for n in "qkv")
            qs.append([naive_rope(naive_rms(qq[j * hd:(j + 1) * hd], g("self_attn.q_norm.weight"),
                                            eps), Pn + r, rot, th_blk) for j in range(nh)])
            keys.append((Pn + r, [naive_rope(naive_rms(kk[j * hd:(j + 1) * hd],
                                                       g("self_attn.k_norm.weight"), eps),
                                             Pn + r, rot, th_blk) for j in range(nkv)],
                         [vv[j * hd:(j + 1) * hd] * vs for j in range(nkv)]))
        sinks = g("self_attn.attention_sink_bias")
        rows = []
        for r in range(B):
            pq = Pn + r
            heads = []
            for j in range(nh):
                kvh = j // (nh // nkv)
                vis = [(float(qs[r][j] @ kvec[kvh]) / math.sqrt(hd), vvec[kvh])
                       for pk, kvec, vvec in keys if abs(pq - pk) <= W - 1]
                m = max([s for s, _ in vis] + [float(sinks[j])])
                den = sum(math.exp(s - m) for s, _ in vis) + math.exp(float(sinks[j]) - m)
                heads.append(sum(math.exp(s - m) / den * vv for s, vv in vis))
            rows.append(x[r] + torch.cat(heads) @ g("self_attn.o_proj.weight").T)
        x = torch.stack(rows)
        out = []
        for r in range(B):
            h = naive_rms(x[r], g("post_attention_layernorm.weight"), eps)
            a = h @ g("mlp.gate_proj.weight").T
            u = h @ g("mlp.up_proj.weight").T
            out.append(x[r] + (a / (1 + torch.exp(-a)) * u) @ g("mlp.down_proj.weight").T)
        x = torch.stack(out)
    y = torch.stack([naive_rms(x[r], w["norm.weight"], eps) for r in range(1, B)])
    return target.lm_head(y)


@pytest.mark.parametrize("variant", ["bf16", "fp8", "v2.5-pro"])
@pytest.mark.parametrize("rope", D.ROPE_VARIANTS)
def test_matches_naive_loops(checkpoint, reference, dflash, variant, rope):
    ref = dflash(variant).with_options(rope=rope)
    ids = context_ids(ref.target.cfg.vocab)
    got = ref.draft_logits(ids, 11)
    want = naive_draft(checkpoint(variant), reference(variant), ids, 11, rope)
    assert got.shape == (ref.cfg.block - 1, ref.target.cfg.vocab)
    assert (got - want).abs().max() < 1e-9 * max(1.0, float(want.abs().max()))


def test_window_inside_block_matches_naive(checkpoint, reference, dflash):
    """A window narrower than the block (no shipped drafter has one): the symmetric rule holds
    between block rows too."""
    import dataclasses
    ref = dflash("bf16").with_options()
    ref.cfg = dataclasses.replace(ref.cfg, window=5)
    ids = context_ids(ref.target.cfg.vocab, n=12)
    got = ref.draft_logits(ids, 11)
    want = naive_draft(checkpoint("bf16"), reference("bf16"), ids, 11, "split", window=5)
    assert (got - want).abs().max() < 1e-9 * float(want.abs().max())
    assert (got - dflash("bf16").draft_logits(ids, 11)).abs().max() > 1e-3


# ----------------------------------------------------------------------------------------------
def test_mask_embedding_not_vocab_row(checkpoint, dflash, feats):
    ref = dflash("bf16")
    d = os.path.join(checkpoint("bf16"), "dflash")
    mask = torch.load(os.path.join(d, "mask_embedding.pt"))["embedding"].double()
    x = ref.block_input(11)
    assert torch.equal(x[1:], mask[None].expand(ref.cfg.block - 1, -1))
    assert torch.equal(x[0], ref.target.embed([11])[0])
    vocab = ref.with_options(opts=D.DraftOptions(mask_from_vocab=True))
    assert torch.equal(vocab.block_input(11)[1:, :], ref.target.embed([ref.cfg.mask_id]).expand(
        ref.cfg.block - 1, -1))
    F = feats("bf16")
    a, b = ref.draft_from_features(F, 11)["logits"], vocab.draft_from_features(F, 11)["logits"]
    assert (a - b).abs().max() > 1e-2


def test_symmetric_window_edges(dflash, feats):
    """Context row P-W is W positions before the anchor: invisible to every block row, so the
    output is bit-identical when it changes. Row P-W+1 is seen by the anchor row (distance W-1)
    but not by the last block row (distance W+B-2) in layer 0."""
    for variant in ("bf16", "fp8", "tied"):
        ref = dflash(variant)
        W, B = ref.cfg.window, ref.cfg.block
        F = feats(variant)
        base = ref.draft_from_features(F, 11)
        far = F.clone()
        far[P - W] += 3.0
        out = ref.draft_from_features(far, 11)
        assert torch.equal(out["logits"], base["logits"]), variant
        for r in range(P - W + 1):  # everything that far back at once, too
            far[r] = -F[r]
        assert torch.equal(ref.draft_from_features(far, 11)["logits"], base["logits"])
        near = F.clone()
        near[P - W + 1] += 3.0
        out = ref.draft_from_features(near, 11)
        l0, b0 = out["layers"][0], base["layers"][0]
        assert (l0[0] - b0[0]).abs().max() > 1e-4, variant
        assert torch.equal(l0[B - 1], b0[B - 1]), variant
        assert (out["logits"] - base["logits"]).abs().max() > 1e-4, variant


def test_block_is_non_causal(dflash, feats):
    """Changing the LAST block row's input changes the anchor row's layer-0 output; under a causal
    mask (the deviation) it cannot, which shows the perturbation test itself works."""
    ref = dflash("bf16")
    causal = ref.with_options(opts=D.DraftOptions(causal=True))
    F = feats("bf16")
    x = ref.block_input(11)
    x2 = x.clone()
    x2[-1] = ref.target.embed([99])[0]
    for r, noncausal in ((ref, True), (causal, False)):
        a = r.draft_from_features(F, x=x)["layers"][0]
        b = r.draft_from_features(F, x=x2)["layers"][0]
        assert ((a[0] - b[0]).abs().max() > 1e-4) == noncausal
        assert (a[-1] - b[-1]).abs().max() > 1e-4
    assert (ref.draft_from_features(F, 11)["logits"] -
            causal.draft_from_features(F, 11)["logits"]).abs().max() > 1e-3


def test_sinks_matter(dflash, feats):
    ref = dflash("fp8")
    no = ref.with_options(opts=D.DraftOptions(use_sinks=False))
    F = feats("fp8")
    assert (ref.draft_from_features(F, 11)["logits"] -
            no.draft_from_features(F, 11)["logits"]).abs().max() > 1e-3


def test_rope_variants(dflash, feats):
    """The three variants differ. With one theta everywhere (backbone, draft) the logits depend
    only on relative positions, so shifting context and block together changes nothing; the
    split variant (two thetas) is not shift-invariant."""
    F = feats("v2.5-pro")
    base = dflash("v2.5-pro")
    out = {r: base.with_options(rope=r) for r in D.ROPE_VARIANTS}
    lg = {r: o.draft_from_features(F, 11)["logits"] for r, o in out.items()}
    for a in D.ROPE_VARIANTS:
        for b in D.ROPE_VARIANTS:
            if a < b:
                assert (lg[a] - lg[b]).abs().max() > 1e-2, (a, b)
    for r in D.ROPE_VARIANTS:
        shifted = out[r].draft_from_features(F, 11, pos0=100)["logits"]
        diff = float((shifted - lg[r]).abs().max())
        if r == "split":
            assert diff > 1e-3
        else:
            assert diff < 1e-9, (r, diff)
    assert base.thetas() == (5e6, 1e4)


def test_features_capture_after_layer_pre_norm(dflash, reference):
    ref = dflash("fp8")
    target = reference("fp8")
    H = ref.cfg.hidden
    ids = context_ids(target.cfg.vocab, n=17)
    F = ref.features(ids)
    assert F.shape == (17, len(ref.cfg.layer_ids) * H)
    assert torch.equal(F[:, -H:], target.hidden_states(ids))  # last layer, every row, pre-norm
    for k, i in enumerate(ref.cfg.layer_ids):
        t = target.with_options(R.Options())
        t.cfg.n_layers = i + 1
        assert torch.equal(F[:, k * H:(k + 1) * H], t.hidden_states(ids)), i
    # the final norm would have been a different thing
    normed = R.rms_norm(F[:, -H:], target.w.plain("model.norm.weight"), target.cfg.eps)
    assert (normed - F[:, -H:]).abs().max() > 1e-2


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_drafter_runs(dflash, variant):
    ref = dflash(variant)
    lg = ref.draft_logits(context_ids(ref.target.cfg.vocab, n=20), 5)
    assert lg.shape == (ref.cfg.block - 1, ref.target.cfg.vocab)
    assert torch.isfinite(lg).all()
    assert lg.std() > 0.5


def test_sharded_drafter_is_the_same_model(dflash):
    ids = context_ids(512, n=20)
    assert torch.equal(dflash("bf16").draft_logits(ids, 5),
                       dflash("bf16-sharded").draft_logits(ids, 5))


def test_cli(checkpoint, dflash, tmp_path):
    ref = dflash("v2.5-pro").with_options(rope="backbone")
    ids = context_ids(ref.target.cfg.vocab, n=25)
    out, fo = tmp_path / "l.bin", tmp_path / "f.bin"
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "dflash_reference.py"),
                    "--model", checkpoint("v2.5-pro"), "--ids", ",".join(map(str, ids + [9])),
                    "--rope", "backbone", "--out", str(out), "--features-out", str(fo)],
                   check=True, capture_output=True)
    got = np.fromfile(out, dtype="<f4").reshape(ref.cfg.block - 1, ref.target.cfg.vocab)
    assert np.array_equal(got, ref.draft_logits(ids, 9).numpy().astype(np.float32))
    F = np.fromfile(fo, dtype="<f4").reshape(25, -1)
    assert np.array_equal(F, ref.features(ids).numpy().astype(np.float32))
