"""Broken checkpoints: `mimo logits` and `mimo inspect` must exit non-zero (not by a signal) with ONE
clear error line on stderr that names the problem (tensor, file, dtype or config field)."""
import json
import os
import shutil
import struct
import subprocess

import pytest

import make_tiny_model as M
import mimo_reference as R


def _copy(checkpoint, variant, dst):
    shutil.copytree(checkpoint(variant), dst)
    return str(dst)


def _rewrite(path, edit):
    """Re-packs a safetensors file after edit(dict name -> [dtype, shape, bytes])."""
    raw = R.read_safetensors_file(path)
    tensors = {n: [t.dtype, list(t.shape), t.data] for n, t in raw.items()}
    edit(tensors)
    M.write_safetensors(path, {n: tuple(v) for n, v in tensors.items()})


def truncated(d):
    p = os.path.join(d, "model.safetensors")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size * 6 // 10)
    return ["model.safetensors"]


def header_too_long(d):
    p = os.path.join(d, "model.safetensors")
    with open(p, "r+b") as f:
        f.write(struct.pack("<Q", 1 << 40))
    return ["model.safetensors"]


def corrupt_json_header(d):
    p = os.path.join(d, "model.safetensors")
    with open(p, "r+b") as f:
        f.seek(8 + 20)
        f.write(b"}{\x00\"")
    return ["model.safetensors"]


def wrong_shape(d):
    name = "model.layers.1.self_attn.q_proj.weight"  # [384, 256] stored as [192, 512]

    def edit(t):
        assert t[name][1] == [384, 256]
        t[name][1] = [192, 512]
    _rewrite(os.path.join(d, "model.safetensors"), edit)
    return [name, "384", "192"]


def missing_tensor(d):
    name = "model.layers.2.post_attention_layernorm.weight"
    _rewrite(os.path.join(d, "model.safetensors"), lambda t: t.pop(name))
    return [name]


def unknown_dtype(d):
    name = "model.norm.weight"

    def edit(t):
        t[name][0] = "X9"
    _rewrite(os.path.join(d, "model.safetensors"), edit)
    return [name, "X9"]


def unsupported_fp8_dtype(d):
    name = "model.layers.1.mlp.experts.0.up_proj.weight"

    def edit(t):
        assert t[name][0] == "F8_E4M3"
        t[name][0] = "F8_E5M2"
    _rewrite(os.path.join(d, "model.safetensors"), edit)
    return [name, "F8_E5M2"]


def _layer1_experts(t, proj, suffix):
    return [n for n in t if n.startswith("model.layers.1.mlp.experts.") and
            n.endswith(f".{proj}.weight{suffix}")]


def mxfp4_scale_missing(d):
    """Every MXFP4 up_proj of layer 1 without its E8M0 exponents (so any routing hits one)."""
    def edit(t):
        names = _layer1_experts(t, "up_proj", "_scale")
        assert len(names) == 12 and all(t[n][0] == "U8" for n in names)
        for n in names:
            t.pop(n)
    _rewrite(os.path.join(d, "model.safetensors"), edit)
    return ["model.layers.1.mlp.experts.0.up_proj.weight_scale"]


def mxfp4_scale_wrong_shape(d):
    """Layer 1's down_proj exponents [256, 2] (one per 32 of 64 columns) stored as [128, 4]."""
    def edit(t):
        for n in _layer1_experts(t, "down_proj", "_scale"):
            assert t[n][1] == [256, 2]
            t[n][1] = [128, 4]
    _rewrite(os.path.join(d, "model.safetensors"), edit)
    return ["model.layers.1.mlp.experts.0.down_proj.weight_scale", "[256, 2]", "[128, 4]"]


def missing_shard(d):
    os.remove(os.path.join(d, "model-00002-of-00003.safetensors"))
    return ["model-00002-of-00003.safetensors"]


def config_missing_hidden_size(d):
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    del cfg["hidden_size"]
    json.dump(cfg, open(p, "w"))
    return ["hidden_size"]


def config_not_json(d):
    p = os.path.join(d, "config.json")
    with open(p, "a") as f:
        f.write("\n{ this is not json")
    return ["config.json"]


# (breakage, base variant, also checked with `mimo inspect`)
CASES = [
    (truncated, "tied", True),
    (header_too_long, "tied", True),
    (corrupt_json_header, "tied", True),
    (wrong_shape, "tied", False),  # a binding error: found when the model is bound, not by inspect
    (missing_tensor, "tied", False),
    (unknown_dtype, "tied", True),
    (unsupported_fp8_dtype, "fp8", True),
    (missing_shard, "bf16-sharded", True),
    (mxfp4_scale_missing, "v2.6-pro", True),
    (mxfp4_scale_wrong_shape, "v2.6-pro", True),
    (config_missing_hidden_size, "tied", True),
    (config_not_json, "tied", True),
]


def _check_one_clear_error(cmd, needles):
    env = dict(os.environ, MIMO_LOG_LEVEL="error")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode > 0, (f"{cmd[1]}: exit {p.returncode} (0 = accepted, < 0 = killed by a "
                              f"signal)\n{p.stderr}")
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"{cmd[1]}: want one error line, got {len(lines)}:\n{p.stderr}"
    for n in needles:
        assert n in lines[0], f"{cmd[1]}: error line does not name {n!r}: {lines[0]}"
    for crash in ("terminate called", "Aborted", "Segmentation", "core dumped", "MIMO_CHECK"):
        assert crash not in p.stderr


@pytest.mark.parametrize("breakage,variant,check_inspect", CASES, ids=[c[0].__name__ for c in CASES])
def test_bad_checkpoint_gives_one_clear_error(mimo_bin, checkpoint, tmp_path, breakage, variant,
                                              check_inspect):
    assert os.path.exists(mimo_bin), f"mimo binary not built: {mimo_bin} (set MIMO_BIN)"
    d = _copy(checkpoint, variant, tmp_path / "ckpt")
    needles = breakage(d)
    _check_one_clear_error([mimo_bin, "logits", "--model", d, "--ids", "1,2,3", "--out",
                            str(tmp_path / "out.bin"), "--threads", "2"], needles)
    if check_inspect:
        _check_one_clear_error([mimo_bin, "inspect", "--model", d], needles)


def test_breakages_really_break_the_checkpoint(checkpoint, tmp_path):
    """The reference's own parser rejects each broken file (the corruptions are real)."""
    for i, (breakage, variant, _) in enumerate(CASES):
        d = _copy(checkpoint, variant, tmp_path / f"c{i}")
        breakage(d)
        with pytest.raises((ValueError, KeyError, OSError, json.JSONDecodeError, UnicodeDecodeError)):
            R.load_reference(d).forward([1, 2, 3])


# Issue 44: config values and engine flags past what a machine or the engine's ints can hold.
# The reference forward reads none of these (it ignores eos ids and the context limit), so they
# are kept out of CASES and checked through `mimo generate`, which reads generation_config.json
# and sizes the KV cache. Each exited 0 (a wrapped or out-of-vocabulary value silently used) or
# died (MIMO_CHECK on a negative mmap size, std::system_error, the OOM killer) before.
def _edit_json(d, name, **fields):
    p = os.path.join(d, name)
    cfg = json.load(open(p)) if os.path.exists(p) else {}
    cfg.update(fields)
    json.dump(cfg, open(p, "w"))


CONFIG_CASES = [  # (file, fields, words the error line must contain)
    ("config.json", {"eos_token_id": 640}, ["config.json", "'eos_token_id' 640", "vocab_size is 640"]),
    ("config.json", {"eos_token_id": [2, -1]}, ["config.json", "'eos_token_id' -1"]),
    ("generation_config.json", {"eos_token_id": [2, 100000]},
     ["generation_config.json", "eos_token_id 100000", "vocab_size is 640"]),
    ("generation_config.json", {"eos_token_id": -5}, ["generation_config.json", "eos_token_id -5"]),
    ("generation_config.json", {"eos_token_id": 2 ** 32 + 2},
     ["generation_config.json", "eos_token_id 4294967298"]),
    ("config.json", {"max_position_embeddings": 2 ** 31 - 1},
     ["config.json", "'max_position_embeddings' = 2147483647 is out of range: at most 67108864"]),
    ("config.json", {"sliding_window": 2 ** 31 - 1, "sliding_window_size": 2 ** 31 - 1},
     ["config.json", "'sliding_window' = 2147483647 is out of range"]),
]


@pytest.mark.parametrize("name,fields,needles", CONFIG_CASES,
                         ids=[f"{c[0]}:{next(iter(c[1]))}={list(c[1].values())[0]}"
                              for c in CONFIG_CASES])
def test_config_values_out_of_range_give_one_clear_error(mimo_bin, checkpoint, tmp_path, name,
                                                         fields, needles):
    d = _copy(checkpoint, "tied", tmp_path / "ckpt")
    assert json.load(open(os.path.join(d, "config.json")))["vocab_size"] == 640
    _edit_json(d, name, **fields)
    _check_one_clear_error([mimo_bin, "generate", "--model", d, "--ids", "1,2", "--max-tokens",
                            "1", "--threads", "2"], needles)


FLAG_CASES = [  # (flags, words the error line must contain)
    (["--threads", "4096"], ["--threads 4096 is out of range [0, "]),
    (["--threads", "100000"], ["--threads 100000 is out of range"]),
    (["--threads", "-5"], ["--threads -5 is out of range"]),
    (["--threads", str(2 ** 32 + 1)], ["--threads 4294967297 is out of range"]),
    (["--max-model-len", str(2 ** 32)], ["--max-model-len 4294967296 is out of range [0, 67108864]"]),
    (["--max-model-len", "99999999999"], ["--max-model-len 99999999999 is out of range"]),
    (["--max-model-len", "1e9"], ["--max-model-len", "not an integer"]),
    (["--max-num-batched-tokens", "3000000000"], ["--max-num-batched-tokens 3000000000"]),
    (["--max-num-seqs", str(2 ** 32 + 1)], ["--max-num-seqs 4294967297 is out of range"]),
    (["--kv-cache-memory", "1e14"], ["--kv-cache-memory 1e14 bytes", "RAM and swap"]),
    (["--kv-cache-memory", "100000000000000"], ["--kv-cache-memory 100000000000000 bytes",
                                                "more than this machine's memory"]),
    (["--kv-cache-memory", "1.5"], ["--kv-cache-memory '1.5'"]),
    (["--num-kv-blocks", "99999999999"], ["--num-kv-blocks 99999999999 is out of range"]),
    (["--num-kv-blocks", "2000000000"], ["the KV cache would take", "RAM and swap",
                                         "--num-kv-blocks"]),
]


@pytest.mark.parametrize("flags,needles", FLAG_CASES, ids=[" ".join(c[0]) for c in FLAG_CASES])
def test_engine_flags_out_of_range_give_one_clear_error(mimo_bin, checkpoint, flags, needles):
    _check_one_clear_error([mimo_bin, "generate", "--model", checkpoint("tied"), "--ids", "1,2",
                            "--max-tokens", "1", *flags], needles)
