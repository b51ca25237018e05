"""FP8 E4M3 block quantization used by scripts/nano/export.py, checked against brute-force rounding
and against the independent dequantization in scripts/mimo_reference.py (spec section 4)."""
import os
import sys

import numpy as np
import pytest

from prereq import require_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts", "nano"))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import nano_io as nio  # noqa: E402


def finite_e4m3_values():
    """All finite e4m3fn values from the format definition: 1 sign, 4 exponent (bias 7),
    3 mantissa bits, no infinities, S.1111.111 = NaN."""
    vals = {}
    for s in (0, 1):
        for e in range(16):
            for m in range(8):
                if e == 15 and m == 7:
                    continue
                mag = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
                vals[(s << 7) | (e << 3) | m] = -mag if s else mag
    return vals


def test_e4m3_round_to_nearest_even_matches_brute_force():
    vals = finite_e4m3_values()
    codes = np.array(sorted(vals))
    v = np.array([vals[c] for c in codes])
    assert max(v) == 448.0
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.uniform(-448, 448, 3000), rng.normal(0, 0.01, 2000),
                         (v[:-1] + v[1:]) / 2, v])  # include exact ties and exact values
    got = nio.f32_to_e4m3(xs.astype(np.float32))
    for x, g in zip(xs.astype(np.float32), got):
        d = np.abs(v - float(x))
        best = codes[d == d.min()]
        best = [c for c in best if not (vals[c] == 0 and c & 0x80)]  # +0 for zero
        if len(best) > 1:  # tie: even mantissa
            best = [c for c in best if c % 2 == 0]
        assert vals[int(g)] == vals[best[0]], (x, g, best)


def test_uniform_blocks_dequantize_with_reference():
    ref = require_module("mimo_reference")
    rng = np.random.default_rng(1)
    w = rng.normal(0, 0.05, (300, 200)).astype(np.float32)
    w[5, 7] = 3.0  # an outlier only affects its own block
    codes, s = nio.quantize_blocks(w)
    assert s.shape == (3, 2)
    back = ref.dequant_uniform(nio.e4m3_to_f32(codes).astype(np.float64), s.astype(np.float64))
    err = np.abs(back - w)
    # e4m3 has 3 mantissa bits: relative error <= 2^-4 of the value, or the subnormal step
    assert np.all(err <= np.abs(w) * 2 ** -4 + np.repeat(np.repeat(s, 128, 0), 128, 1)[:300, :200] * 2 ** -9 + 1e-12)
    assert np.allclose(back, nio.dequant_blocks(codes, s))


@pytest.mark.parametrize("nkv,tp", [(2, 2), (4, 4), (4, 2)])
def test_full_layer_kv_sections_match_reference(nkv, tp):
    ref = require_module("mimo_reference")
    dqk, dv, hidden = 192, 128, 160
    rng = np.random.default_rng(nkv + tp)
    k = rng.normal(0, 0.1, (nkv * dqk, hidden)).astype(np.float32)
    v = rng.normal(0, 0.5, (nkv * dv, hidden)).astype(np.float32)
    kc, ks, vc, vs = nio.quantize_kv_sectioned(k, v, nkv, tp, dqk, dv)
    want_rows = ref.sectioned_kv_scale_rows(nkv, tp, dqk, dv)
    assert (ks.shape[0], vs.shape[0]) == want_rows
    assert ks.shape[1] == vs.shape[1] == 2
    rk, rv = ref.dequant_sectioned_kv(nio.e4m3_to_f32(kc).astype(np.float64), ks.astype(np.float64),
                                      nio.e4m3_to_f32(vc).astype(np.float64), vs.astype(np.float64),
                                      nkv, tp, dqk, dv)
    mk, mv = nio.dequant_kv_sectioned(kc, ks, vc, vs, nkv, tp, dqk, dv)
    assert np.allclose(rk, mk) and np.allclose(rv, mv)
    # 3 mantissa bits: |error| <= 2^-4 |w| (+ half a subnormal step of the largest block scale)
    smax = max(ks.max(), vs.max())
    assert np.all(np.abs(rk - k) <= np.abs(k) * 2 ** -4 + smax * 2 ** -10)
    assert np.all(np.abs(rv - v) <= np.abs(v) * 2 ** -4 + smax * 2 ** -10)
    # where K sections are not block-aligned the grid really differs from a plain 128-row grid
    _, plain = nio.quantize_blocks(k)
    if (nkv // tp) * dqk % 128:
        assert plain.shape[0] != ks.shape[0] or not np.allclose(plain, ks)
    else:
        assert np.allclose(plain, ks)


def test_bf16_round_to_nearest_even():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.5, 1e-3], np.float32)
    b = nio.bf16_round(x)
    assert b[0] == 1.0 and b[1] == 1.0 and b[2] == 1.0 + 2 ** -6 and b[3] == -2.5
    assert abs(b[4] - 1e-3) < 1e-3 * 2 ** -8


def test_safetensors_round_trip(tmp_path):
    p = tmp_path / "t.safetensors"
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    nio.write_safetensors(str(p), {"b": ("BF16", nio.f32_to_bf16_bits(a)), "a": ("F32", a),
                                   "c": ("F8_E4M3", np.array([0x38, 0xB8], np.uint8))})
    raw = p.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert n % 8 == 0
    t = nio.read_safetensors(str(p))
    assert np.array_equal(nio.to_f32(*t["b"]), a) and np.array_equal(t["a"][1], a)
    assert list(nio.e4m3_to_f32(t["c"][1])) == [1.0, -1.0]
