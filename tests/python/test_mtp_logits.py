"""The MTP layers in the C++ engine against the float64 reference (spec section 3):
`mimo logits --mtp-layer I` pairs the main model's pre-norm hidden state h[t] with token t+1 at
position t; every MTP layer of every generated variant that has them, prefill and decode."""
import subprocess

import numpy as np
import pytest

import make_tiny_model

REL_TOL = 1e-4
CASES = [(v, i) for v, spec in make_tiny_model.VARIANTS.items()
         for i in range(spec.get("mtp_layers", 1)) if spec.get("mtp_layers", 1) > 0]


@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("variant,layer", CASES)
def test_mtp_layer_matches_reference(mimo_bin, checkpoint, reference, tmp_path, variant, layer,
                                     mode):
    ref = reference(variant)
    ids = [int(x) for x in np.random.default_rng(7).integers(0, ref.cfg.vocab, 30)]
    h = ref.hidden_states(ids)
    want, _ = ref.mtp_forward(layer, h[:-1], ids[1:], list(range(len(ids) - 1)))
    want = want.numpy()
    out = tmp_path / "mtp.bin"
    cmd = [mimo_bin, "logits", "--model", checkpoint(variant), "--ids", ",".join(map(str, ids)),
           "--out", str(out), "--mode", mode, "--mtp-layer", str(layer), "--threads", "2"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr[-2000:]}"
    got = np.fromfile(out, dtype="<f4").reshape(len(ids) - 1, -1).astype(np.float64)
    err = np.abs(got - want).max(-1)
    assert (err <= REL_TOL * np.abs(want).max()).all(), f"max err {err.max():.3g}"
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


def test_mtp_layer_out_of_range_is_a_clear_error(mimo_bin, checkpoint):
    p = subprocess.run([mimo_bin, "logits", "--model", checkpoint("tied"), "--ids", "1,2,3",
                        "--out", "/dev/null", "--mtp-layer", "0"], capture_output=True, text=True)
    assert p.returncode == 2 and "out of range" in p.stderr
