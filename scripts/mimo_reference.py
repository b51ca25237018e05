#!/usr/bin/python3
"""PyTorch reference forward pass of MiMo-V2 checkpoints, written from
shared/spec/mimo-v2-architecture.md (sections 1-4), independently of the C++ engine.

Numerics: everything runs in float64 (weights are dequantised exactly from the stored bytes and are
representable in float64), so it is a strictly more precise oracle for the engine's fp32 path.
The spec's "RMSNorm / router / softmax in fp32" steps are therefore computed in float64 here.

Own parsers: safetensors (single file or sharded via model.safetensors.index.json), BF16 / F16 /
F32 / F8_E4M3 (decoded by a 256-entry table), MXFP4 routed experts (E2M1 codes by the spec's
16-entry table, low nibble first, E8M0 exponents per 32 elements; written from the spec, sharing
nothing with the C++ or the generator), and every FP8 scale layout of spec section 4:
  * uniform 128x128 grid (ceil at the edges),
  * per-TP-section grid of separate k_proj / v_proj (Flash full attention: one fused [Q;K;V] grid per
    section, TP = num_key_value_heads; k scale rows and v scale rows split where the blocks start),
  * fused qkv_proj [Q_0|K_0|V_0|Q_1|...] with ceil(section_rows/128) scale rows per section.

Usage as a library:
    ref = load_reference("DIR")
    logits = ref.forward([1, 2, 3])            # float64 [T, vocab]
    out = ref.mtp_forward(0, hprev, next_ids, positions)
"""
import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import torch

BLOCK = 128  # FP8 block size (quantization_config.weight_block_size)


# ----------------------------------------------------------------------------------------------
# FP8 E4M3 (OCP "fn" variant: no infinities, NaN = S.1111.111, max 448), decoded by table.
def _e4m3_value(code: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    exp_field = (code >> 3) & 0xF
    mant = code & 0x7
    if exp_field == 0xF and mant == 0x7:
        return float("nan")
    if exp_field == 0:
        return sign * math.ldexp(mant, -9)  # subnormal: (m/8) * 2^(1-7)
    return sign * math.ldexp(8 + mant, exp_field - 10)  # (1 + m/8) * 2^(e-7)


E4M3_TABLE = np.array([_e4m3_value(c) for c in range(256)], dtype=np.float64)


# ----------------------------------------------------------------------------------------------
# MXFP4 (spec section 4, OCP MX): 4-bit E2M1 codes, bit 3 the sign and bits 0-2 indexing
# {0, 0.5, 1, 1.5, 2, 3, 4, 6}; two codes per byte, element 2i in the LOW nibble of byte i and
# element 2i+1 in the HIGH nibble; one E8M0 exponent byte per 32 consecutive elements of a row,
# worth 2^(e - 127) (e = 255 is NaN).
MXFP4_BLOCK = 32
E2M1_TABLE = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
                      + [-v for v in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)], dtype=np.float64)


def e8m0_value(e: np.ndarray) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64)
    return np.where(e == 255, np.nan, np.exp2(e - 127.0))


def dequant_mxfp4(packed: np.ndarray, exps: np.ndarray, cols: Optional[int] = None) -> np.ndarray:
    """packed uint8 [N, ceil(K/2)] + exps uint8 [N, ceil(K/32)] -> float64 [N, K]
    (K = 2 * packed columns unless given)."""
    packed = np.asarray(packed, dtype=np.uint8)
    n, pc = packed.shape
    k = 2 * pc if cols is None else cols
    nb = -(-k // MXFP4_BLOCK)
    if exps.shape != (n, nb):
        raise ValueError(f"MXFP4 weight [{n}, {k}] wants exponents [{n}, {nb}], "
                         f"got {list(exps.shape)}")
    codes = np.empty((n, 2 * pc), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F  # element 2i: low nibble
    codes[:, 1::2] = packed >> 4    # element 2i + 1: high nibble
    scale = np.repeat(e8m0_value(exps), MXFP4_BLOCK, axis=1)[:, :k]
    return E2M1_TABLE[codes[:, :k]] * scale


# ----------------------------------------------------------------------------------------------
# safetensors reading (own parser).
DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


@dataclass
class RawTensor:
    dtype: str
    shape: List[int]
    data: bytes
    file: str


def read_safetensors_file(path: str) -> Dict[str, RawTensor]:
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} exceeds file size")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = info["dtype"], list(info["shape"])
        begin, end = info["data_offsets"]
        if dtype not in DTYPE_SIZES:
            raise ValueError(f"{path}: tensor {name}: unknown dtype {dtype}")
        want = DTYPE_SIZES[dtype] * int(np.prod(shape, dtype=np.int64))
        if end - begin != want or base + end > len(blob):
            raise ValueError(f"{path}: tensor {name}: bad data_offsets")
        out[name] = RawTensor(dtype, shape, blob[base + begin:base + end], path)
    return out


def read_checkpoint_tensors(model_dir: str) -> Dict[str, RawTensor]:
    index = os.path.join(model_dir, "model.safetensors.index.json")
    tensors: Dict[str, RawTensor] = {}
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
        for fn in files:
            part = read_safetensors_file(os.path.join(model_dir, fn))
            for name, t in part.items():
                if weight_map.get(name) == fn:
                    tensors[name] = t
        missing = [n for n in weight_map if n not in tensors]
        if missing:
            raise ValueError(f"index lists tensors not found in their shard: {missing[:3]}")
    else:
        tensors = read_safetensors_file(os.path.join(model_dir, "model.safetensors"))
    return tensors


def decode_raw(t: RawTensor) -> np.ndarray:
    """Stored tensor -> float64 numpy array (FP8 -> its E4M3 value, scales not applied)."""
    if t.dtype == "F32":
        a = np.frombuffer(t.data, dtype="<f4").astype(np.float64)
    elif t.dtype == "F64":
        a = np.frombuffer(t.data, dtype="<f8").astype(np.float64)
    elif t.dtype == "F16":
        a = np.frombuffer(t.data, dtype="<f2").astype(np.float64)
    elif t.dtype == "BF16":
        u16 = np.frombuffer(t.data, dtype="<u2").astype(np.uint32)
        a = (u16 << 16).view(np.float32).astype(np.float64)
    elif t.dtype == "F8_E4M3":
        a = E4M3_TABLE[np.frombuffer(t.data, dtype=np.uint8)]
    else:
        raise ValueError(f"cannot decode dtype {t.dtype}")
    return a.reshape(t.shape)


# ----------------------------------------------------------------------------------------------
# FP8 dequantisation, one function per layout of spec section 4.
def dequant_uniform(w: np.ndarray, s: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """W_real[n, k] = W[n, k] * s[n // 128, k // 128]; s has ceil(N/128) x ceil(K/128) entries."""
    n, k = w.shape
    rb, cb = -(-n // block), -(-k // block)
    if s.shape != (rb, cb):
        raise ValueError(f"uniform grid wants scale [{rb}, {cb}], got {list(s.shape)}")
    full = np.repeat(np.repeat(s, block, axis=0), block, axis=1)[:n, :k]
    return w * full


def dequant_repeat_crop(w: np.ndarray, s: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """A WRONG layout kept for self-tests: scale rows repeated by 128 and cropped to N rows
    (llama.cpp's generic dequant), whatever the true grid is."""
    n, k = w.shape
    full = np.repeat(np.repeat(s, block, axis=0), block, axis=1)[:n, :k]
    return w * full


def _row_chunks_dequant(rows: np.ndarray, srows: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """Applies scale row c to rows [128c, 128c+128) of `rows` (the last chunk may be short)."""
    out = np.empty_like(rows)
    n, k = rows.shape
    cb = -(-k // block)
    if srows.shape[0] != -(-n // block) or srows.shape[1] != cb:
        raise ValueError("section scale rows do not match the section")
    col = np.repeat(srows, block, axis=1)[:, :k]
    for c in range(srows.shape[0]):
        out[c * block:(c + 1) * block] = rows[c * block:(c + 1) * block] * col[c]
    return out


def sectioned_kv_scale_rows(nkv: int, tp: int, dqk: int, dv: int, block: int = BLOCK):
    """(k_rows, v_rows) of the per-TP-section grid: in each section K (g*dqk rows) starts on a block
    boundary (the section's Q part is block-aligned); blocks STARTING in K are k scale rows, blocks
    starting in V are v scale rows (the block straddling K|V belongs to K)."""
    g = nkv // tp
    kr = -(-g * dqk // block)
    total = -(-g * (dqk + dv) // block)
    return tp * kr, tp * (total - kr)


def dequant_sectioned_kv(k8, ks, v8, vs, nkv: int, tp: int, dqk: int, dv: int,
                         block: int = BLOCK):
    """Spec section 4 'padding trap': for section s stack R = [K rows of its kv heads; V rows of its
    kv heads] and apply k_s[s*kr ...] then v_s[s*vr ...] to consecutive 128-row chunks of R."""
    g = nkv // tp
    kr_all, vr_all = sectioned_kv_scale_rows(nkv, tp, dqk, dv, block)
    kr, vr = kr_all // tp, vr_all // tp
    k_out = np.empty_like(k8)
    v_out = np.empty_like(v8)
    for s in range(tp):
        kk = k8[s * g * dqk:(s + 1) * g * dqk]
        vv = v8[s * g * dv:(s + 1) * g * dv]
        r = np.concatenate([kk, vv], axis=0)
        sc = np.concatenate([ks[s * kr:(s + 1) * kr], vs[s * vr:(s + 1) * vr]], axis=0)
        rd = _row_chunks_dequant(r, sc, block)
        k_out[s * g * dqk:(s + 1) * g * dqk] = rd[:g * dqk]
        v_out[s * g * dv:(s + 1) * g * dv] = rd[g * dqk:]
    return k_out, v_out


def dequant_fused_qkv(w8, s, tp: int, nh: int, nkv: int, dqk: int, dv: int, block: int = BLOCK):
    """Fused qkv_proj = [Q_0|K_0|V_0|Q_1|K_1|V_1|...] (tp sections), ceil(section/128) scale rows
    per section. Returns the de-interleaved (q [nh*dqk,K], k [nkv*dqk,K], v [nkv*dv,K])."""
    qs, ks_, vs_ = (nh // tp) * dqk, (nkv // tp) * dqk, (nkv // tp) * dv
    sec = qs + ks_ + vs_
    srows = -(-sec // block)
    if w8.shape[0] != tp * sec or s.shape[0] != tp * srows:
        raise ValueError(f"fused qkv_proj: want [{tp * sec}, K] / scale [{tp * srows}, ..], "
                         f"got {list(w8.shape)} / {list(s.shape)}")
    qp, kp, vp = [], [], []
    for t in range(tp):
        rd = _row_chunks_dequant(w8[t * sec:(t + 1) * sec], s[t * srows:(t + 1) * srows], block)
        qp.append(rd[:qs])
        kp.append(rd[qs:qs + ks_])
        vp.append(rd[qs + ks_:])
    return np.concatenate(qp), np.concatenate(kp), np.concatenate(vp)


def split_fused_qkv_plain(w, tp: int, nh: int, nkv: int, dqk: int, dv: int):
    """De-interleaves an unquantised fused qkv_proj."""
    qs, ks_, vs_ = (nh // tp) * dqk, (nkv // tp) * dqk, (nkv // tp) * dv
    sec = qs + ks_ + vs_
    if w.shape[0] != tp * sec:
        raise ValueError(f"fused qkv_proj: want {tp * sec} rows, got {w.shape[0]}")
    parts = [w[t * sec:(t + 1) * sec] for t in range(tp)]
    return (np.concatenate([p[:qs] for p in parts]), np.concatenate([p[qs:qs + ks_] for p in parts]),
            np.concatenate([p[qs + ks_:] for p in parts]))


# ----------------------------------------------------------------------------------------------
# Config.
@dataclass
class LayerGeom:
    sliding: bool
    nh: int
    nkv: int
    dqk: int
    dv: int
    rot: int
    theta: float
    window: int  # 0 = full causal
    sinks: bool


@dataclass
class Config:
    raw: dict
    vocab: int
    hidden: int
    n_layers: int
    eps: float
    value_scale: float
    tie: bool
    moe_layers: List[bool]
    layers: List[LayerGeom]
    swa: LayerGeom  # the geometry MTP layers use
    n_experts: int
    top_k: int
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    routed_scaling: float
    tp: int  # FP8 / fused-qkv section count = num_key_value_heads (full layers)


def parse_config(cfg: dict) -> Config:
    def need(k):
        if k not in cfg or cfg[k] is None:
            raise ValueError(f"config.json: missing {k}")
        return cfg[k]

    rp = cfg.get("rope_parameters") or {}
    hidden = need("hidden_size")
    L = need("num_hidden_layers")
    nh = need("num_attention_heads")
    nkv = need("num_key_value_heads")
    dqk = cfg.get("head_dim") or hidden // nh
    dv = cfg.get("v_head_dim") or dqk
    prf = cfg.get("partial_rotary_factor", rp.get("partial_rotary_factor", 1.0))
    theta = cfg.get("rope_theta", rp.get("rope_theta", 10000.0))
    s_nh = cfg.get("swa_num_attention_heads") or nh
    s_nkv = cfg.get("swa_num_key_value_heads") or nkv
    s_dqk = cfg.get("swa_head_dim") or dqk
    s_dv = cfg.get("swa_v_head_dim") or s_dqk
    s_theta = cfg.get("swa_rope_theta", 10000.0)
    window = cfg.get("sliding_window") or cfg.get("sliding_window_size")
    pattern = cfg.get("hybrid_layer_pattern") or [0] * L
    full = LayerGeom(False, nh, nkv, dqk, dv, int(dqk * prf), float(theta), 0,
                     bool(cfg.get("add_full_attention_sink_bias", False)))
    swa = LayerGeom(True, s_nh, s_nkv, s_dqk, s_dv, int(s_dqk * prf), float(s_theta), int(window or 0),
                    bool(cfg.get("add_swa_attention_sink_bias", False)))
    freq = cfg.get("moe_layer_freq", 1)
    if isinstance(freq, list):
        moe = [bool(x) for x in freq]
    else:
        moe = [i > 0 and i % int(freq) == 0 for i in range(L)]
    rsf = cfg.get("routed_scaling_factor")
    return Config(
        raw=cfg, vocab=need("vocab_size"), hidden=hidden, n_layers=L,
        eps=float(cfg.get("layernorm_epsilon", 1e-5)),
        value_scale=float(cfg.get("attention_value_scale") or 1.0),
        tie=bool(cfg.get("tie_word_embeddings", False)), moe_layers=moe,
        layers=[swa if pattern[i] == 1 else full for i in range(L)], swa=swa,
        n_experts=int(cfg.get("n_routed_experts") or 0), top_k=int(cfg.get("num_experts_per_tok") or 0),
        n_group=int(cfg.get("n_group") or 1), topk_group=int(cfg.get("topk_group") or 1),
        norm_topk_prob=bool(cfg.get("norm_topk_prob", True)),
        routed_scaling=1.0 if rsf is None else float(rsf), tp=nkv)


# ----------------------------------------------------------------------------------------------
# Weights (float64 torch tensors, dequantised from the stored bytes).
class Weights:
    def __init__(self, model_dir: str, cfg: Config, wrong_grid: bool = False):
        self.raw = read_checkpoint_tensors(model_dir)
        self.cfg = cfg
        self.wrong_grid = wrong_grid
        self.layouts: Dict[str, str] = {}  # FP8 tensor name -> "uniform" / "kv-sectioned" / ...
        self.mxfp4_deviation = ""  # self-tests only: "nibbles" or "bias128" (Options)
        self._cache: Dict[str, object] = {}  # decoded tensors

    def has(self, name):
        return name in self.raw

    def plain(self, name, shape=None) -> torch.Tensor:
        """Decoded (and, for FP8, dequantised) tensor; `shape` is checked when given."""
        if name not in self._cache:
            if name not in self.raw:
                raise KeyError(f"missing tensor {name}")
            t = self.raw[name]
            if t.dtype == "F8_E4M3":
                a = self.dense_fp8(name)
            elif t.dtype == "U8":
                a = self.dense_mxfp4(name)
            else:
                a = decode_raw(t)
            self._cache[name] = torch.from_numpy(a)
        t = self._cache[name]
        if shape is not None and list(t.shape) != list(shape):
            raise ValueError(f"tensor {name}: shape {list(t.shape)}, expected {list(shape)}")
        return t

    def dense_fp8(self, name) -> np.ndarray:
        s = decode_raw(self.raw[name + "_scale_inv"])
        self.layouts[name] = "uniform"
        return dequant_uniform(decode_raw(self.raw[name]), s)

    def dense_mxfp4(self, name) -> np.ndarray:
        """`name` uint8 packed codes with E8M0 exponents in `name`_scale (not _scale_inv)."""
        if self.cfg.raw.get("quantization_config", {}).get("store_dtype") != "mxfp4":
            raise ValueError(f"{name}: U8 weight but quantization_config.store_dtype is not mxfp4")
        if name + "_scale" not in self.raw:
            raise KeyError(f"missing tensor {name}_scale (MXFP4 exponents of {name})")
        w, s = self.raw[name], self.raw[name + "_scale"]
        if w.dtype != "U8" or s.dtype != "U8" or len(w.shape) != 2:
            raise ValueError(f"{name}: MXFP4 wants U8 codes and U8 exponents, got {w.dtype} / "
                             f"{s.dtype}")
        self.layouts[name] = "mxfp4"
        packed = np.frombuffer(w.data, dtype=np.uint8).reshape(w.shape)
        exps = np.frombuffer(s.data, dtype=np.uint8).reshape(s.shape)
        if self.mxfp4_deviation == "nibbles":  # self-tests: high nibble first
            packed = ((packed >> 4) | (packed << 4)).astype(np.uint8)
        elif self.mxfp4_deviation == "bias128":  # self-tests: exponents off by one
            exps = (exps.astype(np.int64) - 1).clip(0, 254).astype(np.uint8)
        return dequant_mxfp4(packed, exps)

    def attention_qkv(self, prefix: str, g: LayerGeom):
        """(q [nh*dqk,H], k [nkv*dqk,H], v [nkv*dv,H]) for `prefix` = '...self_attn.'."""
        key = "qkv:" + prefix
        if key not in self._cache:
            self._cache[key] = self._attention_qkv(prefix, g)
        return self._cache[key]

    def _attention_qkv(self, prefix: str, g: LayerGeom):
        c = self.cfg
        fused = prefix + "qkv_proj.weight"
        if fused in self.raw:
            t = self.raw[fused]
            if t.dtype == "F8_E4M3" and self.wrong_grid:
                w = dequant_repeat_crop(decode_raw(t), decode_raw(self.raw[fused + "_scale_inv"]))
                q, k, v = split_fused_qkv_plain(w, c.tp, g.nh, g.nkv, g.dqk, g.dv)
            elif t.dtype == "F8_E4M3":
                self.layouts[fused] = "fused-sectioned"
                q, k, v = dequant_fused_qkv(decode_raw(t), decode_raw(self.raw[fused + "_scale_inv"]),
                                            c.tp, g.nh, g.nkv, g.dqk, g.dv)
            else:
                q, k, v = split_fused_qkv_plain(decode_raw(t), c.tp, g.nh, g.nkv, g.dqk, g.dv)
            return tuple(torch.from_numpy(x) for x in (q, k, v))
        qn, kn, vn = (prefix + p + "_proj.weight" for p in "qkv")
        if self.raw[kn].dtype != "F8_E4M3":
            return self.plain(qn), self.plain(kn), self.plain(vn)
        q = self.dense_fp8(qn)
        k8, v8 = decode_raw(self.raw[kn]), decode_raw(self.raw[vn])
        ks, vs = decode_raw(self.raw[kn + "_scale_inv"]), decode_raw(self.raw[vn + "_scale_inv"])
        uni = (-(-k8.shape[0] // BLOCK), -(-v8.shape[0] // BLOCK))
        sec = sectioned_kv_scale_rows(g.nkv, c.tp, g.dqk, g.dv)
        have = (ks.shape[0], vs.shape[0])
        qsec = (g.nh // c.tp) * g.dqk
        if have == sec and (sec != uni):
            if qsec % BLOCK:
                raise ValueError(f"{prefix}: sectioned K/V grid needs a block-aligned Q section")
            self.layouts[kn] = self.layouts[vn] = "kv-sectioned"
            k, v = dequant_sectioned_kv(k8, ks, v8, vs, g.nkv, c.tp, g.dqk, g.dv)
            if self.wrong_grid:
                k, v = dequant_repeat_crop(k8, ks), dequant_repeat_crop(v8, vs)
        elif have == uni:
            aligned = ((g.nkv // c.tp) * g.dqk) % BLOCK == 0 and ((g.nkv // c.tp) * g.dv) % BLOCK == 0
            if have == sec and not aligned:
                raise ValueError(f"{prefix}: K/V scale layout is ambiguous")
            self.layouts[kn] = self.layouts[vn] = "uniform"
            k, v = dequant_uniform(k8, ks), dequant_uniform(v8, vs)
        else:
            raise ValueError(f"{prefix}: k/v scale rows {have} match no layout (uniform {uni}, "
                             f"sectioned {sec})")
        return torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v)


# ----------------------------------------------------------------------------------------------
# Math, one function per spec step.
def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * w (no +1 offset)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_neox(x: torch.Tensor, pos: torch.Tensor, rot: int, theta: float) -> torch.Tensor:
    """x [T, heads, d]: NeoX rotate-half on the first `rot` dims, dims rot.. pass through.
    inv_freq[i] = theta^(-2i/rot); angle = p * inv_freq."""
    half = rot // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / rot)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]  # [T, half]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


# Queries per attention call: longer inputs are cut into chunks of this many queries, each with
# only the keys it can see, so a 32k-token prompt needs no 32k x 32k score matrix.
ATTENTION_QUERY_CHUNK = 512


def attention(q, k, v, pos_q, pos_k, window: int, sinks: Optional[torch.Tensor], dqk: int):
    """q [Tq, nh, dqk], k [Tk, nkv, dqk], v [Tk, nkv, dv] (v already value-scaled).
    Causal; window > 0 keeps keys j with pos_q - pos_k < window (window keys incl. the current).
    sinks [nh]: an extra logit per query head in the softmax denominator (no value).
    pos_k ascending; long query sets go in chunks (each query's result is the same)."""
    if q.shape[0] > ATTENTION_QUERY_CHUNK:
        out = []
        for a in range(0, q.shape[0], ATTENTION_QUERY_CHUNK):
            pq = pos_q[a:a + ATTENTION_QUERY_CHUNK]
            lo = int(pq.min()) - window + 1 if window > 0 else None
            kb = 0 if lo is None else int(torch.searchsorted(pos_k, torch.tensor(lo)))
            ke = int(torch.searchsorted(pos_k, pq.max(), right=True))
            out.append(_attention(q[a:a + ATTENTION_QUERY_CHUNK], k[kb:ke], v[kb:ke], pq,
                                  pos_k[kb:ke], window, sinks, dqk))
        return torch.cat(out)
    return _attention(q, k, v, pos_q, pos_k, window, sinks, dqk)


def _attention(q, k, v, pos_q, pos_k, window: int, sinks: Optional[torch.Tensor], dqk: int):
    nh, nkv = q.shape[1], k.shape[1]
    rep = nh // nkv
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(dqk)
    diff = pos_q[:, None] - pos_k[None, :]
    allowed = diff >= 0
    if window > 0:
        allowed &= diff < window
    s = s.masked_fill(~allowed[None], float("-inf"))
    if sinks is not None:
        snk = sinks[:, None, None].expand(nh, s.shape[1], 1)
        s = torch.cat([s, snk], dim=-1)
    m = s.max(dim=-1, keepdim=True).values
    e = torch.exp(s - m)
    p = e / e.sum(-1, keepdim=True)
    if sinks is not None:
        p = p[..., :-1]
    return torch.einsum("hqk,khd->qhd", p, v)


@dataclass
class RouteResult:
    idx: torch.Tensor  # [T, top_k]
    weights: torch.Tensor  # [T, top_k]
    margin: float  # smallest gap at a selection boundary (group or expert), for near-tie checks


def _stable_topk(vals: torch.Tensor, k: int):
    """Top-k along the last dim; ties go to the lower index (a deterministic rule)."""
    order = np.lexsort((np.arange(vals.shape[-1])[None, :].repeat(vals.shape[0], 0),
                        -vals.numpy()), axis=-1)
    return torch.from_numpy(order[:, :k].copy())


def route(h: torch.Tensor, gate_w: torch.Tensor, bias: Optional[torch.Tensor], cfg: Config,
          use_bias_for_selection: bool = True) -> RouteResult:
    """DeepSeek-V3 noaux_tc: sigmoid scores; selection on scores + bias with the group limit;
    weights = unbiased scores of the selected, renormalised if norm_topk_prob, x routed_scaling."""
    logits = h @ gate_w.T
    scores = torch.sigmoid(logits)
    choice = scores + bias if (bias is not None and use_bias_for_selection) else scores.clone()
    T, E = choice.shape
    margin = float("inf")
    if cfg.n_group > 1:
        per = E // cfg.n_group
        grouped = choice.view(T, cfg.n_group, per)
        top2 = grouped.sort(dim=-1, descending=True).values[..., :min(2, per)].sum(-1)  # [T, G]
        gidx = _stable_topk(top2, cfg.topk_group)
        gs = top2.sort(dim=-1, descending=True).values
        if cfg.topk_group < cfg.n_group:
            margin = min(margin, float((gs[:, cfg.topk_group - 1] - gs[:, cfg.topk_group]).min()))
        keep = torch.zeros(T, cfg.n_group, dtype=torch.bool)
        keep.scatter_(1, gidx, True)
        keep = keep[:, :, None].expand(T, cfg.n_group, per).reshape(T, E)
        choice = choice.masked_fill(~keep, float("-inf"))
    idx = _stable_topk(choice, cfg.top_k)
    cs = choice.sort(dim=-1, descending=True).values
    if cfg.top_k < E:
        gap = cs[:, cfg.top_k - 1] - cs[:, cfg.top_k]
        gap = gap[torch.isfinite(gap)]
        if gap.numel():
            margin = min(margin, float(gap.min()))
    w = scores.gather(1, idx)
    if cfg.norm_topk_prob:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    w = w * cfg.routed_scaling
    return RouteResult(idx, w, margin)


def silu_mlp(h, gate, up, down):
    return (torch.nn.functional.silu(h @ gate.T) * (h @ up.T)) @ down.T


# ----------------------------------------------------------------------------------------------
@dataclass
class Options:
    """Deliberate deviations, used by self-tests to show the comparison would catch each trap."""
    window_extra: int = 0  # +1 = SGLang's 129-key window
    value_scale: Optional[float] = None  # override attention_value_scale
    use_sinks: bool = True
    use_bias_for_selection: bool = True
    rope_full_dim_table: bool = False  # HF-REMOTE bug: frequencies over head_dim, sliced to rot
    swap_thetas: bool = False
    fp8_wrong_grid: bool = False  # sectioned / fused FP8 read with repeat-by-128-and-crop
    mxfp4_deviation: str = ""  # "nibbles": high nibble first; "bias128": exponents read as e - 128


class Reference:
    def __init__(self, model_dir: str, opts: Optional[Options] = None):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = parse_config(json.load(f))
        self.opts = opts or Options()
        self.w = Weights(model_dir, self.cfg, self.opts.fp8_wrong_grid)
        self.w.mxfp4_deviation = self.opts.mxfp4_deviation
        self.route_margin = float("inf")

    def with_options(self, opts: Options) -> "Reference":
        """A copy with other Options sharing the decoded weights (reloads for fp8_wrong_grid)."""
        r = Reference.__new__(Reference)
        r.__dict__.update(self.__dict__)
        r.cfg = Config(**self.cfg.__dict__)
        r.opts = opts
        r.route_margin = float("inf")
        if (opts.fp8_wrong_grid != self.opts.fp8_wrong_grid
                or opts.mxfp4_deviation != self.opts.mxfp4_deviation):
            r.w = Weights.__new__(Weights)
            r.w.__dict__.update(self.w.__dict__)
            r.w.cfg, r.w.wrong_grid, r.w._cache, r.w.layouts = r.cfg, opts.fp8_wrong_grid, {}, {}
            r.w.mxfp4_deviation = opts.mxfp4_deviation
        return r

    # -- pieces ----------------------------------------------------------------------------
    def _qkv(self, prefix, g):
        return self.w.attention_qkv(prefix, g)

    def _rope(self, x, pos, g: LayerGeom):
        theta = g.theta
        if self.opts.swap_thetas:
            theta = self.cfg.layers[0].theta if g.sliding else self.cfg.swa.theta
        if self.opts.rope_full_dim_table:
            half = g.rot // 2
            inv = theta ** (-2.0 * torch.arange(g.dqk // 2, dtype=torch.float64) / g.dqk)[:half]
            ang = pos.to(torch.float64)[:, None] * inv[None, :]
            cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
            x1, x2, rest = x[..., :half], x[..., half:g.rot], x[..., g.rot:]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)
        return rope_neox(x, pos, g.rot, theta)

    def attn_block(self, prefix: str, g: LayerGeom, h: torch.Tensor, pos: torch.Tensor,
                   rows: Optional[torch.Tensor] = None):
        """Attention over all of h's positions; queries at `rows` only when given ([len(rows), H]
        out, else [T, H])."""
        T = h.shape[0]
        H = self.cfg.hidden
        wq, wk, wv = self._qkv(prefix, g)
        for nm, t, n in (("q", wq, g.nh * g.dqk), ("k", wk, g.nkv * g.dqk), ("v", wv, g.nkv * g.dv)):
            if list(t.shape) != [n, H]:
                raise ValueError(f"{prefix}{nm}_proj: shape {list(t.shape)}, expected {[n, H]}")
        qpos = pos if rows is None else pos[rows]
        hq = h if rows is None else h[rows]
        q = (hq @ wq.T).view(hq.shape[0], g.nh, g.dqk)
        k = (h @ wk.T).view(T, g.nkv, g.dqk)
        v = (h @ wv.T).view(T, g.nkv, g.dv)
        q, k = self._rope(q, qpos, g), self._rope(k, pos, g)
        vs = self.cfg.value_scale if self.opts.value_scale is None else self.opts.value_scale
        v = v * vs
        sinks = None
        if g.sinks and self.opts.use_sinks:
            sinks = self.w.plain(prefix + "attention_sink_bias", [g.nh])
        window = g.window + self.opts.window_extra if g.sliding else 0
        o = attention(q, k, v, qpos, pos, window, sinks, g.dqk).reshape(q.shape[0], g.nh * g.dv)
        return o @ self.w.plain(prefix + "o_proj.weight", [H, g.nh * g.dv]).T

    def moe(self, prefix: str, h: torch.Tensor):
        c = self.cfg
        gate_w = self.w.plain(prefix + "gate.weight", [c.n_experts, c.hidden])
        bname = prefix + "gate.e_score_correction_bias"
        bias = self.w.plain(bname, [c.n_experts]) if self.w.has(bname) else None
        r = route(h, gate_w, bias, self.cfg, self.opts.use_bias_for_selection)
        self.route_margin = min(self.route_margin, r.margin)
        out = torch.zeros_like(h)
        for e in torch.unique(r.idx).tolist():
            rows, slot = (r.idx == e).nonzero(as_tuple=True)
            ep = f"{prefix}experts.{e}."
            y = self.dense(ep, h[rows], int(c.raw["moe_intermediate_size"]))
            out.index_add_(0, rows, y * r.weights[rows, slot][:, None])
        return out

    def dense(self, prefix: str, h, inter: Optional[int] = None):
        H = self.cfg.hidden
        i = inter or int(self.cfg.raw["intermediate_size"])
        return silu_mlp(h, self.w.plain(prefix + "gate_proj.weight", [i, H]),
                        self.w.plain(prefix + "up_proj.weight", [i, H]),
                        self.w.plain(prefix + "down_proj.weight", [H, i]))

    def embed(self, ids):
        table = self.w.plain("model.embed_tokens.weight", [self.cfg.vocab, self.cfg.hidden])
        return table[torch.as_tensor(ids, dtype=torch.long)]

    def lm_head(self, y):
        name = "model.embed_tokens.weight" if self.cfg.tie else "lm_head.weight"
        return y @ self.w.plain(name, [self.cfg.vocab, self.cfg.hidden]).T

    # -- whole model -----------------------------------------------------------------------
    def hidden_states(self, ids: List[int]) -> torch.Tensor:
        """Residual stream after the last layer, BEFORE model.norm: [T, H]."""
        c = self.cfg
        x = self.embed(ids)
        pos = torch.arange(len(ids))
        for l in range(c.n_layers):
            x = self.decoder_layer(l, x, pos)
        return x

    def decoder_layer(self, l: int, x: torch.Tensor, pos: torch.Tensor,
                      rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Pre-norm block: x += attn(norm_in(x)); x += ffn(norm_post(x)). With rows: only those
        positions' outputs ([len(rows), H]; their attention still sees every position)."""
        c = self.cfg
        p = f"model.layers.{l}."
        h = rms_norm(x, self.w.plain(p + "input_layernorm.weight", [c.hidden]), c.eps)
        a = self.attn_block(p + "self_attn.", c.layers[l], h, pos, rows)
        x = (x if rows is None else x[rows]) + a
        h = rms_norm(x, self.w.plain(p + "post_attention_layernorm.weight", [c.hidden]), c.eps)
        return x + (self.moe(p + "mlp.", h) if c.moe_layers[l] else self.dense(p + "mlp.", h))

    def forward(self, ids: List[int]) -> torch.Tensor:
        """Logits for every position, float64 [T, vocab]."""
        x = self.hidden_states(ids)
        norm_w = self.w.plain("model.norm.weight", [self.cfg.hidden])
        return self.lm_head(rms_norm(x, norm_w, self.cfg.eps))

    def forward_rows(self, ids: List[int], rows: List[int]) -> torch.Tensor:
        """Logits at the given positions only, float64 [len(rows), vocab]: every layer but the
        last runs on all positions (later layers read their K/V), the last on `rows`."""
        c = self.cfg
        x = self.embed(ids)
        pos = torch.arange(len(ids))
        for l in range(c.n_layers - 1):
            x = self.decoder_layer(l, x, pos)
        x = self.decoder_layer(c.n_layers - 1, x, pos, torch.as_tensor(rows, dtype=torch.long))
        norm_w = self.w.plain("model.norm.weight", [self.cfg.hidden])
        return self.lm_head(rms_norm(x, norm_w, self.cfg.eps))

    def num_mtp_layers(self) -> int:
        n = 0
        while self.w.has(f"model.mtp.layers.{n}.enorm.weight"):
            n += 1
        return n

    def mtp_forward(self, i: int, hprev: torch.Tensor, next_ids: List[int], positions):
        """MTP layer i (spec section 3): u = eh_proj(concat[enorm(embed(tok)), hnorm(hprev)]),
        SWA block (sinks if present, swa theta, value scale), dense MLP, final_layernorm, shared
        lm_head. Row t pairs hprev[t] with next_ids[t] at positions[t].
        Returns (logits [T, vocab], block output before final_layernorm [T, H])."""
        c = self.cfg
        p = f"model.mtp.layers.{i}."
        pos = torch.as_tensor(positions)
        e = rms_norm(self.embed(next_ids), self.w.plain(p + "enorm.weight", [c.hidden]), c.eps)
        hh = rms_norm(hprev, self.w.plain(p + "hnorm.weight", [c.hidden]), c.eps)
        x = torch.cat([e, hh], dim=-1) @ self.w.plain(p + "eh_proj.weight", [c.hidden, 2 * c.hidden]).T
        g = c.swa
        if not self.w.has(p + "self_attn.attention_sink_bias"):
            g = LayerGeom(**{**g.__dict__, "sinks": False})
        else:
            g = LayerGeom(**{**g.__dict__, "sinks": True})
        h = rms_norm(x, self.w.plain(p + "input_layernorm.weight", [c.hidden]), c.eps)
        x = x + self.attn_block(p + "self_attn.", g, h, pos)
        h = rms_norm(x, self.w.plain(p + "pre_mlp_layernorm.weight", [c.hidden]), c.eps)
        x = x + self.dense(p + "mlp.", h)
        y = rms_norm(x, self.w.plain(p + "final_layernorm.weight", [c.hidden]), c.eps)
        return self.lm_head(y), x


def load_reference(model_dir: str, opts: Optional[Options] = None) -> Reference:
    return Reference(model_dir, opts)


if __name__ == "__main__":
    ref = load_reference(sys.argv[1])
    ids = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 2, 3]
    lg = ref.forward(ids)
    print("argmax:", lg.argmax(-1).tolist())
    print("layouts:", sorted(set(ref.w.layouts.values())))
