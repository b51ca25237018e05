"""Self-tests of the reference's building blocks against direct, loop-level formulas of the spec."""
import cmath
import math

import numpy as np
import pytest
import torch

import mimo_reference as R


def _rng(seed=0):
    return np.random.default_rng(seed)


def test_rms_norm_matches_formula():
    rng = _rng(1)
    x = rng.standard_normal((5, 37)) * 3
    w = rng.standard_normal(37)
    eps = 1e-5
    got = R.rms_norm(torch.from_numpy(x), torch.from_numpy(w), eps).numpy()
    for t in range(5):
        ms = sum(v * v for v in x[t]) / 37
        want = [x[t, i] / math.sqrt(ms + eps) * w[i] for i in range(37)]
        np.testing.assert_allclose(got[t], want, rtol=1e-12, atol=1e-12)


def test_rms_norm_has_no_plus_one_offset():
    x = torch.ones(1, 4, dtype=torch.float64)
    got = R.rms_norm(x, torch.zeros(4, dtype=torch.float64), 1e-5)
    assert torch.all(got == 0)


@pytest.mark.parametrize("dqk,rot,theta", [(192, 64, 1e4), (96, 32, 5e6), (64, 64, 1e6)])
def test_partial_rope_is_a_complex_rotation_of_pairs_i_and_i_plus_half(dqk, rot, theta):
    rng = _rng(2)
    T, heads = 7, 3
    x = rng.standard_normal((T, heads, dqk))
    pos = torch.tensor([0, 1, 2, 5, 17, 40, 1000])
    got = R.rope_neox(torch.from_numpy(x), pos, rot, theta).numpy()
    half = rot // 2
    for t in range(T):
        p = int(pos[t])
        for h in range(heads):
            for i in range(half):
                z = complex(x[t, h, i], x[t, h, i + half])
                zr = z * cmath.exp(1j * p * theta ** (-2.0 * i / rot))
                assert got[t, h, i] == pytest.approx(zr.real, abs=1e-9)
                assert got[t, h, i + half] == pytest.approx(zr.imag, abs=1e-9)
            np.testing.assert_array_equal(got[t, h, rot:], x[t, h, rot:])  # pass-through dims


def brute_attention(q, k, v, window, sinks, dqk):
    """Per query / per head loop: causal, window keys incl. the current, sink in the denominator."""
    T, nh, _ = q.shape
    nkv, dv = k.shape[1], v.shape[2]
    out = np.zeros((T, nh, dv))
    for i in range(T):
        for h in range(nh):
            g = h // (nh // nkv)
            keys = [j for j in range(i + 1) if window == 0 or i - j < window]
            if window:
                assert len(keys) == min(i + 1, window)
            s = [float(np.dot(q[i, h], k[j, g])) / math.sqrt(dqk) for j in keys]
            allv = s + ([float(sinks[h])] if sinks is not None else [])
            m = max(allv)
            den = sum(math.exp(a - m) for a in allv)
            for j, sj in zip(keys, s):
                out[i, h] += math.exp(sj - m) / den * v[j, g]
    return out


@pytest.mark.parametrize("window,use_sinks,nh,nkv", [
    (0, False, 4, 2),  # full, GQA 2:1
    (0, True, 4, 4),  # full with sinks
    (8, True, 4, 4),  # SWA with sinks, T crosses the window edge
    (8, False, 8, 2),  # SWA, GQA 4:1
    (1, True, 2, 1),  # window of one key (only the current token)
])
def test_attention_matches_brute_force(window, use_sinks, nh, nkv):
    rng = _rng(3)
    T, dqk, dv = 20, 24, 16
    q = rng.standard_normal((T, nh, dqk)) * 2
    k = rng.standard_normal((T, nkv, dqk)) * 2
    v = rng.standard_normal((T, nkv, dv))
    sinks = rng.uniform(-1, 3, nh) if use_sinks else None
    pos = torch.arange(T)
    got = R.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), pos, pos, window,
                      None if sinks is None else torch.from_numpy(sinks), dqk).numpy()
    want = brute_attention(q, k, v, window, sinks, dqk)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_window_is_exactly_w_keys_including_current():
    # One key far in the past carries a huge value; it is visible at distance W-1 and not at W.
    T, W = 12, 8
    q = torch.zeros(T, 1, 4, dtype=torch.float64)
    k = torch.zeros(T, 1, 4, dtype=torch.float64)
    v = torch.zeros(T, 1, 1, dtype=torch.float64)
    v[0, 0, 0] = 1000.0
    pos = torch.arange(T)
    out = R.attention(q, k, v, pos, pos, W, None, 4)[:, 0, 0]
    assert out[W - 1] == pytest.approx(1000.0 / W)  # keys 0..7: uniform over 8 keys
    assert out[W] == 0.0  # key 0 left the window at query 8


# ---------------------------------------------------------------------------------------------
def brute_route(scores, bias, n_group, topk_group, top_k, norm, scale):
    """Per-token DeepSeek-V3 noaux_tc routing; ties go to the lower index."""
    E = len(scores)
    choice = [scores[e] + bias[e] for e in range(E)]
    cand = list(range(E))
    if n_group > 1:
        per = E // n_group
        gscore = []
        for gi in range(n_group):
            vals = sorted((choice[e] for e in range(gi * per, (gi + 1) * per)), reverse=True)
            gscore.append(sum(vals[:2]))
        groups = sorted(range(n_group), key=lambda gi: (-gscore[gi], gi))[:topk_group]
        cand = [e for e in range(E) if e // per in groups]
    sel = sorted(cand, key=lambda e: (-choice[e], e))[:top_k]
    w = [scores[e] for e in sel]
    if norm:
        s = sum(w)
        w = [x / (s + 1e-20) for x in w]
    return sel, [x * scale for x in w]


def _cfg(n_group, topk_group, top_k, norm=True, scale=1.0, E=8):
    raw = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
               vocab_size=4, n_routed_experts=E, num_experts_per_tok=top_k, n_group=n_group,
               topk_group=topk_group, norm_topk_prob=norm, routed_scaling_factor=scale)
    return R.parse_config(raw)


@pytest.mark.parametrize("n_group,topk_group,top_k,norm,scale", [
    (1, 1, 2, True, 1.0), (2, 1, 2, True, 1.0), (4, 2, 3, False, 2.5), (2, 1, 4, True, 1.5)])
def test_router_matches_brute_force(n_group, topk_group, top_k, norm, scale):
    rng = _rng(4)
    T, H, E = 64, 16, 8
    h = rng.standard_normal((T, H))
    gw = rng.standard_normal((E, H)) * 0.5
    bias = rng.uniform(-0.4, 0.4, E)
    cfg = _cfg(n_group, topk_group, top_k, norm, scale)
    r = R.route(torch.from_numpy(h), torch.from_numpy(gw), torch.from_numpy(bias), cfg)
    differs_from_plain = 0
    for t in range(T):
        scores = [1 / (1 + math.exp(-float(np.dot(h[t], gw[e])))) for e in range(E)]
        sel, w = brute_route(scores, bias, n_group, topk_group, top_k, norm, scale)
        assert r.idx[t].tolist() == sel
        np.testing.assert_allclose(r.weights[t].numpy(), w, rtol=1e-12)
        plain, _ = brute_route(scores, bias, 1, 1, top_k, norm, scale)
        differs_from_plain += sorted(plain) != sorted(sel)
    if n_group > 1:
        assert differs_from_plain > 0, "the group limit never mattered: the test would not see it"


def test_router_bias_selects_but_does_not_weigh():
    h = torch.zeros(1, 4, dtype=torch.float64)
    gw = torch.zeros(4, 4, dtype=torch.float64)
    gw[0, 0] = 1.0
    h[0, 0] = 2.0  # expert 0 has the highest sigmoid score
    bias = torch.tensor([0.0, 0.9, 0.0, 0.8], dtype=torch.float64)
    cfg = _cfg(1, 1, 2, norm=False, E=4)
    r = R.route(h, gw, bias, cfg)
    assert r.idx[0].tolist() == [1, 3]  # selection by score + bias
    np.testing.assert_allclose(r.weights[0].numpy(), [0.5, 0.5])  # weights: raw sigmoid(0)


def test_router_ties_and_group_ties_go_to_lower_index():
    E = 8
    h = torch.zeros(2, 4, dtype=torch.float64)
    gw = torch.zeros(E, 4, dtype=torch.float64)  # all scores 0.5
    bias = torch.tensor([0.1, 0.2, 0.2, 0.1, 0.2, 0.2, 0.1, 0.1], dtype=torch.float64)
    # choice = 0.5 + bias; groups of 2 sum to 1.3, 1.3, 1.4, 1.2 -> group 2 ({4, 5}) and the tie
    # 0 vs 1 goes to group 0 ({0, 1}); top-3 of {0.6, 0.7, 0.7, 0.7} -> 1, 4, 5 (group 1 would
    # have given 2, 4, 5).
    r = R.route(h, gw, bias, _cfg(4, 2, 3, norm=True))
    assert r.idx[0].tolist() == [1, 4, 5]
    np.testing.assert_allclose(r.weights[0].numpy(), [1 / 3] * 3)
    assert r.margin == 0.0  # the tie is reported, so fixtures can reject near-ties
    r = R.route(h, gw, bias, _cfg(1, 1, 2))
    assert r.idx[0].tolist() == [1, 2]


def test_moe_matches_per_token_loop(reference):
    ref = reference("bf16")
    rng = _rng(5)
    h = torch.from_numpy(rng.standard_normal((6, ref.cfg.hidden)))
    p = "model.layers.1.mlp."
    got = ref.moe(p, h).numpy()
    gw = ref.w.plain(p + "gate.weight").numpy()
    bias = ref.w.plain(p + "gate.e_score_correction_bias").numpy()
    c = ref.cfg
    for t in range(6):
        x = h[t].numpy()
        scores = [1 / (1 + math.exp(-float(np.dot(x, gw[e])))) for e in range(c.n_experts)]
        sel, w = brute_route(scores, bias, c.n_group, c.topk_group, c.top_k, c.norm_topk_prob,
                             c.routed_scaling)
        want = np.zeros(c.hidden)
        for e, we in zip(sel, w):
            ep = f"{p}experts.{e}."
            g = ref.w.plain(ep + "gate_proj.weight").numpy() @ x
            u = ref.w.plain(ep + "up_proj.weight").numpy() @ x
            want += we * (ref.w.plain(ep + "down_proj.weight").numpy() @ (g / (1 + np.exp(-g)) * u))
        np.testing.assert_allclose(got[t], want, rtol=1e-10, atol=1e-12)
