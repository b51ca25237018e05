"""The decode roofline's numerator (`MimoV2Model::ActiveWeightBytesPerToken`, printed exactly by
`mimo bench e2e`) against an independent count from the safetensors headers: one embedding row,
every main-layer tensor (attention, norms, router, dense MLP), top-k / n_routed_experts of the
experts' bytes (codes and scales), model.norm and lm_head. MXFP4 experts therefore count 4 bits per
weight plus one exponent byte per 32, not a byte per weight; the test checks that this difference
is far larger than its tolerance."""
import json
import os
import re
import subprocess

import pytest

import mimo_reference as R

REL_TOL = 1e-3  # the engine counts each fused-qkv part with the whole fused scale tensor (~0.02%)


def expected_bytes(d, mxfp4_as_bytes=False):
    cfg = json.load(open(os.path.join(d, "config.json")))
    raw = R.read_checkpoint_tensors(d)
    H, K, E = cfg["hidden_size"], cfg["num_experts_per_tok"], cfg["n_routed_experts"]
    size = {n: len(t.data) for n, t in raw.items()}
    if mxfp4_as_bytes:  # the wrong count: one byte per weight, exponents ignored
        for n, t in raw.items():
            if t.dtype == "U8" and n.endswith(".weight"):
                size[n] = 2 * len(t.data)
                size[n + "_scale"] = 0
    total = H * R.DTYPE_SIZES[raw["model.embed_tokens.weight"].dtype]  # one embedding row
    total += size["model.norm.weight"] + size.get("lm_head.weight", 0)
    for n in raw:
        if not n.startswith("model.layers."):
            continue
        if re.match(r"model\.layers\.\d+\.mlp\.experts\.", n):
            total += size[n] * K / E
        else:
            total += size[n]
    return total


@pytest.mark.parametrize("variant", ["v2.6-flash", "v2.6-pro", "v2.5"])
def test_active_bytes_per_token(mimo_bin, checkpoint, variant):
    d = checkpoint(variant)
    p = subprocess.run([mimo_bin, "bench", "e2e", "--model", d, "--tokens", "2", "--prompt", "2",
                        "--membw", "10", "--threads", "1"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    got = float(re.search(r"\((\d+) bytes\)", p.stdout).group(1))
    want = expected_bytes(d)
    assert abs(got - want) <= REL_TOL * want, (got, want)
    if variant.startswith("v2.6"):
        wrong = expected_bytes(d, mxfp4_as_bytes=True)
        assert abs(wrong - want) > 3 * REL_TOL * want  # the tolerance cannot hide 8-bit counting
