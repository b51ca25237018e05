"""safetensors read/write, BF16 and FP8-E4M3 conversion, and loading an exported mimo-v2-nano
checkpoint (BF16 or FP8 block-quantized) back into the NanoMiMo module for evaluation."""
import json
import os
import struct
from typing import Dict, Tuple

import numpy as np
import torch

BLOCK = 128
E4M3_MAX = 448.0


# --------------------------------------------------------------------------------------------
# dtypes
def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16). No NaN in our weights."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def bf16_round(x: np.ndarray) -> np.ndarray:
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def e4m3_table() -> np.ndarray:
    """Value of each of the 256 OCP float8_e4m3fn codes (NaN for 0x7F / 0xFF)."""
    vals = np.zeros(256, dtype=np.float64)
    for code in range(256):
        s, e, m = code >> 7, (code >> 3) & 0xF, code & 7
        if e == 0xF and m == 7:
            v = float("nan")
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        vals[code] = -v if s else v
    return vals


_E4M3 = e4m3_table()
_POS = _E4M3[:127]  # codes 0..126: 0 .. 448, increasing


def f32_to_e4m3(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to e4m3fn codes (uint8); |x| must be <= 448."""
    a = np.abs(x.astype(np.float64))
    assert np.all(a <= E4M3_MAX * (1 + 1e-6)), "value out of e4m3 range"
    hi = np.clip(np.searchsorted(_POS, a, side="left"), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    dlo, dhi = np.abs(a - _POS[lo]), np.abs(_POS[hi] - a)
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    neg = (x < 0) & (code != 0)
    return np.where(neg, code | 0x80, code).astype(np.uint8)


def e4m3_to_f32(c: np.ndarray) -> np.ndarray:
    return _E4M3[c].astype(np.float32)


def quantize_blocks(w: np.ndarray, row_groups=None) -> Tuple[np.ndarray, np.ndarray]:
    """w [N, K] f32 -> (codes uint8 [N, K], scale_inv f32 [nrb, ceil(K/128)]); row_groups: list of
    (start, end) row ranges, one scale row each (default: consecutive 128-row blocks).
    scale_inv = amax / 448 of the block; W ~= codes * scale_inv."""
    n, k = w.shape
    if row_groups is None:
        row_groups = [(r, min(n, r + BLOCK)) for r in range(0, n, BLOCK)]
    kb = -(-k // BLOCK)
    scale = np.zeros((len(row_groups), kb), dtype=np.float32)
    codes = np.zeros((n, k), dtype=np.uint8)
    for i, (r0, r1) in enumerate(row_groups):
        for j in range(kb):
            blk = w[r0:r1, j * BLOCK:(j + 1) * BLOCK]
            amax = float(np.abs(blk).max())
            s = np.float32(amax / E4M3_MAX) if amax > 0 else np.float32(1.0)
            scale[i, j] = s
            codes[r0:r1, j * BLOCK:(j + 1) * BLOCK] = f32_to_e4m3(np.clip(blk / s, -E4M3_MAX, E4M3_MAX))
    return codes, scale


def dequant_blocks(codes, scale, row_groups=None):
    n, k = codes.shape
    if row_groups is None:
        row_groups = [(r, min(n, r + BLOCK)) for r in range(0, n, BLOCK)]
    out = e4m3_to_f32(codes)
    for i, (r0, r1) in enumerate(row_groups):
        out[r0:r1] *= np.repeat(scale[i], BLOCK)[:k][None, :]
    return out


def kv_section_groups(nkv: int, tp: int, dqk: int, dv: int):
    """Row groups of the per-TP-section K/V FP8 grid (spec section 4): in section s the rows
    R = [K rows of its kv heads ; V rows of its kv heads] are cut into 128-row blocks; blocks that
    start inside K are k scale rows, the others v scale rows. Returns (k_groups, v_groups) as lists
    of (k_or_v, start, end) pieces per scale row."""
    g = nkv // tp
    kgroups, vgroups = [], []
    for s in range(tp):
        klen, vlen = g * dqk, g * dv
        for b0 in range(0, klen + vlen, BLOCK):
            b1 = min(klen + vlen, b0 + BLOCK)
            pieces = []
            if b0 < klen:
                pieces.append(("k", s * klen + b0, s * klen + min(b1, klen)))
            if b1 > klen:
                pieces.append(("v", s * vlen + max(b0, klen) - klen, s * vlen + b1 - klen))
            (kgroups if b0 < klen else vgroups).append(pieces)
    return kgroups, vgroups


def quantize_kv_sectioned(k: np.ndarray, v: np.ndarray, nkv: int, tp: int, dqk: int, dv: int):
    kg, vg = kv_section_groups(nkv, tp, dqk, dv)
    kb = -(-k.shape[1] // BLOCK)
    kc, vc = np.zeros(k.shape, np.uint8), np.zeros(v.shape, np.uint8)
    ks, vs = np.zeros((len(kg), kb), np.float32), np.zeros((len(vg), kb), np.float32)
    src = {"k": (k, kc), "v": (v, vc)}
    for groups, sc in ((kg, ks), (vg, vs)):
        for i, pieces in enumerate(groups):
            for j in range(kb):
                cs = slice(j * BLOCK, (j + 1) * BLOCK)
                amax = max(float(np.abs(src[t][0][r0:r1, cs]).max()) for t, r0, r1 in pieces)
                s = np.float32(amax / E4M3_MAX) if amax > 0 else np.float32(1.0)
                sc[i, j] = s
                for t, r0, r1 in pieces:
                    src[t][1][r0:r1, cs] = f32_to_e4m3(np.clip(src[t][0][r0:r1, cs] / s, -E4M3_MAX, E4M3_MAX))
    return kc, ks, vc, vs


def dequant_kv_sectioned(kc, ks, vc, vs, nkv, tp, dqk, dv):
    kg, vg = kv_section_groups(nkv, tp, dqk, dv)
    k, v = e4m3_to_f32(kc), e4m3_to_f32(vc)
    dst = {"k": k, "v": v}
    for groups, sc in ((kg, ks), (vg, vs)):
        for i, pieces in enumerate(groups):
            col = np.repeat(sc[i], BLOCK)[:k.shape[1]][None, :]
            for t, r0, r1 in pieces:
                dst[t][r0:r1] *= col
    return k, v


# --------------------------------------------------------------------------------------------
# safetensors
_DT = {"BF16": (np.uint16, 2), "F32": (np.float32, 4), "F8_E4M3": (np.uint8, 1)}


def write_safetensors(path: str, tensors: Dict[str, Tuple[str, np.ndarray]], metadata=None):
    """tensors: name -> (dtype tag, array already in the storage type: uint16 for BF16, uint8 for
    F8_E4M3, float32 for F32). Names are written sorted, data 8-byte aligned in the header."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        tag, arr = tensors[name]
        want, _ = _DT[tag]
        arr = np.ascontiguousarray(arr)
        assert arr.dtype == want, (name, arr.dtype, tag)
        b = arr.tobytes()
        header[name] = {"dtype": tag, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def read_safetensors(path: str) -> Dict[str, Tuple[str, np.ndarray]]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        dt, _ = _DT[h["dtype"]]
        a, b = h["data_offsets"]
        out[name] = (h["dtype"], np.frombuffer(data[a:b], dtype=dt).reshape(h["shape"]))
    return out


def to_f32(tag: str, arr: np.ndarray) -> np.ndarray:
    if tag == "BF16":
        return bf16_bits_to_f32(arr)
    if tag == "F32":
        return arr.astype(np.float32)
    raise ValueError(tag)


# --------------------------------------------------------------------------------------------
# checkpoint -> NanoMiMo (full vocabulary)
def load_model(model_dir: str):
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from model import NanoConfig, NanoMiMo
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    raw = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    nk = cfg.get("num_nextn_predict_layers", 0)
    c = NanoConfig(hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"],
                   heads=cfg["num_attention_heads"], full_kv=cfg["num_key_value_heads"],
                   swa_kv=cfg["swa_num_key_value_heads"], head_dim=cfg["head_dim"],
                   v_head_dim=cfg["v_head_dim"], rot=int(cfg["head_dim"] * cfg["partial_rotary_factor"]),
                   rope_theta=cfg["rope_theta"], swa_rope_theta=cfg["swa_rope_theta"],
                   window=cfg["sliding_window"], value_scale=cfg["attention_value_scale"],
                   intermediate=cfg["intermediate_size"], experts=cfg["n_routed_experts"],
                   top_k=cfg["num_experts_per_tok"], moe_intermediate=cfg["moe_intermediate_size"],
                   mtp=nk, eps=cfg["layernorm_epsilon"], n_in=cfg["vocab_size"],
                   n_out=cfg["vocab_size"])
    assert c.pattern() == cfg["hybrid_layer_pattern"]
    tp = cfg["num_key_value_heads"]

    def dense(name):
        tag, arr = raw[name]
        if tag == "F8_E4M3":
            return dequant_blocks(arr, raw[name + "_scale_inv"][1])
        return to_f32(tag, arr)

    def qkv(prefix, swa):
        q = dense(prefix + "q_proj.weight")
        kn, vn = prefix + "k_proj.weight", prefix + "v_proj.weight"
        if raw[kn][0] == "F8_E4M3" and not swa:
            k, v = dequant_kv_sectioned(raw[kn][1], raw[kn + "_scale_inv"][1], raw[vn][1],
                                        raw[vn + "_scale_inv"][1], c.full_kv, tp, c.head_dim, c.v_head_dim)
        else:
            k, v = dense(kn), dense(vn)
        return q, k, v

    m = _build_empty(NanoMiMo, c)  # no random init of the 152k-row tables
    sd = {}
    sd["embed.weight"] = dense("model.embed_tokens.weight")
    sd["lm_head.weight"] = dense("lm_head.weight")
    sd["norm.weight"] = dense("model.norm.weight")
    for i in range(c.layers):
        p = f"model.layers.{i}."
        swa = c.pattern()[i] == 1
        q, k, v = qkv(p + "self_attn.", swa)
        sd[f"layers.{i}.self_attn.q_proj.weight"] = q
        sd[f"layers.{i}.self_attn.k_proj.weight"] = k
        sd[f"layers.{i}.self_attn.v_proj.weight"] = v
        sd[f"layers.{i}.self_attn.o_proj.weight"] = dense(p + "self_attn.o_proj.weight")
        if swa:
            sd[f"layers.{i}.self_attn.attention_sink_bias"] = dense(p + "self_attn.attention_sink_bias")
        sd[f"layers.{i}.input_layernorm.weight"] = dense(p + "input_layernorm.weight")
        sd[f"layers.{i}.post_attention_layernorm.weight"] = dense(p + "post_attention_layernorm.weight")
        if c.is_moe(i):
            sd[f"layers.{i}.mlp.gate_weight"] = dense(p + "mlp.gate.weight")
            sd[f"layers.{i}.mlp.e_score_correction_bias"] = dense(p + "mlp.gate.e_score_correction_bias")
            for nm, key in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
                sd[f"layers.{i}.mlp.{nm}"] = np.stack(
                    [dense(f"{p}mlp.experts.{e}.{key}.weight") for e in range(c.experts)])
        else:
            for key in ("gate_proj", "up_proj", "down_proj"):
                sd[f"layers.{i}.mlp.{key}.weight"] = dense(f"{p}mlp.{key}.weight")
    for kk in range(nk):
        p = f"model.mtp.layers.{kk}."
        d = f"mtp.{kk}."
        for key in ("enorm", "hnorm", "input_layernorm", "pre_mlp_layernorm", "final_layernorm"):
            sd[d + key + ".weight"] = dense(p + key + ".weight")
        sd[d + "eh_proj.weight"] = dense(p + "eh_proj.weight")
        q, k, v = qkv(p + "self_attn.", True)
        sd[d + "self_attn.q_proj.weight"], sd[d + "self_attn.k_proj.weight"], sd[d + "self_attn.v_proj.weight"] = q, k, v
        sd[d + "self_attn.o_proj.weight"] = dense(p + "self_attn.o_proj.weight")
        sd[d + "self_attn.attention_sink_bias"] = dense(p + "self_attn.attention_sink_bias")
        for key in ("gate_proj", "up_proj", "down_proj"):
            sd[d + f"mlp.{key}.weight"] = dense(f"{p}mlp.{key}.weight")
    m.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in sd.items()})
    m.eval()
    return m, cfg


def _build_empty(cls, c):
    """NanoMiMo(c) without running the random init / constraints (they are overwritten anyway)."""
    orig_init, orig_con = cls._init, cls.apply_constraints
    cls._init = lambda self: None
    cls.apply_constraints = lambda self: None
    try:
        with torch.no_grad():
            m = cls(c)
    finally:
        cls._init, cls.apply_constraints = orig_init, orig_con
    return m
