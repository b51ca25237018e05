"""Load-time quantization of the weights the checkpoint keeps in BF16/F32 (issue 48, item 1b):
`--dense fp8|int8|mxfp4` (attention projections, dense MLPs, MTP's eh_proj), `--lm-head
fp8|int8|mxfp4`, and `--experts int8` (the routed experts).

The expectation is independent of the engine: the float64 reference forward (scripts/
mimo_reference.py) on the checkpoint's weights, with each weight the engine should rewrite passed
through a numpy implementation of the format's rule:
* FP8: 128 x 128 blocks, scale_inv = amax / 448 in fp32 (1 for an all-zero block), each element
  the e4m3 value nearest x / scale_inv in fp32 (ties to the even code, above 448 saturated),
  dequantized as code x scale_inv;
* MXFP4: test_quantize.py's implementation of the 32-element E2M1/E8M0 rule;
* int8: per row, per 32 columns, scale = the smallest bf16 value at or above amax / 127 in fp32
  (1 for an all-zero block), each element rint(x / scale) in fp32 (ties to even) within
  [-127, 127], dequantized as code x scale.
Weights already stored in FP8 stay as stored under fp8 (a checkpoint's own K/V grids included)
and are converted under int8 and mxfp4,
and the router and embedding are never touched. Each case also checks that the quantization
moved the logits by far more than the tolerance, so a flag that did nothing would fail.
"""
import subprocess

import numpy as np
import pytest
import torch

import mimo_reference as R
from test_quantize import E2M1, quantize_blocks

DENSE_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                  "gate_proj.weight", "up_proj.weight", "down_proj.weight", "eh_proj.weight")
FLOAT_DTYPES = ("BF16", "F16", "F32")


def e4m3_magnitudes():
    """The 127 finite non-negative e4m3 values, by code (0x00..0x7e), ascending."""
    c = np.arange(127)
    e, m = c >> 3, c & 7
    return np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


E4M3 = e4m3_magnitudes()


def e4m3_round(y):
    """y (fp32 values as float64) -> the nearest e4m3 value, ties to the even code, saturating."""
    a = np.abs(y)
    hi = np.clip(np.searchsorted(E4M3, a), 1, 126)
    lo = hi - 1
    d_lo, d_hi = a - E4M3[lo], E4M3[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    v = np.where(pick_hi, E4M3[hi], E4M3[lo])
    v = np.where(a >= 448, 448.0, v)
    return np.sign(y) * v


def fp8_block(w32):
    """float32 [R, C] -> its FP8 block quantization, dequantized as the engine does (fp32)."""
    out = np.empty_like(w32)
    R_, C_ = w32.shape
    for r0 in range(0, R_, 128):
        for c0 in range(0, C_, 128):
            b = w32[r0:r0 + 128, c0:c0 + 128]
            amax = np.float32(np.abs(b).max())
            s = np.float32(amax / np.float32(448)) if amax > 0 else np.float32(1)
            q = e4m3_round((b / s).astype(np.float64)).astype(np.float32)
            out[r0:r0 + 128, c0:c0 + 128] = q * s
    return out


def mxfp4(w32):
    rows, cols = w32.shape
    assert cols % 32 == 0, cols
    codes, exps, _ = quantize_blocks(w32.astype(np.float64).reshape(-1, 32), "mse")
    mag = E2M1[codes & 7] * np.where(codes & 8, -1.0, 1.0)
    scale = np.ldexp(1.0, exps.astype(np.int64) - 127)[:, None]
    return (mag * scale).reshape(rows, cols).astype(np.float32)


def bf16_up(x):
    """float32 >= 0 -> the smallest bf16 value at or above it (as float32)."""
    u = np.maximum(x.astype(np.float32), np.float32(np.finfo(np.float32).smallest_subnormal))
    u = u.view(np.uint32)
    return (((u >> 16) + ((u & 0xffff) != 0)) << 16).astype(np.uint32).view(np.float32)


def int8_rows(w32):
    """float32 [R, C] -> its int8 quantization (32-column blocks of a row), dequantized (fp32)."""
    out = np.empty_like(w32)
    for c0 in range(0, w32.shape[1], 32):
        b = w32[:, c0:c0 + 32]
        amax = np.abs(b).max(axis=1, keepdims=True).astype(np.float32)
        s = np.where(amax > 0, bf16_up(amax / np.float32(127)), np.float32(1)).astype(np.float32)
        q = np.clip(np.rint(b / s), -127, 127).astype(np.float32)
        out[:, c0:c0 + 32] = q * s
    return out


RULES = {"fp8": fp8_block, "mxfp4": mxfp4, "int8": int8_rows}


def quantized_reference(model_dir, dense, lm_head, experts=None):
    """The reference forward with the weights `--dense dense --lm-head lm_head --experts experts`
    rewrite passed through the numpy rules. Returns (reference, weights rewritten)."""
    ref = R.load_reference(model_dir)
    ref = ref.with_options(type(ref.opts)())
    w = ref.w
    raw = w.raw
    rewritten = []

    def rule_for(name, fmt):
        t = raw.get(name)
        if fmt is None or t is None:
            return None
        if t.dtype in FLOAT_DTYPES or (fmt in ("mxfp4", "int8") and t.dtype == "F8_E4M3"):
            return RULES[fmt]
        return None  # FP8 under fp8, or already MXFP4: as stored

    def q(t, rule, name):
        rewritten.append(name)
        # The engine quantizes the weight as its kernels read it: stored floats as fp32.
        return torch.from_numpy(rule(t.numpy().astype(np.float32)).astype(np.float64))

    orig_plain, orig_qkv = w.plain, w.attention_qkv
    done = {}

    def plain(name, shape=None):
        t = orig_plain(name, shape)
        if not name.endswith(DENSE_SUFFIXES):
            return t
        rule = rule_for(name, experts if ".mlp.experts." in name else dense)
        if rule is None:
            return t
        if name not in done:
            done[name] = q(t, rule, name).to(t.dtype)
        return done[name]

    def attention_qkv(prefix, g):
        qkv = orig_qkv(prefix, g)
        fused = prefix + "qkv_proj.weight"
        names = [fused] * 3 if fused in raw else [prefix + p + "_proj.weight" for p in "qkv"]
        key = "qkv:" + prefix
        if key not in done:
            out = []
            for n, t, part in zip(names, qkv, "qkv"):
                # Separate float q/k/v came through plain() above, already rewritten.
                rule = None if n in done else rule_for(n, dense)
                out.append(t if rule is None else q(t, rule, f"{n}[{part}]").to(t.dtype))
            done[key] = tuple(out)
        return done[key]

    def head(y):
        name = "model.embed_tokens.weight" if ref.cfg.tie else "lm_head.weight"
        table = orig_plain(name, [ref.cfg.vocab, ref.cfg.hidden])
        rule = rule_for(name, lm_head)
        if rule is not None:
            if "lm_head" not in done:
                done["lm_head"] = q(table, rule, "lm_head").to(table.dtype)
            table = done["lm_head"]
        return y @ table.T

    w.plain, w.attention_qkv, ref.lm_head = plain, attention_qkv, head
    return ref, rewritten


def engine_logits(mimo_bin, model_dir, ids, tmp_path, *flags, mode="prefill"):
    out = tmp_path / f"logits-{'-'.join(flags) or 'plain'}-{mode}.bin"
    p = subprocess.run([mimo_bin, "logits", "--model", model_dir, "--ids", ",".join(map(str, ids)),
                        "--out", str(out), "--mode", mode, "--threads", "2", *flags],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return np.fromfile(out, dtype="<f4").reshape(len(ids), -1).astype(np.float64), p.stderr


@pytest.mark.parametrize("variant,dense,lm_head,experts", [
    ("bf16", "fp8", "fp8", None),
    ("fp8", "fp8", "fp8", None),  # q/k/v FP8 in the checkpoint: kept; o_proj and dense MLP rewritten
    ("tied", "mxfp4", "fp8", None),  # a tied lm_head becomes its own FP8 copy; the embedding stays
    ("bf16", "mxfp4", "mxfp4", None),
    ("f32", None, "fp8", None),
    ("fp8-fused", "mxfp4", None, None),  # fused FP8 qkv_proj rewritten as three MXFP4 weights
    ("bf16", "int8", "int8", "int8"),
    ("fp8", "int8", "int8", "int8"),  # FP8 q/k/v and experts converted to int8
    ("fp8-fused", "int8", None, None),  # fused FP8 qkv_proj rewritten as three int8 weights
    ("tied", None, "int8", None),
])
def test_load_time_dense_and_lm_head_match_the_reference(mimo_bin, checkpoint, tmp_path, variant,
                                                         dense, lm_head, experts):
    d = checkpoint(variant)
    ref, rewritten = quantized_reference(d, dense, lm_head, experts)
    ids = [int(x) for x in np.random.default_rng(11).integers(0, ref.cfg.vocab, 24)]
    want = ref.forward(ids).numpy()
    assert ref.route_margin > 2e-5, f"{variant}: near-tie in routing ({ref.route_margin:.2e})"
    assert rewritten, "the case rewrites nothing"
    flags = ((["--dense", dense] if dense else []) + (["--lm-head", lm_head] if lm_head else [])
             + (["--experts", experts] if experts else []))
    got, err = engine_logits(mimo_bin, d, ids, tmp_path, *flags)
    tol = 1e-4 * np.abs(want).max()
    assert np.abs(got - want).max() <= tol, (variant, np.abs(got - want).max(), tol)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    # The quantization is visible: the unquantized model is far outside the tolerance.
    plain, _ = engine_logits(mimo_bin, d, ids, tmp_path)
    assert np.abs(plain - want).max() > 20 * tol, (variant, np.abs(plain - want).max(), tol)
    # The log names what was rewritten and what was kept.
    if dense:
        n_dense = len({n for n in rewritten if n != "lm_head" and ".mlp.experts." not in n})
        assert "dense projection weights quantized to" in err, err[-2000:]
        assert n_dense > 0
    if lm_head:
        assert "1 lm_head weights quantized to " + lm_head.upper() in err, err[-2000:]
    if experts:
        # Every expert weight of the checkpoint (the reference reads only the routed ones).
        n_experts = len([n for n in ref.w.raw if ".mlp.experts." in n and n.endswith("_proj.weight")])
        assert any(".mlp.experts." in n for n in rewritten)
        assert f"{n_experts} routed expert weights quantized to {experts.upper()}" in err, \
            err[-2000:]
    # Decode steps give the same logits as the prompt pass, within the mode's bound.
    dec, _ = engine_logits(mimo_bin, d, ids, tmp_path, *flags, mode="decode")
    assert np.abs(dec - want).max() <= tol


def test_bad_formats_are_refused(mimo_bin, checkpoint):
    d = checkpoint("bf16")
    for flag, value in (("--dense", "int4"), ("--lm-head", "q4_0"), ("--dense", "")):
        p = subprocess.run([mimo_bin, "logits", "--model", d, "--ids", "1,2", "--out", "/dev/null",
                            flag, value], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0, (flag, value)
        assert f"{flag} '{value}' is not supported (fp8, int8 or mxfp4)" in p.stderr, p.stderr
