"""`mimo inspect --max-context`: KV memory of sliding-window layers is constant in the context
length, full layers grow linearly, at the real MiMo-V2-Flash geometry (config values from the spec,
section 1) as well as on a generated checkpoint."""
import json
import os
import struct
import subprocess

import pytest

FLASH_CONFIG = {
    "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash",
    "vocab_size": 152576, "hidden_size": 4096, "intermediate_size": 16384,
    "moe_intermediate_size": 2048, "num_hidden_layers": 48, "max_position_embeddings": 262144,
    "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128,
    "swa_num_attention_heads": 64, "swa_num_key_value_heads": 8, "swa_head_dim": 192,
    "swa_v_head_dim": 128,
    "hybrid_layer_pattern": [0 if (i == 0 or (i + 1) % 6 == 0) else 1 for i in range(48)],
    "sliding_window": 128, "rope_theta": 5000000, "swa_rope_theta": 10000,
    "partial_rotary_factor": 0.334, "layernorm_epsilon": 1e-5, "hidden_act": "silu",
    "add_swa_attention_sink_bias": True, "add_full_attention_sink_bias": False,
    "attention_value_scale": 0.707, "tie_word_embeddings": False, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "moe_layer_freq": [0] + [1] * 47, "n_shared_experts": None,
    "n_group": 1, "topk_group": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    "norm_topk_prob": True, "routed_scaling_factor": None,
}


def inspect(mimo_bin, model, ctx, dtype="bf16", block=16):
    p = subprocess.run([mimo_bin, "inspect", "--model", model, "--json", "--max-context", str(ctx),
                        "--kv-cache-dtype", dtype, "--block-size", str(block)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["kv_cache"]


@pytest.fixture(scope="module")
def flash_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("flash-config")
    (d / "config.json").write_text(json.dumps(FLASH_CONFIG))
    header = b"{}"  # a valid safetensors file with no tensors: inspect needs only the config
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return str(d)


@pytest.mark.parametrize("block", [16, 64, 128])
def test_flash_swa_memory_is_bounded_by_the_window(mimo_bin, flash_dir, block):
    small, big = inspect(mimo_bin, flash_dir, 1024, block=block), \
        inspect(mimo_bin, flash_dir, 262144, block=block)
    # Full layers: 9 layers x 4 kv heads x (K 192 + V 128) x 2 bytes, per token, linear in context.
    assert big["full_bytes_per_token"] == 9 * 4 * (192 + 128) * 2 == 23040
    assert big["full_bytes_per_sequence"] == 262144 * 23040
    # SWA layers: the same fixed amount at 1k and 256k, about the window (128 keys + one block).
    assert small["swa_bytes_per_sequence"] == big["swa_bytes_per_sequence"]
    per_token_swa = 39 * 8 * (192 + 128) * 2
    blocks = -(-(128 - 1 + 1) // block) + 1
    assert big["swa_bytes_per_sequence"] == blocks * block * per_token_swa
    assert big["unbounded_swa_bytes_per_sequence"] == 262144 * per_token_swa


def test_fp8_kv_halves_bf16(mimo_bin, flash_dir):
    bf16, fp8 = inspect(mimo_bin, flash_dir, 4096), inspect(mimo_bin, flash_dir, 4096, "fp8")
    assert fp8["full_bytes_per_token"] * 2 == bf16["full_bytes_per_token"]


def test_generated_checkpoint(mimo_bin, checkpoint):
    a, b = inspect(mimo_bin, checkpoint("fp8"), 160), inspect(mimo_bin, checkpoint("fp8"), 160000)
    assert a["swa_bytes_per_sequence"] == b["swa_bytes_per_sequence"] > 0
    assert b["full_bytes_per_sequence"] == 1000 * a["full_bytes_per_sequence"]
