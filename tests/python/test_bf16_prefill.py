"""--prefill-precision bf16 (the older name of --precision bf16), the opt-in bf16 mode (AVX512_BF16
vdpbf16ps; exact is the default), measured on prompts: its error against the exact path,
documented on the shipped trained nano models (BF16 and FP8 weights). A row's relative error is
max |bf16 - exact| / max |exact| over its vocabulary columns, every position of the held-out
conversations prefilled in 32-token chunks.

The performance issue accepts such kernels at argmax agreement >= 99% and max relative error
<= 1e-2. Measured here on the models as shipped since their pass-key phase (2026-12-03): argmax
agreement 99.58% (BF16) / 99.64% (FP8), 100% of the assistant positions, met; relative error
median 1.7e-3 / 1.8e-3, 99th percentile 0.065 / 0.077, max 0.30 / 0.29, with 3.2% / 5.5% of the
positions above 1e-2: NOT met, which is why the mode is opt-in. (Before that phase: 99.56% /
99.68%, q99 0.046 / 0.050, max 0.31 / 0.30.) The large errors are the body's, not the rounding of one GEMM: with only
lm_head in bf16 the max is 3.8e-3; keeping either the attention projections or the MLPs exact
leaves it at 0.28 / 0.46 (the trained toy amplifies small changes of its hidden state, as
test_paged_kv_logits measures for bf16 KV). The bounds below are ~1.2x the measurement, so a
kernel that rounds more (or wrongly) fails. Decode steps run the bf16 kernels too in this mode,
with the same bits (test_bf16_mode.py). Random-weight fixtures are not used: their MoE routing
flips under any perturbation."""
import os
import subprocess

import numpy as np
import pytest

from test_paged_kv_logits import REPO, nano_conversations, nano_logits_spec, run_logits

MIN_ARGMAX_AGREEMENT = 0.99  # the bar
# Relative error bounds per model, ~1.2x the measurement: (median, 99th percentile, max).
REL_ERR = {"mimo-v2-nano": (0.0020, 0.078, 0.36), "mimo-v2-nano-fp8": (0.0022, 0.093, 0.34)}


def model_dir(name):
    d = os.path.join(REPO, "models", name)
    assert os.path.isdir(d), f"{d} missing: run scripts/setup.sh"
    return d


@pytest.mark.parametrize("name", ["mimo-v2-nano", "mimo-v2-nano-fp8"])
def test_bf16_prompt_gemm_error_on_trained_model(mimo_bin, tmp_path, name):
    model = model_dir(name)
    seqs, masks = nano_conversations()
    ids, columns, ncols = nano_logits_spec(tmp_path, model, seqs)
    # All sequences prefilled together in 32-token chunks: steps of up to ~1000 tokens (more than
    # 16: the bf16 kernels) whose [tokens, vocab] logits stay well under 1 GB.
    common = (*columns, "--mode", "prefill", "--chunk-size", "32")
    exact, _ = run_logits(mimo_bin, model, ids, tmp_path / "exact.bin", *common)
    bf16, err = run_logits(mimo_bin, model, ids, tmp_path / "bf16.bin", *common,
                           "--prefill-precision", "bf16")
    if "needs AVX512_BF16" in err:
        pytest.skip("this CPU has no AVX512_BF16: --prefill-precision bf16 runs exact")
    exact, bf16 = exact.reshape(-1, ncols), bf16.reshape(-1, ncols)
    mask = np.array(sum(masks, []), dtype=bool)
    assert exact.shape[0] == len(mask) > 4000
    assert not np.array_equal(bf16, exact), "the bf16 kernels did not run"

    check_bf16_error(f"{name} bf16 prompt GEMM", REL_ERR[name], exact, bf16, mask)


def check_bf16_error(what, bounds, exact, bf16, mask):
    """bf16 against exact logits [positions, columns]: argmax agreement >= MIN_ARGMAX_AGREEMENT and
    the row's relative error (max |bf16 - exact| / max |exact|) within bounds = (median, 99th
    percentile, max); mask marks the assistant positions (reported)."""
    rel = np.abs(bf16 - exact).max(axis=-1) / np.abs(exact).max(axis=-1)
    same = bf16.argmax(-1) == exact.argmax(-1)
    print(f"{what}: relative logit error max {rel.max():.3g}, q99 {np.quantile(rel, 0.99):.3g}, "
          f"median {np.median(rel):.3g}, above 1e-2 at {(rel > 1e-2).mean():.2%}; argmax "
          f"agreement {same.mean():.2%} of {len(same)} positions, {same[mask].mean():.2%} of the "
          f"{mask.sum()} assistant positions")
    assert same.mean() >= MIN_ARGMAX_AGREEMENT
    med, q99, worst = bounds
    assert np.median(rel) <= med
    assert np.quantile(rel, 0.99) <= q99
    assert rel.max() <= worst, f"max relative logit error {rel.max():.3g} at {rel.argmax()}"


def test_unknown_precision_is_rejected(mimo_bin, tmp_path):
    p = subprocess.run([mimo_bin, "logits", "--model", model_dir("mimo-v2-nano"), "--ids", "1,2",
                        "--out", str(tmp_path / "x.bin"), "--prefill-precision", "fp16"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--prefill-precision must be exact, bf16 or int8, got 'fp16'" in p.stderr
