"""`mimo inspect --max-context 262144` on full-size MiMo-V2-Flash, V2.5-Pro and V2.6-Flash
checkpoints written as sparse files (`make_tiny_model.py --full-size NAME --sparse`: real
config, real tensor names, dtypes and shapes, data left as holes). Checked against numbers this
test computes itself from spec sections 1, 3 and 4: the variant name, bytes by dtype (from the
spec's per-tensor shapes, plus the towers' bytes read from the file headers), the MXFP4 and
FP8-layout counts, and the KV plan. Reading the weights would fault in hundreds of GB; the test
requires a small resident set instead."""
import json
import os
import re
import struct
import subprocess
import tempfile
import time

import pytest

import make_tiny_model as M

CTX = 262144
V = 152576


def cdiv(a, b):
    return -(-a // b)


def spec_bytes(name):
    """Bytes by dtype of the language model (main layers, 3 MTP layers, embeddings) by formula."""
    pro = "pro" in name
    H = 6144 if pro else 4096
    L, n_full = (70, 10) if pro else (48, 9)
    n_swa, mtp = L - n_full, 3
    nh, kv_full, kv_swa = (128, 8, 8) if pro else (64, 4, 8)
    E, MI, I = (384 if pro else 256), 2048, 16384
    bf16 = 2 * V * H + (2 * L + 1) * H + 5 * H * mtp  # embed, lm_head, norms (MTP: 5 each)
    bf16 += (L + mtp) * H * nh * 128 + (n_swa + mtp) * nh + mtp * H * 2 * H  # o_proj, sinks, eh
    f8, f32, u8 = 0, 0, 0

    def fp8(rows, cols, scale_rows=None):
        nonlocal f8, f32
        f8 += rows * cols
        f32 += 4 * (scale_rows if scale_rows is not None else cdiv(rows, 128)) * cdiv(cols, 128)

    if name == "flash":  # separate q/k/v; full layers on the per-TP-section grid (k 8, v 4 rows)
        for _ in range(L + mtp):
            fp8(nh * 192, H)
        for _ in range(n_full):
            fp8(kv_full * 192, H, 2 * kv_full)
            fp8(kv_full * 128, H, kv_full)
        for _ in range(n_swa + mtp):
            fp8(kv_swa * 192, H)
            fp8(kv_swa * 128, H)
    else:  # fused qkv_proj, TP = num_key_value_heads sections of ceil(section / 128) scale rows
        tp = kv_full
        for layers, kv in ((n_full, kv_full), (n_swa + mtp, kv_swa)):
            sec = nh // tp * 192 + kv // tp * 320
            for _ in range(layers):
                fp8(tp * sec, H, tp * cdiv(sec, 128))
    for _ in range(1 + mtp):  # dense MLP of layer 0 and of every MTP layer
        fp8(I, H), fp8(I, H), fp8(H, I)
    moe = L - 1
    if name == "v2.6-flash":  # MXFP4 experts: codes at 4 bits + one exponent byte per 32
        u8 = moe * E * (2 * (MI * H // 2 + MI * H // 32) + (H * MI // 2 + H * MI // 32))
        bf16 += moe * E * H  # bf16 router weight
        f32 += 4 * moe * E  # fp32 correction bias
    else:
        for _ in range(moe * E):
            fp8(MI, H), fp8(MI, H), fp8(H, MI)
        f32 += 4 * moe * (E * H + E)  # fp32 router and bias
    out = {"BF16": 2 * bf16, "F8_E4M3": f8, "F32": f32}
    if u8:
        out["U8"] = u8
    return out


def header_shapes(d):
    """name -> (dtype, shape, nbytes) from the safetensors headers only (8-byte length + JSON)."""
    out = {}
    for fn in os.listdir(d):
        if fn.endswith(".safetensors"):
            with open(os.path.join(d, fn), "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                h = json.loads(f.read(n))
            for k, v in h.items():
                if k != "__metadata__":
                    out[k] = (v["dtype"], v["shape"], v["data_offsets"][1] - v["data_offsets"][0])
    return out


def header_tensors(d):
    """name -> (dtype, nbytes) from the safetensors headers."""
    return {k: (dt, nb) for k, (dt, _, nb) in header_shapes(d).items()}


def is_language_model(n):
    return n.startswith(("model.layers.", "model.embed_tokens.", "model.norm.", "lm_head.",
                         "model.mtp."))


CASES = {  # name: (variant, full layers, swa layers, kv heads full / swa, mxfp4 weights, layouts)
    "flash": ("MiMo-V2-Flash", 9, 39, 4, 8, 0, {"kv-tp-section": 9}),
    "v2.5-pro": ("MiMo-V2.5-Pro", 10, 60, 8, 8, 0, {"fused-qkv-tp-section": 73}),
    "v2.6-flash": ("MiMo-V2.6-Flash", 9, 39, 4, 8, 47 * 256 * 3, {"fused-qkv-tp-section": 51}),
}


@pytest.fixture(scope="module")
def full_size_dir(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            d = str(tmp_path_factory.mktemp("full-" + name))
            M.write_full_size(d, name)
            made[name] = d
        return made[name]
    return get


# Runs argv[2:] and writes its largest resident set (KiB) to the file argv[1]. A child's
# ru_maxrss starts at its parent's resident set (fork copies the page tables; vfork shares the mm,
# and exec records its high-water mark), so measuring `mimo` straight from this pytest process would
# count whatever torch and the earlier tests left resident here. This small interpreter is the
# parent instead: what it adds is its own ~10 MB.
MEASURE = r"""
import os, sys, threading
p = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
killer = threading.Timer(120, os.kill, (p, 9))
killer.start()
_, status, usage = os.wait4(p, 0)
killer.cancel()
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_inspect(mimo_bin, d):
    """(inspect's JSON, seconds, the inspect process's own largest resident set in KiB), measured
    by MEASURE's small parent process (see there), not by RUSAGE_CHILDREN's maximum over every
    child this pytest process has waited for."""
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        rss_path = os.path.join(tmp, "maxrss")
        p = subprocess.run(["/usr/bin/python3", "-c", MEASURE, rss_path, mimo_bin, "inspect",
                            "--model", d, "--json", "--max-context", str(CTX)],
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        rss_kib = int(open(rss_path).read())
    return json.loads(p.stdout), time.time() - t0, rss_kib


@pytest.mark.parametrize("name", list(CASES))
def test_full_size_checkpoint_inspects_without_reading_weights(mimo_bin, full_size_dir, name):
    variant, n_full, n_swa, kv_full, kv_swa, n_mxfp4, layouts = CASES[name]
    d = full_size_dir(name)
    files = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors")]
    apparent = sum(os.path.getsize(f) for f in files)
    allocated = sum(os.stat(f).st_blocks * 512 for f in files)
    assert apparent > 100e9 and allocated < 100e6, (apparent, allocated)  # holes: no disk

    # Reading the weights would fault in the holes' pages (hundreds of GB): inspect must stay
    # small and quick.
    info, seconds, rss_kib = run_inspect(mimo_bin, d)
    assert rss_kib < 1 << 20 and seconds < 60, (rss_kib, seconds)

    assert info["variant"] == variant
    assert info["mtp_layers"] == 3 and info["mxfp4_weights"] == n_mxfp4
    assert {k: v for k, v in info["fp8_layouts"].items() if k != "uniform"} == layouts

    headers = header_tensors(d)
    towers = {}
    for n, (dtype, nbytes) in headers.items():
        if not is_language_model(n):
            towers[dtype] = towers.get(dtype, 0) + nbytes
    assert bool(towers) == (name == "v2.6-flash")  # the omni sibling carries vision/audio towers
    want = spec_bytes(name)
    for dtype, nbytes in towers.items():
        want[dtype] = want.get(dtype, 0) + nbytes
    assert info["bytes_by_dtype"] == want
    assert info["num_skipped_multimodal_tensors"] == sum(not is_language_model(n) for n in headers)
    assert sum(g["bytes"] for g in info["skipped_groups"].values()) == sum(towers.values())

    # KV plan, bf16, block 16, one sequence of 262144 tokens; MTP layers are 3 more SWA layers.
    kv = info["kv_cache"]
    per_token_full = n_full * kv_full * (192 + 128) * 2
    per_token_swa = (n_swa + 3) * kv_swa * (192 + 128) * 2
    blocks = cdiv(128 - 1 + 1, 16) + 1  # window 128 + a decode chunk of 1, + one block
    assert kv["num_full_layers"] == n_full and kv["num_swa_layers"] == n_swa + 3
    assert kv["full_bytes_per_token"] == per_token_full
    assert kv["full_bytes_per_sequence"] == CTX * per_token_full
    assert kv["swa_blocks_per_sequence"] == blocks
    assert kv["swa_bytes_per_sequence"] == blocks * 16 * per_token_swa
    assert kv["unbounded_swa_bytes_per_sequence"] == CTX * per_token_swa
    assert kv["tokens_that_fit"] == CTX


# `--tensor-parallel-size N [--expert-parallel]`: what each rank holds. Expected from the headers
# by the split rules of model/tensor_parallel.h (every split here is exact: hidden, vocabulary,
# intermediate, heads and experts divide by N): embeddings, norms and the router whole on every
# rank; k/v a share of max(1/N, 1/kv_heads) (kv heads replicated when N exceeds them); q, o_proj,
# MLP, lm_head, eh_proj and (without EP) every expert 1/N; with EP, E/N whole experts.
TP_CASES = [("flash", 8, False), ("v2.5-pro", 4, True), ("v2.6-flash", 2, False)]


@pytest.mark.parametrize("name,n,ep", TP_CASES)
def test_tensor_parallel_inspect_reports_per_rank_memory(mimo_bin, full_size_dir, name, n, ep):
    d = full_size_dir(name)
    cfg = json.load(open(os.path.join(d, "config.json")))
    kv = {"full": cfg["num_key_value_heads"], "swa": cfg["swa_num_key_value_heads"]}
    nh = {"full": cfg["num_attention_heads"], "swa": cfg["swa_num_attention_heads"]}
    pattern = cfg["hybrid_layer_pattern"]
    dqk, dv = 192, 128

    def kind(t):  # attention kind of the tensor's layer (MTP layers are sliding window)
        if t.startswith("model.layers."):
            return "swa" if pattern[int(t.split(".")[2])] == 1 else "full"
        return "swa"

    def share(t):
        if ".experts." in t:
            return 1.0 / n  # EP: E/N experts on each rank; TP: 1/N of each
        if any(p in t for p in (".q_proj.", "attention_sink_bias")):
            return 1.0 / n
        if any(p in t for p in (".k_proj.", ".v_proj.")):
            return max(1.0 / n, 1.0 / kv[kind(t)])
        if ".qkv_proj." in t:
            k = kind(t)
            q_rows, kv_rows = nh[k] * dqk, kv[k] * (dqk + dv)
            return (q_rows / n + kv_rows * max(1.0 / n, 1.0 / kv[k])) / (q_rows + kv_rows)
        if any(p in t for p in (".o_proj.", "_proj.", "lm_head.")):
            return 1.0 / n  # o_proj, gate/up/down_proj, eh_proj, lm_head
        return 1.0  # embeddings, norms, router weight and bias
    tensors = {k: v for k, v in header_tensors(d).items() if is_language_model(k)}
    total = sum(b for _, b in tensors.values())
    want = sum(b * share(t) for t, (_, b) in tensors.items())

    args = [mimo_bin, "inspect", "--model", d, "--json", "--max-context", str(CTX)]
    one = json.loads(subprocess.run(args, capture_output=True, text=True, timeout=120,
                                    check=True).stdout)
    p = subprocess.run(args + ["--tensor-parallel-size", str(n)] + (["--expert-parallel"] if ep else []),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    tp = json.loads(p.stdout)["tensor_parallel"]
    assert tp["size"] == n and tp["expert_parallel"] == ep
    assert tp["language_model_bytes"] == pytest.approx(total, rel=1e-6)
    assert len(tp["weight_bytes_per_rank"]) == n
    for got in tp["weight_bytes_per_rank"]:
        assert got == pytest.approx(want, rel=1e-6)
    # Each rank's KV cache holds only its kv heads: full-attention bytes per token shrink by the
    # kv-head share of full layers (MTP layers are sliding window, in the fixed SWA part).
    kv_one, kv_tp = one["kv_cache"], tp["kv_cache_per_rank"]
    assert kv_tp["full_bytes_per_token"] == kv_one["full_bytes_per_token"] * max(1 / n, 1 / kv["full"])
    assert kv_tp["swa_bytes_per_sequence"] == kv_one["swa_bytes_per_sequence"] * max(1 / n, 1 / kv["swa"])


# The memory plan (`--experts mxfp4`): weight bytes split into routed experts and the rest, as
# stored and as if every routed expert (main and MTP layers) were rewritten to MXFP4, checked
# against a count from the safetensors headers: per expert weight [N, K] N * ceil(K / 2) bytes of
# E2M1 pairs + N * ceil(K / 32) E8M0 exponents, its F32 weight_scale_inv dropped; experts already
# MXFP4 (U8 codes + weight_scale) unchanged. Also the bytes one decode token reads (as
# test_active_weight_bytes.py counts them) and the KV cache the plan holds.
EXPERT = re.compile(r"^model\.(mtp\.)?layers\.\d+\.mlp\.experts\.\d+\.")


def planned_weights(d, mxfp4):
    cfg = json.load(open(os.path.join(d, "config.json")))
    experts = other = main_experts = active = 0
    for n, (dtype, shape, nbytes) in header_shapes(d).items():
        if not is_language_model(n):
            continue
        if EXPERT.match(n):
            b = nbytes
            if mxfp4 and n.endswith(".weight_scale_inv"):
                b = 0
            elif mxfp4 and n.endswith(".weight") and dtype != "U8":
                rows, k = shape
                b = rows * cdiv(k, 2) + rows * cdiv(k, 32)
            experts += b
            if n.startswith("model.layers."):
                main_experts += b
            continue
        other += nbytes
        if n == "model.embed_tokens.weight":
            active += nbytes // shape[0]  # one row
        elif n.startswith(("model.layers.", "model.norm.", "lm_head.")):
            active += nbytes
    active += main_experts * cfg["num_experts_per_tok"] / cfg["n_routed_experts"]
    return experts, other, active


@pytest.mark.parametrize("name", ["flash", "v2.5-pro", "v2.6-flash", "v2.6-pro"])
def test_memory_plan_with_mxfp4_experts(mimo_bin, full_size_dir, name):
    d = full_size_dir(name)
    args = [mimo_bin, "inspect", "--model", d, "--json", "--experts", "mxfp4", "--max-context",
            "32768", "--kv-cache-dtype", "bf16"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    plan = info["memory_plan"]
    assert plan["kv_cache_dtype"] == "bf16" and plan["max_context"] == 32768
    for key, mxfp4 in (("as_stored", False), ("experts_mxfp4", True)):
        experts, other, active = planned_weights(d, mxfp4)
        col = plan[key]
        assert col["expert_bytes"] == experts, (key, col["expert_bytes"], experts)
        assert col["other_weight_bytes"] == other
        assert col["active_weight_bytes_per_token"] == pytest.approx(active, abs=1)
        assert col["total_bytes"] == (col["expert_bytes"] + col["other_weight_bytes"] +
                                      col["kv_cache_bytes"] + col["scratch_bytes"])
        assert 0 < col["scratch_bytes"] < 1 << 30
    stored, mx = plan["as_stored"], plan["experts_mxfp4"]
    assert stored["other_weight_bytes"] + stored["expert_bytes"] + stored["tower_bytes"] == \
        sum(info["bytes_by_dtype"].values())
    cfg = json.load(open(os.path.join(d, "config.json")))
    H, MI, E = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["n_routed_experts"]
    moe = sum(1 for f in cfg["moe_layer_freq"] if f)
    # The closed form: gate, up [MI, H] and down [H, MI] at 4.25 bits per weight.
    assert mx["expert_bytes"] == moe * E * 3 * (MI * H // 2 + MI * H // 32)
    if name.startswith("v2.6"):  # already MXFP4: nothing changes
        assert mx == stored
    else:  # FP8 + a 128x128 F32 scale grid -> MXFP4: a little over half
        assert 0.52 < mx["expert_bytes"] / stored["expert_bytes"] < 0.54
    # With steps of one token the plan's KV cache is the --max-context plan's.
    one = json.loads(subprocess.run(args + ["--max-num-batched-tokens", "1"], capture_output=True,
                                    text=True, timeout=120, check=True).stdout)
    assert one["memory_plan"]["as_stored"]["kv_cache_bytes"] == one["kv_cache"]["total_bytes"]


# --dense / --lm-head in the memory plan: the attention projections (separate or fused qkv),
# o_proj, the dense MLPs and MTP's eh_proj, and lm_head, as if rewritten at load, counted from the
# headers: FP8 [N, K] -> N * K + 4 * ceil(N / 128) * ceil(K / 128) (a weight already FP8 kept with
# its scales), MXFP4 -> N * ceil(K / 2) + N * ceil(K / 32), int8 -> N * K + 4 * N * ceil(K / 32)
# (under both an FP8 weight's F32 scales dropped).
DENSE = re.compile(r"\.(self_attn\.(q|k|v|qkv|o)_proj|mlp\.(gate|up|down)_proj|eh_proj)\.weight"
                   r"(_scale_inv)?$")


def planned_dense(d, dense, lm_head):
    cfg = json.load(open(os.path.join(d, "config.json")))
    hdr = header_shapes(d)
    other = active = 0
    for n, (dtype, shape, nbytes) in hdr.items():
        if not is_language_model(n) or EXPERT.match(n):
            continue
        fmt = lm_head if n.startswith("lm_head.") else dense if DENSE.search(n) else None
        b = nbytes
        if fmt and n.endswith("_scale_inv"):
            b = nbytes if fmt == "fp8" else 0
        elif fmt and dtype != "U8" and not (fmt == "fp8" and dtype == "F8_E4M3"):
            rows, k = shape
            b = {"fp8": rows * k + 4 * cdiv(rows, 128) * cdiv(k, 128),
                 "int8": rows * k + 4 * rows * cdiv(k, 32),
                 "mxfp4": rows * cdiv(k, 2) + rows * cdiv(k, 32)}[fmt]
        other += b
        if n == "model.embed_tokens.weight":
            active += nbytes // shape[0]
        elif n.startswith(("model.layers.", "model.norm.", "lm_head.")):
            active += b
    assert not cfg.get("tie_word_embeddings")
    return other, active


@pytest.mark.parametrize("name,dense,lm_head", [("flash", "fp8", "fp8"),
                                                ("v2.5-pro", "mxfp4", "fp8"),
                                                ("v2.6-flash", "fp8", "mxfp4"),
                                                ("flash", "int8", "int8")])
def test_memory_plan_with_dense_and_lm_head_formats(mimo_bin, full_size_dir, name, dense, lm_head):
    d = full_size_dir(name)
    args = [mimo_bin, "inspect", "--model", d, "--json", "--dense", dense, "--lm-head", lm_head,
            "--max-context", "4096"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)["memory_plan"]
    q, stored = plan["quantized"], plan["as_stored"]
    assert q["flags"] == f"--dense {dense} --lm-head {lm_head}"
    other, active_other = planned_dense(d, dense, lm_head)
    assert q["other_weight_bytes"] == other
    assert q["expert_bytes"] == stored["expert_bytes"]  # experts as stored
    # A token reads the same experts in both columns; the rest as counted above.
    assert q["active_weight_bytes_per_token"] == pytest.approx(
        stored["active_weight_bytes_per_token"] - (stored_other_active(d) - active_other), abs=1)
    assert other < stored["other_weight_bytes"]
    p = subprocess.run([mimo_bin, "inspect", "--model", d, "--dense", "int4"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "--dense 'int4' is not supported (fp8, int8 or mxfp4)" in p.stderr


def stored_other_active(d):
    """A token's reads of everything but the routed experts, as stored."""
    return planned_dense(d, None, None)[1]
