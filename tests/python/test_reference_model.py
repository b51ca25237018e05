"""Self-tests of the reference at layer and model level, and of the generated checkpoints: every
trap of the spec must move the logits far beyond the C++ comparison's tolerance."""
import cmath
import math

import numpy as np
import pytest
import torch

import mimo_reference as R
from test_reference_ops import brute_attention, brute_route

IDS = [int(x) for x in np.random.default_rng(11).integers(0, 512, 30)]


def _np(t):
    return t.numpy()


def brute_layer(ref, l, x, pos):
    """One decoder layer with per-token / per-head loops, written straight from spec section 2."""
    c, w = ref.cfg, ref.w
    g = c.layers[l]
    p = f"model.layers.{l}."
    T = x.shape[0]

    def norm(v, name):
        wt = _np(w.plain(name))
        return np.stack([r / math.sqrt(np.mean(r * r) + c.eps) * wt for r in v])

    def rope(vec, p_):
        out = vec.copy()
        half = g.rot // 2
        for i in range(half):
            z = complex(vec[i], vec[i + half]) * cmath.exp(1j * p_ * g.theta ** (-2.0 * i / g.rot))
            out[i], out[i + half] = z.real, z.imag
        return out

    wq, wk, wv = (_np(t) for t in w.attention_qkv(p + "self_attn.", g))
    h = norm(x, p + "input_layernorm.weight")
    q = np.zeros((T, g.nh, g.dqk))
    k = np.zeros((T, g.nkv, g.dqk))
    v = np.zeros((T, g.nkv, g.dv))
    for t in range(T):
        qt, kt = (wq @ h[t]).reshape(g.nh, g.dqk), (wk @ h[t]).reshape(g.nkv, g.dqk)
        q[t] = [rope(qt[j], int(pos[t])) for j in range(g.nh)]
        k[t] = [rope(kt[j], int(pos[t])) for j in range(g.nkv)]
        v[t] = (wv @ h[t]).reshape(g.nkv, g.dv) * c.value_scale
    sinks = _np(w.plain(p + "self_attn.attention_sink_bias")) if g.sinks else None
    o = brute_attention(q, k, v, g.window, sinks, g.dqk).reshape(T, -1)
    x = x + o @ _np(w.plain(p + "self_attn.o_proj.weight")).T
    h = norm(x, p + "post_attention_layernorm.weight")

    def mlp(pre, vec):
        gg = _np(w.plain(pre + "gate_proj.weight")) @ vec
        uu = _np(w.plain(pre + "up_proj.weight")) @ vec
        return _np(w.plain(pre + "down_proj.weight")) @ (gg / (1 + np.exp(-gg)) * uu)

    out = np.zeros_like(x)
    for t in range(T):
        if c.moe_layers[l]:
            gw = _np(w.plain(p + "mlp.gate.weight"))
            bias = _np(w.plain(p + "mlp.gate.e_score_correction_bias"))
            scores = [1 / (1 + math.exp(-float(gw[e] @ h[t]))) for e in range(c.n_experts)]
            sel, wts = brute_route(scores, bias, c.n_group, c.topk_group, c.top_k,
                                   c.norm_topk_prob, c.routed_scaling)
            out[t] = sum(we * mlp(f"{p}mlp.experts.{e}.", h[t]) for e, we in zip(sel, wts))
        else:
            out[t] = mlp(p + "mlp.", h[t])
    return x + out


@pytest.mark.parametrize("variant,layer", [
    ("bf16", 0),  # full attention, dense MLP
    ("bf16", 1),  # SWA + sinks, MoE with group limit
    ("tied", 1),  # full attention with sinks, MoE without renormalisation
    ("fp8-fused", 2),  # fused-qkv FP8, SWA
])
def test_one_layer_matches_brute_force(reference, variant, layer):
    ref = reference(variant)
    T = 14  # crosses the 8-key window
    rng = np.random.default_rng(12)
    x = rng.standard_normal((T, ref.cfg.hidden))
    pos = torch.arange(T)
    got = _np(ref.decoder_layer(layer, torch.from_numpy(x), pos))
    want = brute_layer(ref, layer, x, pos)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_model_is_causal_prefix_logits_equal_full_logits(reference):
    ref = reference("bf16")
    full = ref.forward(IDS)
    for t in (1, 7, 8, 9, 20):
        part = ref.forward(IDS[:t])
        torch.testing.assert_close(part, full[:t], rtol=0, atol=1e-10)


def test_sharded_checkpoint_is_the_same_model(reference):
    a, b = reference("bf16").forward(IDS), reference("bf16-sharded").forward(IDS)
    assert torch.equal(a, b)


@pytest.mark.parametrize("variant", ["bf16", "fp8", "tied", "f32"])
@pytest.mark.parametrize("trap", [
    dict(window_extra=1),  # SGLang's 129-key window
    dict(value_scale=1.0),  # attention_value_scale forgotten
    dict(use_sinks=False),
    dict(use_bias_for_selection=False),
    dict(rope_full_dim_table=True),  # HF-REMOTE rotary table over all head dims
    dict(swap_thetas=True),
])
def test_every_trap_moves_logits_far_beyond_tolerance(checkpoint, reference, variant, trap):
    good = reference(variant).forward(IDS)
    bad = reference(variant).with_options(R.Options(**trap)).forward(IDS)
    tol = 1e-4 * good.abs().max()
    assert (bad - good).abs().max() > 50 * tol, trap


@pytest.mark.parametrize("variant,field,value", [
    ("bf16", "n_group", 1),  # the group limit matters
    ("tied", "norm_topk_prob", True),
    ("f32", "routed_scaling", 1.0),
    ("f32", "eps", 1.0),  # a wrong epsilon is visible
])
def test_config_quirks_matter(checkpoint, reference, variant, field, value):
    good = reference(variant).forward(IDS)
    ref = reference(variant).with_options(R.Options())
    setattr(ref.cfg, field, value)
    bad = ref.forward(IDS)
    assert (bad - good).abs().max() > 50e-4 * good.abs().max()


def test_config_parsing_quirks(reference):
    f = reference("fp8-fused").cfg
    assert f.layers[0].rot == 32 and f.layers[0].theta == 1e7 and f.layers[1].theta == 1e4
    o = reference("omni").cfg  # rope_theta / partial_rotary_factor only inside rope_parameters
    assert "rope_theta" not in o.raw and o.layers[0].theta == 5e6 and o.layers[0].rot == 32
    b = reference("bf16").cfg
    assert b.raw["routed_scaling_factor"] is None and b.routed_scaling == 1.0
    assert b.layers[0].rot == 64 and b.layers[0].nkv == 2 and b.layers[1].nkv == 4
    assert [g.sliding for g in b.layers] == [False, True, True, False, True, True]
    assert [g.sinks for g in b.layers] == [False, True, True, False, True, True]
    t = reference("tied").cfg
    assert t.tie and t.layers[1].sinks and not t.layers[1].sliding


def test_mtp_layer_sees_only_its_window(reference):
    ref = reference("bf16")
    assert ref.num_mtp_layers() == 1
    T, W = 20, ref.cfg.swa.window
    hprev = ref.hidden_states(IDS[:T])
    nxt = IDS[1:T + 1]
    logits, block = ref.mtp_forward(0, hprev, nxt, list(range(T)))
    assert logits.shape == (T, ref.cfg.vocab) and block.shape == (T, ref.cfg.hidden)
    s = T - W  # the last row sees exactly rows s..T-1
    tail, _ = ref.mtp_forward(0, hprev[s:], nxt[s:], list(range(s, T)))
    torch.testing.assert_close(tail[-1], logits[-1], rtol=0, atol=1e-10)
    longer, _ = ref.mtp_forward(0, hprev[s - 1:], nxt[s - 1:], list(range(s - 1, T)))
    torch.testing.assert_close(longer[-1], logits[-1], rtol=0, atol=1e-10)
    # ... while one more key (a 9-key window) would change it.
    wider, _ = ref.with_options(R.Options(window_extra=1)).mtp_forward(0, hprev, nxt, list(range(T)))
    assert (wider[-1] - logits[-1]).abs().max() > 1e-3


def test_mtp_embedding_half_comes_first(reference):
    """Swapping the two halves of eh_proj's input must change the result (the order is tested
    against a direct composition of the spec's steps)."""
    ref = reference("bf16")
    c, w = ref.cfg, ref.w
    T = 5
    hprev = ref.hidden_states(IDS[:T])
    nxt = IDS[1:T + 1]
    _, block = ref.mtp_forward(0, hprev, nxt, list(range(T)))
    p = "model.mtp.layers.0."
    e = R.rms_norm(ref.embed(nxt), w.plain(p + "enorm.weight"), c.eps)
    hh = R.rms_norm(hprev, w.plain(p + "hnorm.weight"), c.eps)
    u = torch.cat([e, hh], -1) @ w.plain(p + "eh_proj.weight").T
    g = R.LayerGeom(**{**c.swa.__dict__, "sinks": True})
    h = R.rms_norm(u, w.plain(p + "input_layernorm.weight"), c.eps)
    x = u + ref.attn_block(p + "self_attn.", g, h, torch.arange(T))
    x = x + ref.dense(p + "mlp.", R.rms_norm(x, w.plain(p + "pre_mlp_layernorm.weight"), c.eps))
    torch.testing.assert_close(block, x, rtol=0, atol=1e-10)


@pytest.mark.parametrize("variant,n_mtp", [("fp8-fused", 3), ("fp8", 1), ("tied", 0), ("omni", 1)])
def test_every_mtp_layer_runs(reference, variant, n_mtp):
    ref = reference(variant)
    assert ref.num_mtp_layers() == n_mtp
    hprev = ref.hidden_states(IDS[:10])
    for i in range(n_mtp):
        logits, _ = ref.mtp_forward(i, hprev, IDS[1:11], list(range(10)))
        assert logits.shape == (10, ref.cfg.vocab) and torch.isfinite(logits).all()


def test_dump_reference_logits_writes_f32_rows(checkpoint, reference, tmp_path):
    import dump_reference_logits
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("5, 6\n7 8")
    out = tmp_path / "ref.bin"
    assert dump_reference_logits.main(["--model", checkpoint("omni"), "--ids", f"@{ids_file}",
                                       "--out", str(out)]) == 0
    got = np.fromfile(out, dtype="<f4").reshape(4, -1)
    want = reference("omni").forward([5, 6, 7, 8]).numpy().astype(np.float32)
    np.testing.assert_array_equal(got, want)
