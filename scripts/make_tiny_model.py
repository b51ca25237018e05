#!/usr/bin/python3
"""Writes small random MiMo-V2 checkpoints with the real tensor names and config keys.

    make_tiny_model.py --out DIR --variant NAME [--seed S]
    make_tiny_model.py --list

Variants (see VARIANTS, BENCH_VARIANTS, SERVER_VARIANTS): bf16, f32, bf16-sharded, fp8, fp8-fused,
tied, omni, e2e (the server tests' random model on the 151680-token vocabulary), and one small model
per MiMo-V2 sibling of spec section 1 with its real tensor names, dtypes and scale tensors: v2.5 (omni,
fused TP4 qkv_proj), v2.5-pro (fused TP8, 8/8 kv heads, value scale 0.612), v2.6-flash (omni,
MXFP4 experts, bf16 router, eps 1e-6, 3 MTP layers announced by num_nextn_predict_layers) and
v2.6-pro (TP8, MXFP4 experts, bf16 router weight with an F32 bias). Storage dtypes follow the real
checkpoints: embed / lm_head / norms / o_proj / sinks / MTP eh_proj in BF16 (F32 in the f32
variant), the router gate and e_score_correction_bias in F32 (BF16 where moe_router_dtype is
bfloat16), projections and experts in FP8 E4M3 with float32 weight_scale_inv in the fp8 variants,
routed experts as MXFP4 (uint8 E2M1 pairs + uint8 E8M0 weight_scale) where store_dtype is mxfp4.
Every VARIANTS checkpoint also gets a random DFlash drafter in <out>/dflash/ (see DFLASH), drawn
from its own RNG so the target's bytes do not depend on it.

FP8 grids (spec section 4):
  * every block-aligned projection: uniform 128x128 grid;
  * full-attention k_proj/v_proj of `fp8`: the Flash per-TP-section grid (TP = num_key_value_heads):
    each section [Q_s; K_s; V_s] is quantized as ONE block grid, and its block rows are then split
    into q / k / v scale rows by where each block starts;
  * `fp8-fused`: fused qkv_proj = [Q_0|K_0|V_0|Q_1|...] with ceil(section/128) scale rows per section.
Per-block weight magnitudes (x0.3..x3) and per-block scale headroom (x1..x20) vary strongly, so a
wrong grid gives visibly wrong logits. MXFP4 (spec section 4): per row and 32-column block an
exponent e = 127 + ceil(log2(amax / 6)) (+0..2 headroom), codes = nearest E2M1 value of
x / 2^(e-127), element 2i in the low nibble of byte i. This writer has its own safetensors, E4M3 and E2M1 code; the
reference (mimo_reference.py) parses and dequantises the stored bytes independently.

    make_tiny_model.py --full-size flash|v2.5-pro|v2.6-flash --sparse --out DIR

writes a full-size checkpoint (real config, real tensor names, dtypes and shapes, sharded with an
index) whose data are holes: the files have their real sizes but cost no disk, so `mimo inspect`
can be checked on the real geometries without the weights.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

BLOCK = 128

# ----------------------------------------------------------------------------------------------
# Geometries and variants.
FLASH_GEOM = dict(  # Flash-shaped: dqk 192 / dv 128 / rotary 64, K|V straddling at 128-blocks
    vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
    num_hidden_layers=6, hybrid_layer_pattern=[0, 1, 1, 0, 1, 1], moe_layer_freq=[0, 1, 1, 1, 1, 1],
    num_attention_heads=4, num_key_value_heads=2, head_dim=192, v_head_dim=128,
    swa_num_attention_heads=4, swa_num_key_value_heads=4, swa_head_dim=192, swa_v_head_dim=128,
    partial_rotary_factor=0.334, n_routed_experts=8, num_experts_per_tok=2, mtp_layers=1)

SMALL_GEOM = dict(  # dqk 96 / dv 64 / rotary 32
    vocab_size=640, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
    num_hidden_layers=5, hybrid_layer_pattern=[0, 1, 1, 1, 0], moe_layer_freq=[0, 1, 1, 1, 1],
    num_attention_heads=4, num_key_value_heads=2, head_dim=96, v_head_dim=64,
    swa_num_attention_heads=4, swa_num_key_value_heads=4, swa_head_dim=96, swa_v_head_dim=64,
    partial_rotary_factor=0.334, n_routed_experts=8, num_experts_per_tok=2, mtp_layers=2)

# Benchmark geometry (not used by tests): large enough that one decode token's weights (~0.3 GB
# in FP8) cannot sit in cache, so `mimo generate` measures the memory-bandwidth roofline.
BENCH_GEOM = dict(FLASH_GEOM, vocab_size=32768, hidden_size=2048, intermediate_size=4096,
                  moe_intermediate_size=768, num_hidden_layers=6,
                  hybrid_layer_pattern=[0, 1, 1, 1, 1, 0], moe_layer_freq=[0, 1, 1, 1, 1, 1],
                  num_attention_heads=16, num_key_value_heads=4, swa_num_attention_heads=16,
                  swa_num_key_value_heads=8, n_routed_experts=16, num_experts_per_tok=4,
                  mtp_layers=0, n_group=1, topk_group=1, routed_scaling_factor=None)

# The Flash-shaped benchmark checkpoint of the kernel and engine issues: 8 layers (full at 0 and
# 6), 32 heads, kv 4 (full) / 8 (SWA), window 128 with sinks, dense layer 0 of 4096, 64 experts
# top-8 of 512, vocabulary 32768; FP8 with o_proj, embeddings and lm_head in BF16 (~611 MB read
# per decode token, ~2.2 GB on disk); 3 MTP layers for the speculative-decoding benchmark.
FLASH_BENCH_GEOM = dict(FLASH_GEOM, vocab_size=32768, hidden_size=2048, intermediate_size=4096,
                        moe_intermediate_size=512, num_hidden_layers=8,
                        hybrid_layer_pattern=[0, 1, 1, 1, 1, 1, 0, 1],
                        moe_layer_freq=[0, 1, 1, 1, 1, 1, 1, 1], num_attention_heads=32,
                        num_key_value_heads=4, swa_num_attention_heads=32,
                        swa_num_key_value_heads=8, n_routed_experts=64, num_experts_per_tok=8,
                        mtp_layers=3, n_group=1, topk_group=1, routed_scaling_factor=None,
                        sliding_window=128)
# The siblings' shapes scaled down (spec section 1): real head dims (192 / 128) and kv-head counts,
# fused qkv_proj sectioned by num_key_value_heads (4 on Flash-size models, 8 on Pro-size ones),
# so a section is 2 q heads + 1 kv head on full layers: 704 rows, not whole 128-row blocks.
SIBLING_GEOM = dict(
    vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
    num_hidden_layers=4, hybrid_layer_pattern=[0, 1, 1, 0], moe_layer_freq=[0, 1, 1, 1],
    num_attention_heads=8, num_key_value_heads=4, head_dim=192, v_head_dim=128,
    swa_num_attention_heads=8, swa_num_key_value_heads=8, swa_head_dim=192, swa_v_head_dim=128,
    partial_rotary_factor=0.334, n_routed_experts=8, num_experts_per_tok=2, mtp_layers=0,
    n_group=1, topk_group=1, routed_scaling_factor=None, dtype="fp8", fused_qkv=True,
    rope_parameters=True, rope_theta=1e7, architectures=["MiMoV2ForCausalLM"],
    model_type="mimo_v2")
SIBLING_PRO_GEOM = dict(SIBLING_GEOM, num_attention_heads=16, num_key_value_heads=8,
                        swa_num_attention_heads=16, swa_num_key_value_heads=8, n_routed_experts=12,
                        num_experts_per_tok=3, moe_intermediate_size=64,
                        attention_value_scale=0.612)

# Benchmarks only (docs/PERFORMANCE.md), kept out of VARIANTS so tests never build them.
BENCH_VARIANTS = {
    "bench-bf16": dict(BENCH_GEOM, dtype="bf16"),
    "bench-fp8": dict(BENCH_GEOM, dtype="fp8"),
    "bench-flash-fp8": dict(FLASH_BENCH_GEOM, dtype="fp8"),
    "bench-mxfp4": dict(BENCH_GEOM, dtype="fp8", experts="mxfp4", router_dtype=("BF16", "F32")),
    # bench-flash-fp8's weights dequantized to BF16 (scripts/bench/dequant_fp8_to_bf16.py), so
    # llama.cpp (GGUF from BF16) and mimo run the same model (issue 31).
    "bench-flash-bf16": dict(FLASH_BENCH_GEOM, dtype="fp8", dequant_of="bench-flash-fp8"),
    # bench-flash-fp8 with the real Qwen3 vocabulary, for replaying the recorded agents' sessions
    # (scripts/bench/agent_sessions.sh; copy the default model's tokenizer.json and
    # tokenizer_config.json beside it). Random weights: only the timings mean anything.
    "bench-flash-fp8-qwen": dict(FLASH_BENCH_GEOM, dtype="fp8", vocab_size=151680,
                                 eos_token_id=151645, pad_token_id=151643, mtp_layers=0),
}

VARIANTS = {
    # Flash-like, single file; group-limited routing; routed_scaling_factor null (= 1.0).
    "bf16": dict(FLASH_GEOM, dtype="bf16", n_group=2, topk_group=1, routed_scaling_factor=None),
    # Float32 storage, plain top-k (n_group 1), a real routed_scaling_factor, eps 1e-6, theta 1e6.
    "f32": dict(SMALL_GEOM, dtype="f32", n_group=1, topk_group=1, routed_scaling_factor=2.5,
                moe_intermediate_size=64, mtp_layers=1, num_hidden_layers=4,
                hybrid_layer_pattern=[0, 1, 1, 0], moe_layer_freq=[0, 1, 1, 1],
                layernorm_epsilon=1e-6, rope_theta=1e6),
    # Same as bf16 but 3 shards + index, tensors interleaved across shards.
    "bf16-sharded": dict(FLASH_GEOM, dtype="bf16", n_group=2, topk_group=1,
                         routed_scaling_factor=None, shards=3, same_model_as="bf16"),
    # Flash FP8: uniform grid + per-TP-section grid for full-attention k/v; MTP in its own file.
    "fp8": dict(FLASH_GEOM, dtype="fp8", n_group=2, topk_group=1, routed_scaling_factor=None,
                mtp_file=True),
    # V2.5-style fused qkv_proj (full and SWA and MTP), TP = num_key_value_heads = 2; non-aligned
    # sections (full 544 rows, SWA 704 rows); rope_theta also inside rope_parameters; 3 MTP layers
    # (fused too) announced by num_nextn_predict_layers (as V2.6 does).
    "fp8-fused": dict(SMALL_GEOM, dtype="fp8", fused_qkv=True, n_group=2, topk_group=1,
                      routed_scaling_factor=None, num_attention_heads=8, swa_num_attention_heads=8,
                      mtp_layers=3, num_nextn_predict_layers=True, num_hidden_layers=4,
                      hybrid_layer_pattern=[0, 1, 1, 0], moe_layer_freq=[0, 1, 1, 1],
                      rope_parameters=True, rope_theta=1e7,
                      architectures=["MiMoV2ForCausalLM"], model_type="mimo_v2",
                      attention_value_scale=0.612),
    # tie_word_embeddings (no lm_head tensor), norm_topk_prob false, sinks on full layers too.
    "tied": dict(SMALL_GEOM, dtype="bf16", tie_word_embeddings=True, n_group=4, topk_group=2,
                 norm_topk_prob=False, routed_scaling_factor=1.5, add_full_attention_sink_bias=True,
                 mtp_layers=0, num_hidden_layers=4, hybrid_layer_pattern=[1, 0, 1, 1],
                 moe_layer_freq=[0, 1, 1, 1], moe_intermediate_size=64),
    # V2.5 omni-like: extra visual / audio tensors the engine must skip; rope only in rope_parameters.
    "omni": dict(SMALL_GEOM, dtype="bf16", n_group=1, topk_group=1, routed_scaling_factor=None,
                 omni=True, rope_parameters="only", mtp_layers=1, num_hidden_layers=3,
                 hybrid_layer_pattern=[0, 1, 1], moe_layer_freq=[0, 1, 1], moe_intermediate_size=64,
                 architectures=["MiMoV2ForCausalLM"], model_type="mimo_v2"),
    # MiMo-V2.5: omni (vision / audio towers beside the language model), fused TP4 qkv_proj, FP8.
    "v2.5": dict(SIBLING_GEOM, omni=True),
    # MiMo-V2.5-Pro: text only, 8/8 kv heads, fused TP8 qkv_proj, attention_value_scale 0.612.
    "v2.5-pro": dict(SIBLING_PRO_GEOM),
    # MiMo-V2.6-Flash: omni, MXFP4 routed experts, router weight and bias in BF16
    # (moe_router_dtype bfloat16), layernorm_epsilon 1e-6, 3 MTP layers (num_nextn_predict_layers).
    "v2.6-flash": dict(SIBLING_GEOM, omni=True, experts="mxfp4", router_dtype=("BF16", "BF16"),
                       layernorm_epsilon=1e-6, mtp_layers=3, num_nextn_predict_layers=True),
    # MiMo-V2.6-Pro: MXFP4 experts, BF16 router weight with an F32 correction bias (what the
    # released V2.6-Pro header holds), TP8, value scale 0.612.
    "v2.6-pro": dict(SIBLING_PRO_GEOM, experts="mxfp4", router_dtype=("BF16", "F32")),
}

# The end-to-end server tests' random model (tests/server), kept out of VARIANTS (the
# reference-logit tests do not build it): the real Qwen3 vocabulary of the nano model (whose
# tokenizer and chat template the tests copy beside it), so anything at all may come out, special
# tokens included; 2 small layers (one full, one SWA), no MTP.
SERVER_VARIANTS = {
    "e2e": dict(SMALL_GEOM, dtype="bf16", vocab_size=151680, hidden_size=128,
                intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=2,
                hybrid_layer_pattern=[0, 1], moe_layer_freq=[0, 1], mtp_layers=0, n_group=1,
                topk_group=1, routed_scaling_factor=None, eos_token_id=151645,
                pad_token_id=151643),
}

# The C++ suite's reference-logits fixture (tests/data/reference_fixture, written by
# scripts/make_reference_fixture.py): everything a wrong model would get wrong in one small
# checkpoint (about 1 MB): FP8 weights with two scale columns, MXFP4 experts with a BF16 router
# and an F32 bias, routed_scaling_factor 2.5, sinks on the sliding-window and the full layer,
# the two RoPE thetas (1e6 full, 1e4 SWA), value scale 0.612, a 4-key window. Not in VARIANTS.
FIXTURE_VARIANTS = {
    "ctest-ref": dict(FLASH_GEOM, vocab_size=256, hidden_size=256, intermediate_size=256,
                      moe_intermediate_size=128, num_hidden_layers=2,
                      hybrid_layer_pattern=[0, 1], moe_layer_freq=[0, 1],
                      num_attention_heads=4, num_key_value_heads=2, swa_num_attention_heads=2,
                      swa_num_key_value_heads=1, n_routed_experts=4, num_experts_per_tok=2,
                      mtp_layers=0, n_group=1, topk_group=1, routed_scaling_factor=2.5,
                      dtype="fp8", experts="mxfp4", router_dtype=("BF16", "F32"),
                      add_full_attention_sink_bias=True, attention_value_scale=0.612,
                      rope_theta=1e6, sliding_window=4),
    # Long-context exactness (tests/python/test_long_context.py, issue 30): small widths so a
    # 32k-token prompt and its float64 reference run in seconds: three sliding-window layers of
    # 128 keys with sinks (the ring wraps 256 times in 32k), then a full layer (the reference
    # needs its queries only at the compared positions; they see every key), the two RoPE thetas
    # (1e4 SWA, 5e6 full), asymmetric K/V (48 / 32, rotary 16); dense MLPs (routing would turn
    # bf16 KV's rounding into expert flips, which is not what this checkpoint measures).
    "long-ctx": dict(FLASH_GEOM, vocab_size=512, hidden_size=64, intermediate_size=128,
                     moe_intermediate_size=32, num_hidden_layers=4,
                     hybrid_layer_pattern=[1, 1, 1, 0], moe_layer_freq=[0, 0, 0, 0],
                     num_attention_heads=2, num_key_value_heads=1, head_dim=48, v_head_dim=32,
                     swa_num_attention_heads=2, swa_num_key_value_heads=1, swa_head_dim=48,
                     swa_v_head_dim=32, n_routed_experts=4, num_experts_per_tok=2, mtp_layers=0,
                     n_group=1, topk_group=1, routed_scaling_factor=None, dtype="bf16",
                     sliding_window=128),
    # Weights larger than memory (tests/python/test_weights_memory.py, issue 28): 404 MB, almost
    # all of it 2 x 56 BF16 routed experts (BF16 so it is written in seconds, unlike FP8's
    # encoding), a 4k vocabulary, one dense and two MoE layers; a decode token reads ~50 MB of it.
    "weights-mmap": dict(FLASH_GEOM, vocab_size=4096, hidden_size=1024, intermediate_size=2048,
                         moe_intermediate_size=512, num_hidden_layers=3,
                         hybrid_layer_pattern=[0, 1, 1], moe_layer_freq=[0, 1, 1],
                         num_attention_heads=8, num_key_value_heads=2, swa_num_attention_heads=8,
                         swa_num_key_value_heads=4, n_routed_experts=56, num_experts_per_tok=4,
                         mtp_layers=0, n_group=1, topk_group=1, routed_scaling_factor=None,
                         dtype="bf16"),
}

# A variant's seed is its index here: append new variants, never reorder, so every existing
# checkpoint (and the figures recorded from it) keeps its bytes.
SEED_ORDER = ["bf16", "bf16-sharded", "f32", "fp8", "fp8-fused", "omni", "tied", "bench-bf16",
              "bench-fp8", "v2.5", "v2.5-pro", "v2.6-flash", "v2.6-pro", "bench-mxfp4",
              "bench-flash-fp8", "e2e", "ctest-ref", "long-ctx", "weights-mmap",
              "bench-flash-bf16", "bench-flash-fp8-qwen"]
assert set(SEED_ORDER) == (set(VARIANTS) | set(BENCH_VARIANTS) | set(SERVER_VARIANTS) |
                           set(FIXTURE_VARIANTS))
ALL_VARIANTS = {**VARIANTS, **BENCH_VARIANTS, **SERVER_VARIANTS, **FIXTURE_VARIANTS}

# ----------------------------------------------------------------------------------------------
# DFlash drafters (shared/spec/dflash.md section 2), one per VARIANTS entry, in <ckpt>/dflash/:
# config.json, dflash_draft_model.safetensors (all BF16; bf16-sharded: 2 shards
# dflash_draft_model-0000k-of-00002.safetensors) + model.safetensors.index.json, and
# mask_embedding.pt ({"mask_token_id", "embedding"}; f32: a bare bf16 tensor). v2.5-pro spells its
# tensor names with a `model.` prefix (as the Pro drafters can). hidden_size is the target's (the
# block inputs are the target's embeddings); the window is small so ~40-token prompts cross it.
# Drawn from their own RNG (the target seed + 7919) after the target, so the target's bytes are
# those of a checkpoint without a drafter. SERVER / FIXTURE variants and the other BENCH ones get
# none.
DFLASH_BASE = dict(intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, sliding_window=12, rms_norm_eps=1e-6,
                   block_size=8, prefix="", mask_format="dict", shards=1)
DFLASH = {
    "bf16": dict(DFLASH_BASE, target_layer_ids=[1, 3, 5], mask_token_id=505),
    "bf16-sharded": dict(DFLASH_BASE, target_layer_ids=[1, 3, 5], mask_token_id=505, shards=2),
    "f32": dict(DFLASH_BASE, target_layer_ids=[0, 3], mask_token_id=633, mask_format="tensor"),
    # 4 q heads on ONE kv head, head_dim 64 (rotary 32), window 16
    "fp8": dict(DFLASH_BASE, target_layer_ids=[0, 2, 5], mask_token_id=500, num_key_value_heads=1,
                head_dim=64, intermediate_size=384, sliding_window=16),
    "fp8-fused": dict(DFLASH_BASE, target_layer_ids=[1, 3], mask_token_id=600,
                      num_attention_heads=8),
    # no GQA (4 / 4), window 10
    "tied": dict(DFLASH_BASE, target_layer_ids=[0, 1, 3], mask_token_id=630,
                 num_key_value_heads=4, sliding_window=10),
    "omni": dict(DFLASH_BASE, target_layer_ids=[0, 2], mask_token_id=620),
    "v2.5": dict(DFLASH_BASE, target_layer_ids=[0, 1, 3], mask_token_id=507),
    "v2.5-pro": dict(DFLASH_BASE, target_layer_ids=[1, 3], mask_token_id=501, prefix="model.",
                     num_attention_heads=8, rms_norm_eps=1e-5),
    "v2.6-flash": dict(DFLASH_BASE, target_layer_ids=[0, 2, 3], mask_token_id=509),
    "v2.6-pro": dict(DFLASH_BASE, target_layer_ids=[0, 3], mask_token_id=503,
                     num_attention_heads=8, rms_norm_eps=1e-5),
}
# The Flash-shaped benchmark checkpoint's drafter: the released Flash drafter's structure (5
# layers, head_dim 128, q heads 2 x hidden / 128... here 16 q / 4 kv heads, window 1024, 3
# target layers ending at the last) scaled so that its bytes are about a quarter of one decode
# token's target bytes (~160 MB BF16 against ~611 MB), near the released pair's ratio (2.9 GB of
# drafter against ~15 GB of active FP8 weights), for `mimo bench spec --speculative dflash`.
DFLASH["bench-flash-fp8"] = dict(DFLASH_BASE, target_layer_ids=[0, 3, 7], mask_token_id=32000,
                                 num_hidden_layers=5, num_attention_heads=16,
                                 num_key_value_heads=4, head_dim=128, intermediate_size=512,
                                 sliding_window=1024)
assert set(VARIANTS) <= set(DFLASH) <= set(VARIANTS) | set(BENCH_VARIANTS)
DFLASH_SEED_OFFSET = 7919

# ----------------------------------------------------------------------------------------------
# Storage encodings (own code, independent of the reference's decoder).
def _e4m3_positive_table():
    """Values of codes 0x00..0x7E (all finite non-negative E4M3 values, increasing)."""
    vals = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        vals.append(m / 8.0 * 2.0 ** -6 if e == 0 else (1.0 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(vals, dtype=np.float64)


_E4M3_POS = _e4m3_positive_table()


def encode_e4m3(x: np.ndarray) -> np.ndarray:
    """Round to nearest E4M3 value (ties to the even code), saturating at +-448."""
    a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    hi = np.clip(np.searchsorted(_E4M3_POS, a), 1, 0x7E)
    lo = hi - 1
    dlo, dhi = a - _E4M3_POS[lo], _E4M3_POS[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = code.astype(np.uint8)
    return np.where(x < 0, code | 0x80, code).astype(np.uint8)


_E2M1_POS = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # OCP MX E2M1 magnitudes, codes 0-7


def encode_e2m1(x: np.ndarray) -> np.ndarray:
    """Round to the nearest E2M1 value (ties to the even code), saturating at +-6; bit 3 = sign."""
    a = np.minimum(np.abs(x.astype(np.float64)), 6.0)
    hi = np.clip(np.searchsorted(_E2M1_POS, a), 1, 7)
    lo = hi - 1
    dlo, dhi = a - _E2M1_POS[lo], _E2M1_POS[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.where(x < 0, code | 8, code).astype(np.uint8)


def quantize_mxfp4(w: np.ndarray, rng, vary_magnitude=True, block=32):
    """MXFP4 over w [R, K] (K even): per row and 32-column block the weights are scaled by g in
    [0.3, 3] (log-uniform), the exponent is 127 + ceil(log2(amax / 6)) + h (h in 0..2 of headroom),
    codes are the nearest E2M1 of x / 2^(e - 127). Returns (packed uint8 [R, K/2]: element 2i in
    the low nibble of byte i, exponents uint8 [R, ceil(K/32)])."""
    R, K = w.shape
    nb = -(-K // block)
    pad = np.zeros((R, nb * block))
    pad[:, :K] = w
    blocks = pad.reshape(R, nb, block)
    if vary_magnitude:
        blocks = blocks * np.exp(rng.uniform(np.log(0.3), np.log(3.0), (R, nb, 1)))
    amax = np.maximum(np.abs(blocks).max(-1), 1e-30)
    e = 127 + np.ceil(np.log2(amax / 6.0)).astype(np.int64) + rng.integers(0, 3, (R, nb))
    e = np.clip(e, 1, 254)
    codes = encode_e2m1(blocks / np.exp2(e - 127.0)[:, :, None]).reshape(R, nb * block)[:, :K]
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, e.astype(np.uint8)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def quantize_grid(w: np.ndarray, rng, vary_magnitude=True):
    """One 128x128 block grid over w [R, K] (a short last block row / column is allowed). Per
    block: the weights are scaled by g in [0.3, 3] (log-uniform; g = 1 without vary_magnitude) and
    the scale is amax/448 * f, f in [1, 20], so neighbouring blocks have very different scale_inv.
    Returns (codes uint8, scale f32)."""
    R, K = w.shape
    rb, cb = -(-R // BLOCK), -(-K // BLOCK)
    codes = np.zeros((R, K), np.uint8)
    scale = np.zeros((rb, cb), np.float32)
    for i in range(rb):
        for j in range(cb):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            if vary_magnitude:
                blk = blk * np.exp(rng.uniform(np.log(0.3), np.log(3.0)))
            amax = float(np.abs(blk).max()) if blk.size else 1.0
            s = np.float32(max(amax, 1e-6) / 448.0 * np.exp(rng.uniform(0.0, np.log(20.0))))
            scale[i, j] = s
            codes[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = encode_e4m3(blk / float(s))
    return codes, scale


# ----------------------------------------------------------------------------------------------
class Builder:
    def __init__(self, spec: dict, seed: int):
        self.s = spec
        self.rng = np.random.default_rng(seed)
        self.tensors = {}  # name -> (dtype, shape, bytes)
        self.fp8 = spec["dtype"] == "fp8"
        self.fdt = "F32" if spec["dtype"] == "f32" else "BF16"
        self.vary_magnitude = True  # per-block weight magnitudes (off in round-trip tests)

    # -- storing ---------------------------------------------------------------------------
    def put_float(self, name, a, dtype=None):
        dtype = dtype or self.fdt
        if dtype == "F32":
            data = a.astype("<f4").tobytes()
        else:
            data = to_bf16_bits(a).astype("<u2").tobytes()
        self.tensors[name] = (dtype, list(a.shape), data)

    def put_fp8(self, name, codes, scale):
        self.tensors[name] = ("F8_E4M3", list(codes.shape), codes.tobytes())
        self.tensors[name + "_scale_inv"] = ("F32", list(scale.shape), scale.astype("<f4").tobytes())

    def put_mxfp4(self, name, packed, exps):
        self.tensors[name] = ("U8", list(packed.shape), packed.tobytes())
        self.tensors[name + "_scale"] = ("U8", list(exps.shape), exps.tobytes())

    def put_proj(self, name, w):
        """A projection: FP8 uniform grid in fp8 variants, else the float dtype."""
        if self.fp8:
            self.put_fp8(name, *quantize_grid(w, self.rng, self.vary_magnitude))
        else:
            self.put_float(name, w)

    # -- random values ---------------------------------------------------------------------
    def randn(self, *shape, std=1.0):
        return self.rng.standard_normal(shape) * std

    def norm_w(self, n):
        return 1.0 + 0.2 * self.randn(n)

    # -- blocks ----------------------------------------------------------------------------
    def attention(self, p, sliding, mtp=False):
        s = self.s
        H = s["hidden_size"]
        pre = "swa_" if sliding else ""
        nh, nkv = s[pre + "num_attention_heads"], s[pre + "num_key_value_heads"]
        dqk, dv = s[pre + "head_dim"], s[pre + "v_head_dim"]
        q = self.randn(nh * dqk, H, std=2.0 / np.sqrt(H))  # sharper attention than N(0,1) scores
        k = self.randn(nkv * dqk, H, std=1.5 / np.sqrt(H))
        v = self.randn(nkv * dv, H, std=1.0 / np.sqrt(H))
        tp = s["num_key_value_heads"]
        if s.get("fused_qkv"):
            self.fused_qkv(p + "qkv_proj.weight", q, k, v, tp, nh, nkv, dqk, dv)
        elif self.fp8 and not sliding and not mtp:
            self.sectioned_qkv(p, q, k, v, tp, nh, nkv, dqk, dv)
        else:
            self.put_proj(p + "q_proj.weight", q)
            self.put_proj(p + "k_proj.weight", k)
            self.put_proj(p + "v_proj.weight", v)
        self.put_float(p + "o_proj.weight", self.randn(H, nh * dv, std=1.0 / np.sqrt(nh * dv)))
        sinks = s.get("add_swa_attention_sink_bias", True) if sliding else \
            s.get("add_full_attention_sink_bias", False)
        if sinks:
            self.put_float(p + "attention_sink_bias", self.rng.uniform(-1.0, 2.5, nh))

    def _sections(self, q, k, v, tp, nh, nkv, dqk, dv):
        qs, g = (nh // tp) * dqk, nkv // tp
        return [np.concatenate([q[t * qs:(t + 1) * qs], k[t * g * dqk:(t + 1) * g * dqk],
                                v[t * g * dv:(t + 1) * g * dv]]) for t in range(tp)]

    def sectioned_qkv(self, p, q, k, v, tp, nh, nkv, dqk, dv):
        """Flash full attention: each TP section [Q_s;K_s;V_s] is ONE block grid; separate tensors."""
        qs, g = (nh // tp) * dqk, nkv // tp
        assert qs % BLOCK == 0, "the Q part of a section must be block-aligned"
        qc, kc, vc, qsc, ksc, vsc = [], [], [], [], [], []
        for sec in self._sections(q, k, v, tp, nh, nkv, dqk, dv):
            codes, scale = quantize_grid(sec, self.rng, self.vary_magnitude)
            qc.append(codes[:qs])
            kc.append(codes[qs:qs + g * dqk])
            vc.append(codes[qs + g * dqk:])
            starts = np.arange(scale.shape[0]) * BLOCK  # where each block row starts in the section
            qsc.append(scale[starts < qs])
            ksc.append(scale[(starts >= qs) & (starts < qs + g * dqk)])
            vsc.append(scale[starts >= qs + g * dqk])
        self.put_fp8(p + "q_proj.weight", np.concatenate(qc), np.concatenate(qsc))
        self.put_fp8(p + "k_proj.weight", np.concatenate(kc), np.concatenate(ksc))
        self.put_fp8(p + "v_proj.weight", np.concatenate(vc), np.concatenate(vsc))

    def fused_qkv(self, name, q, k, v, tp, nh, nkv, dqk, dv):
        secs = self._sections(q, k, v, tp, nh, nkv, dqk, dv)
        if not self.fp8:
            self.put_float(name, np.concatenate(secs))
            return
        parts = [quantize_grid(sec, self.rng, self.vary_magnitude) for sec in secs]
        self.put_fp8(name, np.concatenate([c for c, _ in parts]), np.concatenate([s for _, s in parts]))

    def dense_mlp(self, p, inter, expert=False):
        H = self.s["hidden_size"]
        put = self.put_proj
        if expert and self.s.get("experts") == "mxfp4":  # V2.6: only routed experts are MXFP4
            put = lambda name, w: self.put_mxfp4(name, *quantize_mxfp4(w, self.rng,
                                                                       self.vary_magnitude))
        put(p + "gate_proj.weight", self.randn(inter, H, std=1.0 / np.sqrt(H)))
        put(p + "up_proj.weight", self.randn(inter, H, std=1.0 / np.sqrt(H)))
        put(p + "down_proj.weight", self.randn(H, inter, std=1.0 / np.sqrt(inter)))

    def moe(self, p):
        s = self.s
        H, E = s["hidden_size"], s["n_routed_experts"]
        # Router logits ~ N(0, 1.5^2); the correction bias (+-0.35) is large enough to change the
        # selected experts for a good share of the tokens.
        wdt, bdt = s.get("router_dtype", ("F32", "F32"))
        self.put_float(p + "gate.weight", self.randn(E, H, std=1.5 / np.sqrt(H)), wdt)
        self.put_float(p + "gate.e_score_correction_bias", self.rng.uniform(-0.35, 0.35, E), bdt)
        for e in range(E):
            self.dense_mlp(f"{p}experts.{e}.", s["moe_intermediate_size"], expert=True)

    def build(self):
        s = self.s
        H, V = s["hidden_size"], s["vocab_size"]
        # Tied: the embedding doubles as the head, so keep its logits in the untied range (~3).
        std = 3.0 / np.sqrt(H) if s.get("tie_word_embeddings") else 1.0
        self.put_float("model.embed_tokens.weight", self.randn(V, H, std=std))
        for l in range(s["num_hidden_layers"]):
            p = f"model.layers.{l}."
            self.put_float(p + "input_layernorm.weight", self.norm_w(H))
            self.put_float(p + "post_attention_layernorm.weight", self.norm_w(H))
            self.attention(p + "self_attn.", s["hybrid_layer_pattern"][l] == 1)
            if s["moe_layer_freq"][l]:
                self.moe(p + "mlp.")
            else:
                self.dense_mlp(p + "mlp.", s["intermediate_size"])
        self.put_float("model.norm.weight", self.norm_w(H))
        if not s.get("tie_word_embeddings"):
            self.put_float("lm_head.weight", self.randn(V, H, std=3.0 / np.sqrt(H)))
        for i in range(s["mtp_layers"]):
            p = f"model.mtp.layers.{i}."
            self.put_float(p + "enorm.weight", self.norm_w(H))
            self.put_float(p + "hnorm.weight", self.norm_w(H))
            self.put_float(p + "eh_proj.weight", self.randn(H, 2 * H, std=1.0 / np.sqrt(2 * H)))
            self.put_float(p + "input_layernorm.weight", self.norm_w(H))
            self.attention(p + "self_attn.", True, mtp=True)
            self.put_float(p + "pre_mlp_layernorm.weight", self.norm_w(H))
            self.dense_mlp(p + "mlp.", s["intermediate_size"])
            self.put_float(p + "final_layernorm.weight", self.norm_w(H))
        if s.get("omni"):
            self.put_float("visual.patch_embed.proj.weight", self.randn(64, 3, 2, 4, 4), "BF16")
            self.put_float("visual.blocks.0.attn.qkv.weight", self.randn(192, 64), "BF16")
            self.put_float("visual.blocks.0.norm1.weight", self.norm_w(64), "BF16")
            self.put_float("visual.merger.mlp.0.weight", self.randn(H, 256), "BF16")
            self.put_float("audio_encoder.layers.0.self_attn.q_proj.weight", self.randn(64, 64), "BF16")
            self.put_float("audio_encoder.conv1.weight", self.randn(64, 16, 3), "F32")
            self.put_float("speech_embeddings.weight", self.randn(32, H), "BF16")
        return self.tensors

    def config(self):
        s = self.s
        L = s["num_hidden_layers"]
        cfg = {
            "architectures": s.get("architectures", ["MiMoV2FlashForCausalLM"]),
            "model_type": s.get("model_type", "mimo_v2_flash"),
            "vocab_size": s["vocab_size"], "hidden_size": s["hidden_size"],
            "intermediate_size": s["intermediate_size"],
            "moe_intermediate_size": s["moe_intermediate_size"],
            "num_hidden_layers": L, "max_position_embeddings": 262144,
            "num_attention_heads": s["num_attention_heads"],
            "num_key_value_heads": s["num_key_value_heads"],
            "head_dim": s["head_dim"], "v_head_dim": s["v_head_dim"],
            "swa_num_attention_heads": s["swa_num_attention_heads"],
            "swa_num_key_value_heads": s["swa_num_key_value_heads"],
            "swa_head_dim": s["swa_head_dim"], "swa_v_head_dim": s["swa_v_head_dim"],
            "hybrid_layer_pattern": s["hybrid_layer_pattern"], "hybrid_block_size": None,
            "sliding_window": s.get("sliding_window", 8),
            "sliding_window_size": s.get("sliding_window", 8),
            "attention_chunk_size": s.get("sliding_window", 8),
            "rope_theta": s.get("rope_theta", 5000000), "swa_rope_theta": 10000,
            "partial_rotary_factor": s["partial_rotary_factor"], "rope_scaling": None,
            "layernorm_epsilon": s.get("layernorm_epsilon", 1e-5), "hidden_act": "silu",
            "attention_bias": False,
            "add_swa_attention_sink_bias": True,
            "add_full_attention_sink_bias": bool(s.get("add_full_attention_sink_bias", False)),
            "attention_value_scale": s.get("attention_value_scale", 0.707),
            "tie_word_embeddings": bool(s.get("tie_word_embeddings", False)),
            "n_routed_experts": s["n_routed_experts"],
            "num_experts_per_tok": s["num_experts_per_tok"],
            "moe_layer_freq": s["moe_layer_freq"], "n_shared_experts": None,
            "n_group": s["n_group"], "topk_group": s["topk_group"],
            "scoring_func": "sigmoid", "topk_method": "noaux_tc",
            "norm_topk_prob": bool(s.get("norm_topk_prob", True)),
            "routed_scaling_factor": s["routed_scaling_factor"],
            "torch_dtype": "float32" if s["dtype"] == "f32" else "bfloat16",
            "eos_token_id": s.get("eos_token_id", 2), "pad_token_id": s.get("pad_token_id", 0),
        }
        if s.get("num_nextn_predict_layers"):
            cfg["num_nextn_predict_layers"] = s["mtp_layers"]
        if s.get("rope_parameters"):
            cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg["rope_theta"],
                                      "partial_rotary_factor": cfg["partial_rotary_factor"]}
            if s["rope_parameters"] == "only":
                del cfg["rope_theta"], cfg["partial_rotary_factor"]
        if s["dtype"] == "fp8":
            cfg["quantization_config"] = {
                "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [BLOCK, BLOCK],
                "ignored_layers": [f"model.layers.{l}.self_attn.o_proj" for l in range(L)]}
        if s.get("experts") == "mxfp4":
            cfg["quantization_config"]["store_dtype"] = "mxfp4"
            cfg["quantization_config"]["mxfp4_block_size"] = 32
        if s.get("router_dtype", ("F32",))[0] == "BF16":
            cfg["moe_router_dtype"] = "bfloat16"
        if s.get("omni"):
            cfg["vision_config"] = {"hidden_size": 64, "depth": 1, "patch_size": 4}
            cfg["audio_config"] = {"d_model": 64, "encoder_layers": 1}
        return cfg


# ----------------------------------------------------------------------------------------------
def write_safetensors(path, tensors: dict):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def dflash_config(variant, target_cfg):
    d = DFLASH[variant]
    dc = {"target_layer_ids": list(d["target_layer_ids"]), "mask_token_id": d["mask_token_id"],
          "use_swa": True, "swa_window_size": d["sliding_window"],
          "backbone_rotary_base": 5000000, "attention_value_scale": 0.612,
          "attention_sink_bias": True, "block_size": d["block_size"]}
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": target_cfg["hidden_size"], "intermediate_size": d["intermediate_size"],
        "num_hidden_layers": d["num_hidden_layers"],
        "num_attention_heads": d["num_attention_heads"],
        "num_key_value_heads": d["num_key_value_heads"], "head_dim": d["head_dim"],
        "partial_rotary_factor": 0.5, "rope_theta": 10000,
        "sliding_window": d["sliding_window"], "rms_norm_eps": d["rms_norm_eps"],
        "block_size": d["block_size"], "num_target_layers": target_cfg["num_hidden_layers"],
        "vocab_size": target_cfg["vocab_size"], "tie_word_embeddings": False,
        "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "dflash_config": dc,
    }


def dflash_tensors(cfg, seed):
    """(tensors name -> (dtype, shape, bytes), names without a prefix; the mask embedding's
    N(0,1) direction [H], scaled by the caller). Norm weights 1 + 0.1 N(0,1), matrices with
    std 1/sqrt(fan_in), sinks N(0,1)."""
    rng = np.random.default_rng(seed)
    H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    n_ids = len(cfg["dflash_config"]["target_layer_ids"])
    out = {}

    def put(name, a):
        out[name] = ("BF16", list(a.shape), to_bf16_bits(a).astype("<u2").tobytes())

    def mat(name, rows, cols):
        put(name, rng.standard_normal((rows, cols)) / np.sqrt(cols))

    def norm(name, n):
        put(name, 1.0 + 0.1 * rng.standard_normal(n))

    mat("fc.weight", H, n_ids * H)
    norm("hidden_norm.weight", H)
    norm("norm.weight", H)
    for i in range(L):
        p = f"layers.{i}."
        norm(p + "input_layernorm.weight", H)
        norm(p + "post_attention_layernorm.weight", H)
        mat(p + "self_attn.q_proj.weight", nh * hd, H)
        mat(p + "self_attn.k_proj.weight", nkv * hd, H)
        mat(p + "self_attn.v_proj.weight", nkv * hd, H)
        mat(p + "self_attn.o_proj.weight", H, nh * hd)
        norm(p + "self_attn.q_norm.weight", hd)
        norm(p + "self_attn.k_norm.weight", hd)
        put(p + "self_attn.attention_sink_bias", rng.standard_normal(nh))
        mat(p + "mlp.gate_proj.weight", I, H)
        mat(p + "mlp.up_proj.weight", I, H)
        mat(p + "mlp.down_proj.weight", H, I)
    return out, rng.standard_normal(H)


def write_dflash(out_dir, variant, target_cfg, target_tensors, seed):
    """<out_dir>/dflash/ for a VARIANTS entry (see DFLASH)."""
    import torch  # only the mask sidecar (a torch pickle, as released) needs it

    d = DFLASH[variant]
    ddir = os.path.join(out_dir, "dflash")
    os.makedirs(ddir, exist_ok=True)
    cfg = dflash_config(variant, target_cfg)
    with open(os.path.join(ddir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tensors, mask = dflash_tensors(cfg, seed)
    tensors = {d["prefix"] + n: t for n, t in tensors.items()}
    names = sorted(tensors)
    if d["shards"] == 1:
        files = {"dflash_draft_model.safetensors": tensors}
    else:
        files = {}
        for i, n in enumerate(names):
            fn = f"dflash_draft_model-{i % d['shards'] + 1:05d}-of-{d['shards']:05d}.safetensors"
            files.setdefault(fn, {})[n] = tensors[n]
    for fn, part in files.items():
        write_safetensors(os.path.join(ddir, fn), part)
    weight_map = {n: fn for fn, part in files.items() for n in part}
    total = sum(len(t[2]) for t in tensors.values())
    with open(os.path.join(ddir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
                  f, indent=2)
    # The mask vector: random direction, RMS 0.3x that of the target's embedding row at the mask
    # id (the released vocab row is ~0 and the sidecar is not: they must not be interchangeable).
    m, H = cfg["dflash_config"]["mask_token_id"], cfg["hidden_size"]
    dtype, shape, data = target_tensors["model.embed_tokens.weight"]
    if dtype == "F32":
        row = np.frombuffer(data, dtype="<f4").reshape(shape)[m].astype(np.float64)
    else:
        bits = np.frombuffer(data, dtype="<u2").reshape(shape)[m].astype(np.uint32)
        row = (bits << 16).view(np.float32).astype(np.float64)
    mask = mask * 0.3 * np.sqrt(np.mean(row ** 2))
    emb = torch.from_numpy(to_bf16_bits(mask).view(np.int16).copy()).view(torch.bfloat16)
    obj = emb if d["mask_format"] == "tensor" else {"mask_token_id": m, "embedding": emb}
    torch.save(obj, os.path.join(ddir, "mask_embedding.pt"))


def write_checkpoint(out_dir, variant, seed=0):
    if variant not in ALL_VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}; choose from {', '.join(ALL_VARIANTS)}")
    # bf16-sharded is the bf16 model split over 3 files (same seed), so their logits are equal
    # (and so are their drafters').
    if ALL_VARIANTS[variant].get("dequant_of"):
        import shutil
        import tempfile
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
        import dequant_fp8_to_bf16
        tmp = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(out_dir)) or None)
        try:
            write_checkpoint(tmp, ALL_VARIANTS[variant]["dequant_of"], seed)
            dequant_fp8_to_bf16.main([tmp, out_dir])
        finally:
            shutil.rmtree(tmp)
        return
    base = ALL_VARIANTS[variant].get("same_model_as", variant)
    target_seed = seed * 1000 + SEED_ORDER.index(base)
    cfg, tensors = _write_target(out_dir, variant, target_seed)
    if variant in DFLASH:
        write_dflash(out_dir, variant, cfg, tensors, target_seed + DFLASH_SEED_OFFSET)


def _write_target(out_dir, variant, target_seed):
    """The target checkpoint; returns (config dict, tensors)."""
    spec = ALL_VARIANTS[variant]
    os.makedirs(out_dir, exist_ok=True)
    b = Builder(spec, target_seed)
    tensors = b.build()
    cfg = b.config()
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shards = spec.get("shards", 1)
    if shards == 1 and not spec.get("mtp_file"):
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
        return cfg, tensors
    files = {}
    names = sorted(tensors)
    for i, n in enumerate(names):
        if spec.get("mtp_file"):
            fn = "model_mtp.safetensors" if n.startswith("model.mtp.") else "model.safetensors"
        else:  # round-robin: a layer's tensors (and a weight's scale) land in different shards
            fn = f"model-{i % shards + 1:05d}-of-{shards:05d}.safetensors"
        files.setdefault(fn, {})[n] = tensors[n]
    for fn, part in files.items():
        write_safetensors(os.path.join(out_dir, fn), part)
    weight_map = {n: fn for fn, part in files.items() for n in part}
    total = sum(len(t[2]) for t in tensors.values())
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
                  f, indent=2)
    return cfg, tensors


# ----------------------------------------------------------------------------------------------
# Full-size checkpoints as sparse files: the real config.json and every tensor's real name, dtype
# and shape (spec sections 1, 3 and 4), data left as holes. Values not in the spec are marked
# INFERRED where they are used.
def _flash_pattern(L):
    return [0 if (i == 0 or (i + 1) % 6 == 0) else 1 for i in range(L)]


_PRO_FULL_LAYERS = {0, 7, 15, 23, 31, 39, 47, 55, 62, 69}  # spec section 1 (RPT-25P)

FULL_SIZE = {
    "flash": dict(
        architectures=["MiMoV2FlashForCausalLM"], model_type="mimo_v2_flash", hidden_size=4096,
        num_hidden_layers=48, num_attention_heads=64, num_key_value_heads=4,
        swa_num_attention_heads=64, swa_num_key_value_heads=8, n_routed_experts=256,
        hybrid_layer_pattern=_flash_pattern(48), rope_theta=5000000, layernorm_epsilon=1e-5,
        attention_value_scale=0.707, max_position_embeddings=262144, qkv="separate",
        experts="fp8", router=("F32", "F32"), omni=False, mtp_file=True),
    "v2.5": dict(
        architectures=["MiMoV2ForCausalLM"], model_type="mimo_v2", hidden_size=4096,
        num_hidden_layers=48, num_attention_heads=64, num_key_value_heads=4,
        swa_num_attention_heads=64, swa_num_key_value_heads=8, n_routed_experts=256,
        hybrid_layer_pattern=_flash_pattern(48), rope_theta=10000000, layernorm_epsilon=1e-5,
        attention_value_scale=0.707, max_position_embeddings=1048576, qkv="fused",
        experts="fp8", router=("F32", "F32"), omni=True),
    "v2.5-pro": dict(
        architectures=["MiMoV2ForCausalLM"], model_type="mimo_v2", hidden_size=6144,
        num_hidden_layers=70, num_attention_heads=128, num_key_value_heads=8,
        swa_num_attention_heads=128, swa_num_key_value_heads=8, n_routed_experts=384,
        hybrid_layer_pattern=[0 if i in _PRO_FULL_LAYERS else 1 for i in range(70)],
        rope_theta=10000000, layernorm_epsilon=1e-5, attention_value_scale=0.612,
        max_position_embeddings=1048576, qkv="fused", experts="fp8", router=("F32", "F32"),
        omni=False),
    "v2.6-flash": dict(
        architectures=["MiMoV2ForCausalLM"], model_type="mimo_v2", hidden_size=4096,
        num_hidden_layers=48, num_attention_heads=64, num_key_value_heads=4,
        swa_num_attention_heads=64, swa_num_key_value_heads=8, n_routed_experts=256,
        hybrid_layer_pattern=_flash_pattern(48), rope_theta=10000000, layernorm_epsilon=1e-6,
        attention_value_scale=0.707, max_position_embeddings=1048576, qkv="fused",
        experts="mxfp4", router=("BF16", "F32"), omni=True, nextn_key=True),
    "v2.6-pro": dict(
        architectures=["MiMoV2ForCausalLM"], model_type="mimo_v2", hidden_size=6144,
        num_hidden_layers=70, num_attention_heads=128, num_key_value_heads=8,
        swa_num_attention_heads=128, swa_num_key_value_heads=8, n_routed_experts=384,
        hybrid_layer_pattern=[0 if i in _PRO_FULL_LAYERS else 1 for i in range(70)],
        rope_theta=10000000, layernorm_epsilon=1e-5, attention_value_scale=0.612,
        max_position_embeddings=1048576, qkv="fused", experts="mxfp4", router=("BF16", "F32"),
        omni=False),
}


def full_size_config(name):
    f = FULL_SIZE[name]
    L = f["num_hidden_layers"]
    cfg = {
        "architectures": f["architectures"], "model_type": f["model_type"],
        "vocab_size": 152576, "hidden_size": f["hidden_size"],
        # INFERRED for the Pro models: 16384, from the FP8 byte count of a V2.6-Pro header.
        "intermediate_size": 16384, "moe_intermediate_size": 2048, "num_hidden_layers": L,
        "max_position_embeddings": f["max_position_embeddings"],
        "num_attention_heads": f["num_attention_heads"],
        "num_key_value_heads": f["num_key_value_heads"], "head_dim": 192, "v_head_dim": 128,
        "swa_num_attention_heads": f["swa_num_attention_heads"],
        "swa_num_key_value_heads": f["swa_num_key_value_heads"], "swa_head_dim": 192,
        "swa_v_head_dim": 128, "hybrid_layer_pattern": f["hybrid_layer_pattern"],
        "hybrid_block_size": None, "sliding_window": 128, "sliding_window_size": 128,
        "attention_chunk_size": 128, "rope_theta": f["rope_theta"], "swa_rope_theta": 10000,
        "partial_rotary_factor": 0.334, "rope_scaling": None,
        "layernorm_epsilon": f["layernorm_epsilon"], "hidden_act": "silu", "attention_bias": False,
        "add_swa_attention_sink_bias": True, "add_full_attention_sink_bias": False,
        "attention_value_scale": f["attention_value_scale"], "tie_word_embeddings": False,
        "n_routed_experts": f["n_routed_experts"], "num_experts_per_tok": 8,
        "moe_layer_freq": [0] + [1] * (L - 1), "n_shared_experts": None, "n_group": 1,
        "topk_group": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
        "norm_topk_prob": True, "routed_scaling_factor": None, "torch_dtype": "bfloat16",
        "eos_token_id": 151645, "pad_token_id": 151643,
        "quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": [BLOCK, BLOCK],
            "ignored_layers": [f"model.layers.{l}.self_attn.o_proj" for l in range(L)]},
    }
    if f["qkv"] == "fused":
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": f["rope_theta"],
                                  "partial_rotary_factor": 0.334}
    if f["experts"] == "mxfp4":
        cfg["quantization_config"].update(store_dtype="mxfp4", mxfp4_block_size=32)
    if f["router"][0] == "BF16":
        cfg["moe_router_dtype"] = "bfloat16"
    if f.get("nextn_key"):
        cfg["num_nextn_predict_layers"] = 3
    if f["omni"]:
        cfg["vision_config"] = {"depth": 32, "hidden_size": 1280, "patch_size": 14}
        cfg["audio_config"] = {"encoder_layers": 32, "d_model": 1280}
    return cfg


def full_size_tensors(name):
    """[(name, dtype, shape)] of the full-size checkpoint, in binding order."""
    f, cfg = FULL_SIZE[name], full_size_config(name)
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    I, MI, E = cfg["intermediate_size"], cfg["moe_intermediate_size"], cfg["n_routed_experts"]
    out = []

    def fp8(n, rows, cols):
        out.append((n + ".weight", "F8_E4M3", [rows, cols]))
        out.append((n + ".weight_scale_inv", "F32", [-(-rows // BLOCK), -(-cols // BLOCK)]))

    def mxfp4(n, rows, cols):
        out.append((n + ".weight", "U8", [rows, cols // 2]))
        out.append((n + ".weight_scale", "U8", [rows, cols // 32]))

    def attention(p, sliding):
        pre = "swa_" if sliding else ""
        nh, nkv = cfg[pre + "num_attention_heads"], cfg[pre + "num_key_value_heads"]
        if f["qkv"] == "fused":  # TP = num_key_value_heads sections, ceil(section / 128) rows each
            tp = cfg["num_key_value_heads"]
            sec = nh // tp * 192 + nkv // tp * (192 + 128)
            out.append((p + "qkv_proj.weight", "F8_E4M3", [tp * sec, H]))
            out.append((p + "qkv_proj.weight_scale_inv", "F32",
                        [tp * -(-sec // BLOCK), -(-H // BLOCK)]))
        else:
            fp8(p + "q_proj", nh * 192, H)
            if sliding:
                fp8(p + "k_proj", nkv * 192, H)
                fp8(p + "v_proj", nkv * 128, H)
            else:  # Flash full layers: the per-TP-section grid, 2 k rows and 1 v row per kv head
                out.extend([(p + "k_proj.weight", "F8_E4M3", [nkv * 192, H]),
                            (p + "k_proj.weight_scale_inv", "F32", [2 * nkv, -(-H // BLOCK)]),
                            (p + "v_proj.weight", "F8_E4M3", [nkv * 128, H]),
                            (p + "v_proj.weight_scale_inv", "F32", [nkv, -(-H // BLOCK)])])
        out.append((p + "o_proj.weight", "BF16", [H, nh * 128]))
        if sliding:
            out.append((p + "attention_sink_bias", "BF16", [nh]))

    def dense(p, inter, quant):
        for proj, r, c in (("gate_proj", inter, H), ("up_proj", inter, H), ("down_proj", H, inter)):
            quant(p + proj, r, c)

    def vec(n, size=H):
        out.append((n, "BF16", [size]))

    out.append(("model.embed_tokens.weight", "BF16", [V, H]))
    for l in range(L):
        p = f"model.layers.{l}."
        vec(p + "input_layernorm.weight")
        vec(p + "post_attention_layernorm.weight")
        attention(p + "self_attn.", cfg["hybrid_layer_pattern"][l] == 1)
        if cfg["moe_layer_freq"][l]:
            out.append((p + "mlp.gate.weight", f["router"][0], [E, H]))
            out.append((p + "mlp.gate.e_score_correction_bias", f["router"][1], [E]))
            for e in range(E):
                dense(f"{p}mlp.experts.{e}.", MI, mxfp4 if f["experts"] == "mxfp4" else fp8)
        else:
            dense(p + "mlp.", I, fp8)
    vec("model.norm.weight")
    out.append(("lm_head.weight", "BF16", [V, H]))
    for i in range(3):  # 3 MTP layers (spec section 3; INFERRED for the Pro models)
        p = f"model.mtp.layers.{i}."
        for n in ("enorm", "hnorm", "input_layernorm"):
            vec(p + n + ".weight")
        out.append((p + "eh_proj.weight", "BF16", [H, 2 * H]))
        attention(p + "self_attn.", True)
        vec(p + "pre_mlp_layernorm.weight")
        dense(p + "mlp.", I, fp8)
        vec(p + "final_layernorm.weight")
    if f["omni"]:  # vision and audio towers (names and sizes illustrative, INFERRED)
        W = 1280
        for b in range(32):
            q, a = f"visual.blocks.{b}.", f"audio_encoder.layers.{b}."
            for n, shape in (("norm1", [W]), ("attn.qkv", [3 * W, W]), ("attn.proj", [W, W]),
                             ("norm2", [W]), ("mlp.fc1", [4 * W, W]), ("mlp.fc2", [W, 4 * W])):
                out.append((q + n + ".weight", "BF16", shape))
            for n, shape in (("self_attn.q_proj", [W, W]), ("self_attn.k_proj", [W, W]),
                             ("self_attn.v_proj", [W, W]), ("self_attn.out_proj", [W, W]),
                             ("fc1", [4 * W, W]), ("fc2", [W, 4 * W])):
                out.append((a + n + ".weight", "BF16", shape))
        out.extend([("visual.patch_embed.proj.weight", "BF16", [W, 3, 2, 14, 14]),
                    ("visual.merger.mlp.0.weight", "BF16", [H, 4 * W]),
                    ("audio_encoder.conv1.weight", "BF16", [W, 128, 3]),
                    ("speech_embeddings.weight", "BF16", [4096, H])])
    return out


def write_sparse_safetensors(path, tensors):
    """Header with real offsets; the data area is a hole of its real size (seek + truncate)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in tensors:
        size = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}[dtype]
        n = int(np.prod(shape, dtype=np.int64)) * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        f.truncate(8 + len(hb) + offset)
    return offset


def write_full_size(out_dir, name, layers_per_shard=4):
    """The full-size `name` checkpoint as sparse shards + model.safetensors.index.json."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(full_size_config(name), f, indent=2)
    shards = {}
    for n, dtype, shape in full_size_tensors(name):
        if n.startswith("model.layers."):
            key = int(n.split(".")[2]) // layers_per_shard + 1
        elif n.startswith("model.mtp.") and FULL_SIZE[name].get("mtp_file"):
            key = "mtp"
        else:
            key = 0
        shards.setdefault(key, []).append((n, dtype, shape))
    numbered = sorted(k for k in shards if k != "mtp")
    total, weight_map = 0, {}
    for i, k in enumerate(numbered):
        fn = f"model-{i + 1:05d}-of-{len(numbered):05d}.safetensors"
        total += write_sparse_safetensors(os.path.join(out_dir, fn), shards[k])
        weight_map.update({n: fn for n, _, _ in shards[k]})
    if "mtp" in shards:
        total += write_sparse_safetensors(os.path.join(out_dir, "model_mtp.safetensors"),
                                          shards["mtp"])
        weight_map.update({n: "model_mtp.safetensors" for n, _, _ in shards["mtp"]})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--full-size", choices=sorted(FULL_SIZE),
                    help="a full-size checkpoint of this sibling (needs --sparse)")
    ap.add_argument("--sparse", action="store_true", help="with --full-size: data left as holes")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(VARIANTS))
        return 0
    if not a.out:
        ap.error("--out is required")
    if a.full_size:
        if not a.sparse:
            ap.error("--full-size writes hundreds of GB of weights; only --sparse is supported")
        write_full_size(a.out, a.full_size)
        return 0
    write_checkpoint(a.out, a.variant, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
