"""The C++ engine against the PyTorch reference on every generated checkpoint variant:
`mimo logits --mode prefill|decode` must match at every position within 1e-4 x max|logit|, with the
same argmax everywhere. Fails (it does not skip) while the binary or its `logits` command is missing.
MIMO_BIN / MIMO_LAUNCHER run another build, e.g. the aarch64 one under qemu (scripts/test-aarch64.sh).
"""
import os
import subprocess

import numpy as np
import pytest

import make_tiny_model

VARIANTS = list(make_tiny_model.VARIANTS)

N_IDS = 40  # crosses the 8-key window several times
REL_TOL = 1e-4
MIN_ROUTE_MARGIN = 2e-5  # fp32 router error is ~1e-6; a closer tie would make a fair engine differ

_ref_cache = {}


def _ids(vocab):
    return [int(x) for x in np.random.default_rng(2024).integers(0, vocab, N_IDS)]


def reference_logits(reference, variant):
    if variant not in _ref_cache:
        ref = reference(variant)
        ids = _ids(ref.cfg.vocab)
        r = ref.with_options(type(ref.opts)())  # fresh route-margin bookkeeping
        logits = r.forward(ids).numpy()
        _ref_cache[variant] = (ids, logits, r.route_margin)
    return _ref_cache[variant]


def test_fixture_is_decisive(reference):
    """The comparison is only meaningful if no routing decision or argmax is a near-tie."""
    for variant in VARIANTS:
        ids, lg, margin = reference_logits(reference, variant)
        assert margin > MIN_ROUTE_MARGIN, f"{variant}: near-tie in routing ({margin:.2e})"
        top2 = np.sort(lg, axis=-1)[:, -2:]
        gap = (top2[:, 1] - top2[:, 0]).min()
        assert gap > 2 * REL_TOL * np.abs(lg).max(), f"{variant}: near-tie argmax ({gap:.2e})"


@pytest.mark.parametrize("mode", ["prefill", "decode"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_reference(mimo_bin, mimo_launcher, checkpoint, reference, tmp_path, variant,
                                mode):
    ids, want, _ = reference_logits(reference, variant)
    vocab = want.shape[1]
    assert os.path.exists(mimo_bin), f"mimo binary not built: {mimo_bin} (set MIMO_BIN)"
    out = tmp_path / f"{variant}-{mode}.bin"
    cmd = mimo_launcher + [mimo_bin, "logits", "--model", checkpoint(variant),
                           "--ids", ",".join(map(str, ids)), "--out", str(out), "--mode", mode,
                           "--threads", "2"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\n{p.stderr[-2000:]}"
    got = np.fromfile(out, dtype="<f4")
    assert got.size == len(ids) * vocab, f"got {got.size} floats, want {len(ids)} x {vocab}"
    got = got.reshape(len(ids), vocab).astype(np.float64)
    assert np.isfinite(got).all()
    tol = REL_TOL * np.abs(want).max()
    err = np.abs(got - want).max(axis=-1)
    bad = np.nonzero(err > tol)[0]
    assert bad.size == 0, (f"{variant}/{mode}: positions {bad.tolist()[:10]} exceed {tol:.3g}; "
                           f"max err {err.max():.3g} at position {int(err.argmax())}")
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
