"""scripts/bench/dequant_fp8_to_bf16.py (the BF16 copy llama.cpp converts, issue 31's
`--variant bench-flash-bf16`): every FP8 tensor, the Flash full-attention K/V of the per-TP-section
grid included, becomes BF16 of its dequantized value: every weight of the copy is the reference's
(scripts/mimo_reference.py) FP8 dequantization rounded to BF16, within half a BF16 ulp, and the
engine runs the copy (logits within BF16's rounding of the FP8 checkpoint's at most positions; a
routing decision may flip on a random model)."""
import json
import os
import subprocess
import sys

import numpy as np

import mimo_reference as R

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts", "bench"))
import dequant_fp8_to_bf16  # noqa: E402


def test_bf16_copy_of_an_fp8_checkpoint(mimo_bin, checkpoint, tmp_path):
    src = checkpoint("fp8")  # uniform grid + sectioned full-attention K/V, MTP in its own file
    dst = str(tmp_path / "bf16")
    dequant_fp8_to_bf16.main([src, dst])
    cfg = json.load(open(os.path.join(dst, "config.json")))
    assert "quantization_config" not in cfg
    got = R.read_checkpoint_tensors(dst)
    want = R.read_checkpoint_tensors(src)
    assert not [n for n in got if n.endswith("_scale_inv")]
    assert all(t.dtype in ("BF16", "F32") for t in got.values())
    assert set(got) == {n for n in want if not n.endswith("_scale_inv")}
    ref = R.load_reference(src)
    ref.forward([1, 2, 3])  # binds every main-layer weight, K/V by the grid it finds
    exact_of = {}
    for key, v in ref.w._cache.items():
        if key.startswith("qkv:"):
            for proj, x in zip("qkv", v):
                exact_of[key[4:] + proj + "_proj.weight"] = x
        elif not isinstance(v, tuple):
            exact_of[key] = v
    sectioned = 0
    for name, t in want.items():
        if name.endswith("_scale_inv"):
            continue
        if t.dtype != "F8_E4M3":
            assert got[name].data == t.data, name
            continue
        exact = (exact_of[name] if name in exact_of else ref.w.plain(name)).numpy()
        exact = exact.astype(np.float64)
        copy = R.decode_raw(got[name]).reshape(exact.shape)
        assert (np.abs(copy - exact) <= np.abs(exact) * 2.0 ** -8 + 1e-30).all(), name  # half a ulp
        sectioned += ref.w.layouts.get(name) == "kv-sectioned"
    assert sectioned == 4  # k_proj and v_proj of the two full-attention layers
    ids = ",".join(str(x) for x in np.random.default_rng(1).integers(0, 500, 24))
    logits = {}
    for label, d in (("fp8", src), ("bf16", dst)):
        out = tmp_path / f"{label}.bin"
        p = subprocess.run([mimo_bin, "logits", "--model", d, "--ids", ids, "--out", str(out),
                            "--threads", "2"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        logits[label] = np.fromfile(out, dtype="<f4").reshape(24, -1)
    a, b = logits["fp8"], logits["bf16"]
    close = np.abs(a - b).max(-1) < 0.03 * np.abs(a).max()
    assert close.mean() >= 0.9, np.abs(a - b).max(-1)
