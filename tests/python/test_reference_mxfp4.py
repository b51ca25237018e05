"""Self-tests of the reference's MXFP4 decoding (spec section 4, OCP MX), of the generator's MXFP4
encoder, and of the sibling checkpoints the generator writes (names, dtypes, scale tensors and
config keys of spec sections 1 and 4), plus proof that the logits comparison would catch a
wrong nibble order or a wrong exponent bias."""
import json
import math
import os
from fractions import Fraction

import numpy as np
import pytest

import make_tiny_model as M
import mimo_reference as R


def ocp_e2m1(code):
    """OCP MX E2M1: 1 sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal."""
    s, e, m = code >> 3, (code >> 1) & 3, code & 1
    mag = Fraction(m, 2) if e == 0 else (1 + Fraction(m, 2)) * Fraction(2) ** (e - 1)
    return -mag if s else mag


def test_e2m1_table_matches_ocp_definition_for_all_16_codes():
    for code in range(16):
        assert Fraction(R.E2M1_TABLE[code]) == ocp_e2m1(code), code
        assert math.copysign(1.0, R.E2M1_TABLE[code]) == (-1.0 if code & 8 else 1.0)
    assert R.E2M1_TABLE[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]  # the spec's table


def test_e8m0_values():
    assert R.e8m0_value(127) == 1.0 and R.e8m0_value(128) == 2.0 and R.e8m0_value(0) == 2.0 ** -127
    assert R.e8m0_value(254) == 2.0 ** 127 and math.isnan(R.e8m0_value(255))


def test_nibble_order_and_blocks_by_hand():
    # byte 0x21: element 0 = code 1 (0.5) in the low nibble, element 1 = code 2 (1.0) in the high.
    packed = np.zeros((2, 20), np.uint8)  # 40 columns: blocks of 32 and 8
    packed[0, 0] = 0x21
    packed[0, 16] = 0xF9  # element 32 = code 9 (-0.5), element 33 = code 15 (-6), second block
    packed[1, 19] = 0x70  # element 39 = code 7 (6)
    exps = np.array([[127, 129], [0, 255]], np.uint8)
    w = R.dequant_mxfp4(packed, exps)
    assert w.shape == (2, 40)
    assert w[0, 0] == 0.5 and w[0, 1] == 1.0 and w[0, 32] == -2.0 and w[0, 33] == -24.0
    assert np.isnan(w[1, 39])  # exponent 255 is NaN
    assert w[1, 0] == 0.0 and (w[0, 2:32] == 0).all()
    with pytest.raises(ValueError):
        R.dequant_mxfp4(packed, exps[:, :1])  # one exponent per 32 columns is required


def test_generator_encoder_roundtrips_every_code_and_rounds_to_nearest():
    for code in range(16):
        v = R.E2M1_TABLE[code]
        if v == 0:
            continue
        assert M.encode_e2m1(np.array([v]))[0] == code, code
    assert M.encode_e2m1(np.array([100.0, -7.0, 5.0, 0.25, 2.5])).tolist() == [7, 15, 6, 0, 4]
    rng = np.random.default_rng(0)
    x = rng.uniform(-7, 7, 2000)
    got = R.E2M1_TABLE[M.encode_e2m1(x)]
    best = np.abs(R.E2M1_TABLE[None, :] - np.clip(x, -6, 6)[:, None]).min(1)
    np.testing.assert_array_equal(np.abs(got - np.clip(x, -6, 6)), best)


def test_generator_quantizer_roundtrip():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((37, 96))
    packed, exps = M.quantize_mxfp4(w, rng, vary_magnitude=False)
    assert packed.shape == (37, 48) and exps.shape == (37, 3)
    d = R.dequant_mxfp4(packed, exps)
    step = np.repeat(R.e8m0_value(exps), 32, 1)  # the grid's widest gap is 2 units (4 -> 6)
    assert (np.abs(d - w) <= step + 1e-12).all()


# ---------------------------------------------------------------------------------------------
SIBLINGS = {  # variant: (expert storage, router weight dtype, bias dtype, tp, omni)
    "v2.5": ("F8_E4M3", "F32", "F32", 4, True),
    "v2.5-pro": ("F8_E4M3", "F32", "F32", 8, False),
    "v2.6-flash": ("U8", "BF16", "BF16", 4, True),
    "v2.6-pro": ("U8", "BF16", "F32", 8, False),
}


@pytest.mark.parametrize("variant", list(SIBLINGS))
def test_sibling_checkpoints_have_the_real_names_dtypes_and_keys(checkpoint, variant):
    experts, router, bias, tp, omni = SIBLINGS[variant]
    d = checkpoint(variant)
    cfg = json.load(open(os.path.join(d, "config.json")))
    raw = R.read_checkpoint_tensors(d)
    H, inter = cfg["hidden_size"], cfg["moe_intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    # Fused qkv_proj, TP = num_key_value_heads sections, ceil(section / 128) scale rows each.
    qkv = raw["model.layers.0.self_attn.qkv_proj.weight"]
    sec = nh // tp * 192 + nkv // tp * (192 + 128)
    assert qkv.dtype == "F8_E4M3" and qkv.shape == [tp * sec, H]
    assert raw["model.layers.0.self_attn.qkv_proj.weight_scale_inv"].shape == [tp * -(-sec // 128),
                                                                               -(-H // 128)]
    assert "model.layers.0.self_attn.q_proj.weight" not in raw
    assert raw["model.layers.0.self_attn.o_proj.weight"].dtype == "BF16"
    assert raw["model.layers.1.mlp.gate.weight"].dtype == router
    assert raw["model.layers.1.mlp.gate.e_score_correction_bias"].dtype == bias
    assert raw["model.layers.0.mlp.gate_proj.weight"].dtype == "F8_E4M3"  # dense layer stays FP8
    up = "model.layers.1.mlp.experts.0.up_proj.weight"
    down = "model.layers.2.mlp.experts.1.down_proj.weight"
    assert raw[up].dtype == experts
    if experts == "U8":
        assert raw[up].shape == [inter, H // 2] and raw[up + "_scale"].shape == [inter, H // 32]
        assert raw[down].shape == [H, inter // 2] and raw[down + "_scale"].shape == [H, inter // 32]
        assert raw[up + "_scale"].dtype == "U8" and up + "_scale_inv" not in raw
        assert cfg["quantization_config"]["store_dtype"] == "mxfp4"
        assert cfg["quantization_config"]["mxfp4_block_size"] == 32
        assert cfg["quantization_config"]["quant_method"] == "fp8"
    else:
        assert up + "_scale_inv" in raw and up + "_scale" not in raw
    assert cfg.get("moe_router_dtype", "float32") == ("bfloat16" if router == "BF16" else "float32")
    assert any(n.startswith("visual.") for n in raw) == omni
    assert ("vision_config" in cfg) == omni and ("audio_config" in cfg) == omni
    if variant.endswith("pro"):
        assert cfg["attention_value_scale"] == 0.612 and nkv == 8
        assert cfg["swa_num_key_value_heads"] == 8
    if variant == "v2.6-flash":
        assert cfg["layernorm_epsilon"] == 1e-6 and cfg["num_nextn_predict_layers"] == 3
        assert "model.mtp.layers.2.self_attn.qkv_proj.weight" in raw


@pytest.mark.parametrize("deviation", ["nibbles", "bias128"])
def test_mxfp4_mistakes_give_visibly_wrong_logits(reference, deviation):
    """What `test_logits_match_reference` would see from an engine reading the high nibble first
    or the exponents with bias 128: errors far above its 1e-4 tolerance."""
    ids = list(range(3, 40, 3))
    good = reference("v2.6-flash").forward(ids)
    bad = reference("v2.6-flash").with_options(R.Options(mxfp4_deviation=deviation)).forward(ids)
    assert (bad - good).abs().max() > 100 * 1e-4 * good.abs().max()
    assert "mxfp4" in reference("v2.6-flash").w.layouts.values()
