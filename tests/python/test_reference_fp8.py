"""Self-tests of FP8 E4M3 decoding and of every dequantisation layout of spec section 4."""
import math
from fractions import Fraction

import numpy as np
import pytest

import make_tiny_model as M
import mimo_reference as R


def ocp_e4m3(code):
    """OCP 8-bit FP spec, E4M3: bias 7, no infinities, S.1111.111 is NaN, subnormals at E = 0."""
    s, e, m = code >> 7, (code >> 3) & 0xF, code & 7
    if e == 15 and m == 7:
        return None
    mag = Fraction(m, 8) * Fraction(2) ** -6 if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 7)
    return -mag if s else mag


def test_e4m3_table_matches_ocp_definition_for_all_256_codes():
    for code in range(256):
        want = ocp_e4m3(code)
        got = R.E4M3_TABLE[code]
        if want is None:
            assert math.isnan(got), hex(code)
        else:
            assert Fraction(got) == want, hex(code)
            assert math.copysign(1.0, got) == (-1.0 if code & 0x80 else 1.0)


def test_e4m3_anchor_values():
    t = R.E4M3_TABLE
    assert t[0x7E] == 448.0 and t[0xFE] == -448.0
    assert t[0x38] == 1.0 and t[0x40] == 2.0 and t[0xB8] == -1.0
    assert t[0x08] == 2.0 ** -6 and t[0x01] == 2.0 ** -9 and t[0x07] == 7 * 2.0 ** -9
    assert math.isnan(t[0x7F]) and math.isnan(t[0xFF])
    assert np.isfinite(np.delete(t, [0x7F, 0xFF])).all()


def test_generator_encoder_roundtrips_every_code_and_rounds_to_nearest():
    for code in range(256):
        v = R.E4M3_TABLE[code]
        if math.isnan(v) or v == 0:
            continue
        assert M.encode_e4m3(np.array([v]))[0] == code, hex(code)
    assert M.encode_e4m3(np.array([1e6, -1e6, 449.0, 464.0]))[[0, 1, 2, 3]].tolist() == [
        0x7E, 0xFE, 0x7E, 0x7E]  # saturating
    rng = np.random.default_rng(0)
    x = rng.standard_normal(5000) * np.exp(rng.uniform(-8, 6, 5000))
    enc = M.encode_e4m3(x)
    finite = np.array([c for c in range(256) if not math.isnan(R.E4M3_TABLE[c])])
    vals = R.E4M3_TABLE[finite]
    for xi, c in zip(x, enc):
        best = np.abs(vals - np.clip(xi, -448, 448)).min()
        assert abs(R.E4M3_TABLE[c] - np.clip(xi, -448, 448)) == best


def test_bf16_decode():
    raw = R.RawTensor("BF16", [4], np.array([0x3F80, 0xC000, 0x0000, 0x7F7F], "<u2").tobytes(), "x")
    np.testing.assert_array_equal(R.decode_raw(raw), [1.0, -2.0, 0.0, 3.3895313892515355e38])


# ---------------------------------------------------------------------------------------------
def _codes(rng, shape):
    c = rng.integers(0, 256, shape, dtype=np.uint8)
    c[(c & 0x7F) == 0x7F] = 0x38  # no NaN codes
    return R.E4M3_TABLE[c]


def test_uniform_grid_with_partial_edge_blocks():
    rng = np.random.default_rng(1)
    w = _codes(rng, (200, 300))
    s = rng.uniform(0.01, 10, (2, 3))
    got = R.dequant_uniform(w, s)
    for n in range(0, 200, 7):
        for k in range(0, 300, 11):
            assert got[n, k] == w[n, k] * s[n // 128, k // 128]
    with pytest.raises(ValueError):
        R.dequant_uniform(w, s[:1])


def test_flash_kv_grid_follows_the_spec_statement():
    """Flash full layer: 4 kv heads, dqk 192, dv 128, TP 4. For head h: k_s[2h] -> K 0..127,
    k_s[2h+1] -> K 128..191 and V 0..63, v_s[h] -> V 64..127 (spec section 4)."""
    assert R.sectioned_kv_scale_rows(4, 4, 192, 128) == (8, 4)  # k [8, 32] (NOT 6), v [4, 32]
    assert R.sectioned_kv_scale_rows(8, 4, 192, 128) == (12, 8)  # SWA: the uniform grid
    rng = np.random.default_rng(2)
    K = 256
    k8, v8 = _codes(rng, (768, K)), _codes(rng, (512, K))
    ks, vs = rng.uniform(0.01, 10, (8, 2)), rng.uniform(0.01, 10, (4, 2))
    k, v = R.dequant_sectioned_kv(k8, ks, v8, vs, nkv=4, tp=4, dqk=192, dv=128)
    eq = np.testing.assert_array_equal
    for h in range(4):
        K0, V0 = 192 * h, 128 * h
        for c in range(K):
            cb = c // 128
            eq(k[K0:K0 + 128, c], k8[K0:K0 + 128, c] * ks[2 * h, cb])
            eq(k[K0 + 128:K0 + 192, c], k8[K0 + 128:K0 + 192, c] * ks[2 * h + 1, cb])
            eq(v[V0:V0 + 64, c], v8[V0:V0 + 64, c] * ks[2 * h + 1, cb])
            eq(v[V0 + 64:V0 + 128, c], v8[V0 + 64:V0 + 128, c] * vs[h, cb])


@pytest.mark.parametrize("nh,nkv,tp,rows,srows", [
    (64, 4, 4, 13568, 108),  # V2.5 full: [13568, 4096], scale [108, 32]
    (64, 8, 4, 14848, 116),  # V2.5 SWA: [14848, 4096], scale [116, 32]
    (128, 8, 8, 27136, 216),  # Pro: [27136, 6144], scale [216, 48]
])
def test_fused_qkv_layout_matches_spec_examples(nh, nkv, tp, rows, srows):
    rng = np.random.default_rng(3)
    w8 = _codes(rng, (rows, 128))
    s = rng.uniform(0.01, 10, (srows, 1))
    q, k, v = R.dequant_fused_qkv(w8, s, tp, nh, nkv, 192, 128)
    assert q.shape == (nh * 192, 128) and k.shape == (nkv * 192, 128) and v.shape == (nkv * 128, 128)
    sec, per = rows // tp, srows // tp
    qs, ks_ = nh // tp * 192, nkv // tp * 192
    for t in range(tp):
        for r in [0, 127, 128, qs - 1, qs, qs + ks_ - 1, qs + ks_, sec - 1]:
            want = w8[t * sec + r] * s[t * per + r // 128, 0]
            if r < qs:
                got = q[t * qs + r]
            elif r < qs + ks_:
                got = k[t * ks_ + r - qs]
            else:
                got = v[t * (nkv // tp * 128) + r - qs - ks_]
            np.testing.assert_array_equal(got, want)


def _raw(b, name):
    dtype, shape, data = b.tensors[name]
    return R.decode_raw(R.RawTensor(dtype, shape, data, "mem"))


def _builder(variant):
    b = M.Builder(M.VARIANTS[variant], seed=7)
    b.vary_magnitude = False
    return b


def test_sectioned_grid_roundtrip_and_wrong_grids_differ():
    b = _builder("fp8")
    nh, nkv, dqk, dv, H = 4, 2, 192, 128, 256
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((n, H)) for n in (nh * dqk, nkv * dqk, nkv * dv))
    b.sectioned_qkv("x.", q, k, v, nkv, nh, nkv, dqk, dv)
    k8, ks = _raw(b, "x.k_proj.weight"), _raw(b, "x.k_proj.weight_scale_inv")
    v8, vs = _raw(b, "x.v_proj.weight"), _raw(b, "x.v_proj.weight_scale_inv")
    assert ks.shape == (4, 2) and vs.shape == (2, 2)  # 2 k rows and 1 v row per kv head
    kd, vd = R.dequant_sectioned_kv(k8, ks, v8, vs, nkv, nkv, dqk, dv)
    qd = R.dequant_uniform(_raw(b, "x.q_proj.weight"), _raw(b, "x.q_proj.weight_scale_inv"))
    for got, want in ((qd, q), (kd, k), (vd, v)):
        assert np.abs(got - want).max() <= 0.07 * np.abs(want).max()
    # Wrong grids: repeat-and-crop, and uniform 96-row blocks (M / sM) over K.
    bad_k = R.dequant_repeat_crop(k8, ks)
    bad_v = R.dequant_repeat_crop(v8, vs)
    bad_k96 = k8 * np.repeat(np.repeat(ks, 96, 0), 128, 1)
    for bad, want in ((bad_k, k), (bad_v, v), (bad_k96, k)):
        assert np.abs(bad - want).max() > 0.5 * np.abs(want).max()


def test_fused_grid_roundtrip_and_flat_dequant_differs():
    b = _builder("fp8-fused")
    for nh, nkv in ((8, 2), (8, 4)):  # full: 544-row sections, SWA: 704-row sections
        dqk, dv, H, tp = 96, 64, 256, 2
        rng = np.random.default_rng(5)
        q, k, v = (rng.standard_normal((n, H)) for n in (nh * dqk, nkv * dqk, nkv * dv))
        b.fused_qkv("x.qkv_proj.weight", q, k, v, tp, nh, nkv, dqk, dv)
        w8, s = _raw(b, "x.qkv_proj.weight"), _raw(b, "x.qkv_proj.weight_scale_inv")
        sec = nh // tp * dqk + nkv // tp * (dqk + dv)
        assert sec % 128 and s.shape[0] == tp * -(-sec // 128)
        qd, kd, vd = R.dequant_fused_qkv(w8, s, tp, nh, nkv, dqk, dv)
        for got, want in ((qd, q), (kd, k), (vd, v)):
            assert np.abs(got - want).max() <= 0.07 * np.abs(want).max()
        flat = R.split_fused_qkv_plain(R.dequant_repeat_crop(w8, s), tp, nh, nkv, dqk, dv)
        assert np.abs(flat[1] - k).max() > 0.5 * np.abs(k).max()


# ---------------------------------------------------------------------------------------------
def test_checkpoint_layouts_are_detected(reference):
    ref = reference("fp8")
    ref.forward([1, 2])
    lay = ref.w.layouts
    for l, kind in enumerate(ref.cfg.raw["hybrid_layer_pattern"]):
        want = "uniform" if kind == 1 else "kv-sectioned"
        assert lay[f"model.layers.{l}.self_attn.k_proj.weight"] == want
        assert lay[f"model.layers.{l}.self_attn.v_proj.weight"] == want
    raw = ref.w.raw
    assert raw["model.layers.0.self_attn.k_proj.weight_scale_inv"].shape == [4, 2]
    assert raw["model.layers.0.self_attn.v_proj.weight_scale_inv"].shape == [2, 2]
    assert raw["model.layers.0.self_attn.o_proj.weight"].dtype == "BF16"
    assert raw["model.layers.1.mlp.gate.weight"].dtype == "F32"
    assert raw["model.layers.1.mlp.experts.3.down_proj.weight"].dtype == "F8_E4M3"
    fused = reference("fp8-fused")
    fused.forward([1, 2])
    assert fused.w.layouts["model.layers.0.self_attn.qkv_proj.weight"] == "fused-sectioned"


@pytest.mark.parametrize("variant", ["fp8", "fp8-fused"])
def test_wrong_grid_gives_visibly_wrong_logits(checkpoint, reference, variant):
    ids = list(range(3, 40, 3))
    good = reference(variant).forward(ids)
    bad = reference(variant).with_options(R.Options(fp8_wrong_grid=True)).forward(ids)
    tol = 1e-4 * good.abs().max()
    assert (bad - good).abs().max() > 100 * tol
