"""`mimo quantize --experts mxfp4` (issue 28): the routed experts of FP8 and float checkpoints
rewritten in V2.6's MXFP4 layout (spec section 4).

* The packed codes and E8M0 exponents equal an independent numpy implementation of the rounding
  rule (nearest E2M1 value by distance, ties to the even code; the block exponent with the least
  squared error among OCP's max rule - 1, + 0, + 1, the max rule's kept unless another is strictly
  better), from the source weights decoded by scripts/mimo_reference.py.
* Everything else is byte-identical; config.json and the shard index say what changed.
* The engine on the quantized checkpoint matches the float64 reference forward on that same
  checkpoint at 1e-4 on every sibling whose experts it converts (V2.6 keeps its own).
* The quantized default model still answers its demo questions.
* `--experts mxfp4` at load (no second copy on disk) computes bit for bit what the rewritten
  checkpoint computes.
"""
import json
import os
import subprocess

import numpy as np
import pytest

import make_tiny_model
import mimo_reference as R
from test_bench_eval import BUILTIN, nano_server, run_eval

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)
EXPERT_SUFFIXES = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NANO_FP8 = os.path.join(REPO, "models", "mimo-v2-nano-fp8")


def is_expert(name):
    return ".mlp.experts." in name and name.endswith(EXPERT_SUFFIXES)


def e2m1_codes(y):
    """|y| [.., n] -> magnitude codes: the nearest grid value, an exact tie to the even code."""
    d = np.abs(y[..., None] - E2M1)  # exact: y and the grid are dyadic with few bits
    nearest = d == d.min(-1, keepdims=True)
    even = (np.arange(8) % 2 == 0)
    return np.argmax(nearest * 2 + (nearest & even), axis=-1).astype(np.uint8)


def block_error(x, e):
    scale = np.ldexp(1.0, e.astype(np.int64) - 127)[:, None]
    q = E2M1[e2m1_codes(np.abs(x) / scale)] * scale
    return ((np.abs(x) - q) ** 2).sum(1)


def quantize_blocks(x, rule="mse"):
    """x [B, 32] float64 -> (codes [B, 32] uint8 with sign bit, exponent [B] uint8, candidate
    errors {exponent delta: error [B]})."""
    amax = np.abs(x).max(1)
    _, k = np.frexp(amax)
    e0 = np.clip(k - 1 - 2 + 127, 0, 254)
    best_e = e0.copy()
    errs = {0: block_error(x, e0)}
    best_err = errs[0].copy()
    if rule == "mse":
        for delta in (1, -1):
            e = e0 + delta
            ok = (e >= 0) & (e <= 254)
            err = np.where(ok, block_error(x, np.clip(e, 0, 254)), np.inf)
            errs[delta] = err
            better = err < best_err
            best_e = np.where(better, e, best_e)
            best_err = np.where(better, err, best_err)
    best_e = np.where(amax == 0, 127, best_e)
    scale = np.ldexp(1.0, best_e - 127)[:, None]
    mag = e2m1_codes(np.abs(x) / scale)
    codes = mag | np.where((x < 0) & (mag != 0), 8, 0).astype(np.uint8)
    return codes, best_e.astype(np.uint8), errs


def raw(t):
    """Stored tensor -> numpy (U8 as bytes, everything else decoded by the reference)."""
    return np.frombuffer(t.data, np.uint8) if t.dtype == "U8" else R.decode_raw(t)


def pack(codes, rows, cols):
    c = codes.reshape(rows, cols)
    return (c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8)


def source_fp32(tensors, name, block_rows=128, block_cols=128):
    """An expert weight as the quantizer reads it: FP8 x its block scale as an fp32 product."""
    t = tensors[name]
    w = R.decode_raw(t)
    if t.dtype != "F8_E4M3":
        return w.astype(np.float32)
    s = R.decode_raw(tensors[name + "_scale_inv"]).astype(np.float32)
    srep = np.repeat(np.repeat(s, block_rows, 0), block_cols, 1)[: w.shape[0], : w.shape[1]]
    return w.astype(np.float32) * srep


def run_quantize(mimo_bin, src, out, *extra):
    p = subprocess.run([mimo_bin, "quantize", "--model", src, "--out", out, "--threads", "2",
                        *extra], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def check_rule(src_tensors, got_tensors, names, rule, block_rows=128, block_cols=128):
    checked = near_ties = 0
    for name in names:
        x = source_fp32(src_tensors, name, block_rows, block_cols).astype(np.float64)
        rows, cols = x.shape
        codes, exps, errs = quantize_blocks(x.reshape(-1, 32), rule)
        got_w = got_tensors[name]
        got_s = got_tensors[name[: -len(".weight")] + ".weight_scale"]
        assert got_w.dtype == "U8" and list(got_w.shape) == [rows, cols // 2], name
        assert got_s.dtype == "U8" and list(got_s.shape) == [rows, cols // 32], name
        gw = raw(got_w).reshape(rows, cols // 2)
        gs = raw(got_s).reshape(-1)
        want_w = pack(codes, rows, cols)
        diff_blocks = np.nonzero(gs != exps)[0]
        base = np.clip(np.frexp(np.abs(x.reshape(-1, 32)).max(1))[1] - 3 + 127, 0, 254)
        for b in diff_blocks:  # only where two exponents give the same error to rounding
            errs_b = {k: float(v[b]) for k, v in errs.items()}
            e_got = errs_b[int(gs[b]) - int(base[b])]
            e_want = errs_b[int(exps[b]) - int(base[b])]
            assert abs(e_got - e_want) <= 1e-12 * max(e_want, 1e-300), (name, b, errs_b)
            near_ties += 1
        same = np.ones(rows * cols // 32, bool)
        same[diff_blocks] = False
        np.testing.assert_array_equal(gw.reshape(-1, 16)[same], want_w.reshape(-1, 16)[same],
                                      err_msg=name)
        checked += rows * cols // 32
    assert near_ties <= checked // 1000, (near_ties, checked)
    return checked


@pytest.mark.parametrize("variant", ["fp8", "bf16-sharded", "v2.5-pro", "f32"])
def test_quantized_experts_follow_the_rounding_rule(mimo_bin, checkpoint, tmp_path, variant):
    src = checkpoint(variant)
    out = str(tmp_path / "q")
    report = run_quantize(mimo_bin, src, out)
    src_t = R.read_checkpoint_tensors(src)
    got_t = R.read_checkpoint_tensors(out)
    experts = sorted(n for n in src_t if is_expert(n))
    assert experts, "the fixture has routed experts"
    cfg_src = json.load(open(os.path.join(src, "config.json")))
    blk = cfg_src.get("quantization_config", {}).get("weight_block_size", [128, 128])
    checked = check_rule(src_t, got_t, experts, "mse", *blk)
    assert checked > 1000
    # Nothing else changed: same names (less the experts' FP8 scales), same bytes.
    for n, t in src_t.items():
        if is_expert(n) or (n.endswith("_scale_inv") and is_expert(n[: -len("_scale_inv")])):
            assert n not in got_t or is_expert(n), n
            continue
        assert got_t[n].dtype == t.dtype and list(got_t[n].shape) == list(t.shape), n
        assert got_t[n].data == t.data, n
    assert not [n for n in got_t if n.endswith("_scale_inv") and is_expert(n[:-10])]
    cfg = json.load(open(os.path.join(out, "config.json")))
    q = cfg["quantization_config"]
    assert q["store_dtype"] == "mxfp4" and q["mxfp4_block_size"] == 32
    assert cfg["quantization"]["tensors_converted"] == len(experts)
    want_from = "F8_E4M3" if src_t[experts[0]].dtype == "F8_E4M3" else src_t[experts[0]].dtype
    assert cfg["quantization"]["converted_from"].startswith(want_from)
    assert f"converted {len(experts)} expert weights" in report
    # A sharded input keeps its shards; the index names the file of every tensor it now has.
    idx = os.path.join(src, "model.safetensors.index.json")
    if os.path.exists(idx):
        wm = json.load(open(os.path.join(out, "model.safetensors.index.json")))["weight_map"]
        assert set(wm) == set(got_t)
        src_wm = json.load(open(idx))["weight_map"]
        for n in experts:
            assert wm[n] == src_wm[n] and wm[n[:-7] + ".weight_scale"] == src_wm[n]
    for other in os.listdir(src):
        if not other.endswith(".safetensors"):
            assert os.path.exists(os.path.join(out, other)), other


def test_mse_rule_never_worse_than_max_rule_and_max_rule_is_ocp(mimo_bin, checkpoint, tmp_path):
    src = checkpoint("fp8")
    out_mse, out_max = str(tmp_path / "mse"), str(tmp_path / "max")
    run_quantize(mimo_bin, src, out_mse)
    run_quantize(mimo_bin, src, out_max, "--scale-rule", "max")
    src_t = R.read_checkpoint_tensors(src)
    experts = sorted(n for n in src_t if is_expert(n))
    check_rule(src_t, R.read_checkpoint_tensors(out_max), experts, "max")
    err = {}
    for label, out in (("mse", out_mse), ("max", out_max)):
        t = R.read_checkpoint_tensors(out)
        e = 0.0
        for n in experts:
            rows, cols = src_t[n].shape
            w = R.dequant_mxfp4(raw(t[n]).reshape(rows, cols // 2),
                                raw(t[n[:-7] + ".weight_scale"]).reshape(rows, cols // 32))
            e += ((w - source_fp32(src_t, n).astype(np.float64)) ** 2).sum()
        err[label] = e
        note = json.load(open(os.path.join(out, "config.json")))["quantization"]
        assert note["scale_rule"] == label
    assert err["mse"] < err["max"]


def test_bad_inputs_are_refused_with_a_reason(mimo_bin, checkpoint, tmp_path):
    src = checkpoint("fp8")
    p = subprocess.run([mimo_bin, "quantize", "--model", src, "--out", src],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "input directory" in p.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    p = subprocess.run([mimo_bin, "quantize", "--model", src, "--out", str(busy)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "not an empty directory" in p.stderr
    p = subprocess.run([mimo_bin, "quantize", "--model", src, "--out", str(tmp_path / "o"),
                        "--experts", "q4_0"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "only mxfp4" in p.stderr


def write_safetensors(path, tensors):
    """name -> float32 array, stored as BF16 (truncated: exact for the values used here)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


@pytest.mark.parametrize("case", ["columns", "nan", "truncated"])
def test_unquantizable_expert_is_named(mimo_bin, tmp_path, case):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"architectures": ["MiMoV2FlashForCausalLM"]}))
    name = "model.layers.1.mlp.experts.3.up_proj.weight"
    w = np.ones((4, 48 if case == "columns" else 64), np.float32)
    if case == "nan":
        w[2, 5] = np.nan
    write_safetensors(src / "model.safetensors", {"model.norm.weight": np.ones(8), name: w})
    if case == "truncated":
        data = (src / "model.safetensors").read_bytes()
        (src / "model.safetensors").write_bytes(data[:-100])
    p = subprocess.run([mimo_bin, "quantize", "--model", str(src), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    want = {"columns": [name, "48 columns, not a multiple of the MXFP4 block"],
            "nan": [name, "row 2 holds a NaN"], "truncated": ["model.safetensors"]}[case]
    for w in want:
        assert w in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()  # no half-written checkpoint left behind


QUANTIZABLE = [v for v, s in make_tiny_model.VARIANTS.items() if s.get("experts") != "mxfp4"]


@pytest.mark.parametrize("variant", QUANTIZABLE + ["v2.6-pro"])
def test_engine_matches_reference_on_quantized_checkpoint(mimo_bin, checkpoint, tmp_path, variant):
    out = str(tmp_path / "q")
    run_quantize(mimo_bin, checkpoint(variant), out)
    ref = R.load_reference(out)
    ids = [int(x) for x in np.random.default_rng(7).integers(0, ref.cfg.vocab, 24)]
    r = ref.with_options(type(ref.opts)())
    want = r.forward(ids).numpy()
    assert r.route_margin > 2e-5, f"{variant}: near-tie in routing ({r.route_margin:.2e})"
    got_file = tmp_path / "logits.bin"
    cmd = [mimo_bin, "logits", "--model", out, "--ids", ",".join(map(str, ids)), "--out",
           str(got_file), "--mode", "prefill", "--threads", "2"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = np.fromfile(got_file, dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    tol = 1e-4 * np.abs(want).max()
    assert np.abs(got - want).max() <= tol, (variant, np.abs(got - want).max(), tol)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    t = R.read_checkpoint_tensors(out)
    n_u8 = sum(1 for n, x in t.items() if is_expert(n) and x.dtype == "U8")
    assert n_u8 == sum(1 for n in t if is_expert(n)) > 0


def test_quantized_default_model_answers_its_demo_questions(mimo_bin, tmp_path):
    assert os.path.isdir(NANO_FP8), f"{NANO_FP8} missing: run scripts/setup.sh"
    out = str(tmp_path / "nano-mxfp4")
    run_quantize(mimo_bin, NANO_FP8, out)
    asked = {"What is 27 + 15?": "So 27 + 15 = 42.", "Where does Venlo live?": "Gostead"}
    for question, answer in asked.items():
        p = subprocess.run([mimo_bin, "chat", "--model", out, "--message", question,
                            "--max-tokens", "80"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert answer in p.stdout, (question, p.stdout)


def test_quantized_default_model_keeps_its_accuracy_through_serve(mimo_bin, tmp_path):
    """The FP8 default model and its MXFP4-expert form side by side through `mimo serve`, scored
    by `mimo bench eval --compare` on the same 40 held-out sums (McNemar's paired test)."""
    out = str(tmp_path / "nano-mxfp4")
    run_quantize(mimo_bin, NANO_FP8, out)
    with nano_server(mimo_bin, NANO_FP8, threads=1) as a, nano_server(mimo_bin, out, threads=1) as b:
        res, items, _ = run_eval(mimo_bin, tmp_path, "--base-url", a, "--model", "mimo-v2-nano",
                                 "--dataset", BUILTIN, "--num-items", "40", "--concurrency", "4",
                                 "--compare-base-url", b)
    A, B, P = res["A"], res["B"], res["paired"]
    assert A["failed"] == B["failed"] == 0 and A["items"] == B["items"] == 40
    assert B["accuracy"] >= 0.9, [x for x in items if x["run"] == "B" and not x["correct"]]
    assert P["only_a"] <= 2 and P["mcnemar_p"] > 0.05, P


@pytest.mark.parametrize("variant", ["fp8", "bf16-sharded", "v2.5-pro", "v2.6-flash"])
def test_load_time_experts_equal_the_quantized_checkpoint(mimo_bin, checkpoint, tmp_path, variant):
    src = checkpoint(variant)
    out = str(tmp_path / "q")
    run_quantize(mimo_bin, src, out)
    ids = ",".join(str(x) for x in np.random.default_rng(5).integers(0, 500, 20))
    got = {}
    for label, args in (("file", ["--model", out]),
                        ("load", ["--model", src, "--experts", "mxfp4"])):
        f = tmp_path / f"{label}.bin"
        p = subprocess.run([mimo_bin, "logits", *args, "--ids", ids, "--out", str(f), "--threads",
                            "2", "--mode", "decode"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        got[label] = np.fromfile(f, dtype="<f4")
        if label == "load":
            already = variant.startswith("v2.6")  # its experts are MXFP4 as stored
            assert (": 0 routed expert weights" in p.stderr) == already, p.stderr
    assert got["file"].size > 0 and np.array_equal(got["file"], got["load"])


def test_load_time_experts_through_serve_flags(mimo_bin, tmp_path):
    p = subprocess.run([mimo_bin, "chat", "--model", NANO_FP8, "--experts", "mxfp4", "--message",
                        "What is 27 + 15?", "--max-tokens", "80"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "So 27 + 15 = 42." in p.stdout
    assert "quantized to MXFP4 at load" in p.stderr and "page cache" in p.stderr
    p = subprocess.run([mimo_bin, "chat", "--model", NANO_FP8, "--experts", "int4", "--message",
                        "hi"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "(fp8, int8 or mxfp4)" in p.stderr
