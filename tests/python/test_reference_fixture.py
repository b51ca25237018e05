"""The C++ suite's reference-logits fixture (tests/data/reference_fixture, compared with the
engine by tests/kv/reference_logits_test.cc) is what scripts/make_reference_fixture.py writes
today: the same checkpoint bytes, and the float64 reference's logits for the same ids. A change
to the generator or the reference that is not carried into the fixture fails here."""
import json
import os

import numpy as np

import make_reference_fixture

COMMITTED = make_reference_fixture.DEFAULT_OUT


def test_committed_fixture_is_what_the_generator_and_reference_write(tmp_path):
    out = str(tmp_path / "fixture")
    ids, logits = make_reference_fixture.write_fixture(out)
    for name in ("config.json", "model.safetensors"):
        with open(os.path.join(out, name), "rb") as a, open(os.path.join(COMMITTED, name), "rb") as b:
            assert a.read() == b.read(), f"{name} differs: rerun scripts/make_reference_fixture.py"
    meta = json.load(open(os.path.join(COMMITTED, "meta.json")))
    assert meta["ids"] == ids
    committed = np.fromfile(os.path.join(COMMITTED, "reference_logits.f32"), dtype="<f4")
    assert committed.size == logits.size
    # float32 storage of float64 logits: equal to rounding (another machine's torch may differ
    # in the last float64 bits, never by 1e-6).
    assert np.abs(committed.reshape(logits.shape) - logits).max() < 1e-6
    # Decisive at the C++ test's tolerance (the generator asserts it too).
    scale = np.abs(logits).max()
    top2 = np.sort(logits, axis=-1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0]).min() > 2 * meta["rel_tol"] * scale
