#!/usr/bin/python3
"""Writes the C++ suite's reference-logits fixture (tests/data/reference_fixture/): the small
generated checkpoint `ctest-ref` (scripts/make_tiny_model.py: FP8 with two scale columns, MXFP4
experts, routed scaling, sinks on both layer kinds, two RoPE thetas, value scale 0.612, a 4-key
window) and the float64 PyTorch reference's logits (scripts/mimo_reference.py, stored as float32)
for a fixed id sequence that crosses the window several times.

    /usr/bin/python3 scripts/make_reference_fixture.py [OUT_DIR]

tests/kv/reference_logits_test.cc compares the engine with these logits (ctest alone then
catches a wrong model); tests/python/test_reference_fixture.py regenerates everything and
requires the committed files to be what this script writes. Run it again only when the
checkpoint format or the reference changes, and commit the result.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_model  # noqa: E402
import mimo_reference  # noqa: E402

VARIANT = "ctest-ref"
N_IDS = 24
# The engine's logits within REL_TOL x max|logit|: 2.4e-5 here, 1.4x the largest error measured
# (1.68e-5 with AVX-512 kernels, 1.34e-5 AVX2, 4.8e-6 scalar; MIMO_ISA=... build/bin/kv_tests).
REL_TOL = 2e-6
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "reference_fixture")


def fixture_ids(vocab):
    return [int(x) for x in np.random.default_rng(33).integers(0, vocab, N_IDS)]


def write_fixture(out_dir):
    """Writes the checkpoint, the logits and meta.json; returns (ids, logits float64)."""
    make_tiny_model.write_checkpoint(out_dir, VARIANT, seed=0)
    ref = mimo_reference.load_reference(out_dir)
    ids = fixture_ids(ref.cfg.vocab)
    logits = ref.forward(ids).numpy()  # [N_IDS, vocab] float64
    top2 = np.sort(logits, axis=-1)[:, -2:]
    gap = float((top2[:, 1] - top2[:, 0]).min())
    scale = float(np.abs(logits).max())
    # The fixture is decisive: no routing decision or argmax is a near-tie at the tolerance.
    assert ref.route_margin > 2e-5, f"near-tie in routing ({ref.route_margin:.2e})"
    assert gap > 2 * REL_TOL * scale, f"near-tie argmax ({gap:.2e} vs {REL_TOL * scale:.2e})"
    logits.astype("<f4").tofile(os.path.join(out_dir, "reference_logits.f32"))
    meta = {"variant": VARIANT, "ids": ids, "vocab_size": int(logits.shape[1]),
            "rel_tol": REL_TOL, "max_abs_logit": scale, "min_top2_gap": gap,
            "route_margin": float(ref.route_margin),
            "written_by": "scripts/make_reference_fixture.py (float64 scripts/mimo_reference.py)"}
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return ids, logits


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    ids, logits = write_fixture(out)
    print(f"wrote {out}: {len(ids)} ids, logits {logits.shape}, max |logit| "
          f"{np.abs(logits).max():.3f}")
