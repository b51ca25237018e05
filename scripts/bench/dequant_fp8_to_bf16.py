#!/usr/bin/env python3
"""Block-FP8 (e4m3, 128x128 weight_scale_inv) MiMo-V2 checkpoint -> BF16 copy of the same weights.

usage: dequant_fp8_to_bf16.py SRC_DIR DST_DIR

For every F8_E4M3 tensor W [N, K] with W.weight_scale_inv S [ceil(N/128), ceil(K/128)]:
  out = bf16(decode_e4m3(W) * S[i // 128, j // 128]), and the *_scale_inv tensors are dropped.
Flash full-attention k_proj/v_proj stored with the per-TP-section grid (scale rows that are not
the uniform ceil(N/128); see make_tiny_model.py / spec section 4) are dequantized as a pair with
mimo_reference.dequant_sectioned_kv (TP = num_key_value_heads). Fused qkv_proj is not handled.
Other tensors are copied unchanged (BF16/F32). Streams tensor by tensor (numpy only; the output
header is written first, then each tensor), so memory stays ~ one tensor. config.json is copied
without quantization_config (torch_dtype bfloat16); other small files/dirs (dflash/) are copied.
Single-file model.safetensors or a model.safetensors.index.json shard set (-> one output file).
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from mimo_reference import dequant_sectioned_kv, sectioned_kv_scale_rows  # noqa: E402

BLOCK = 128


def e4m3_table():
    t = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> 3) & 0xF
        m = b & 0x7
        if e == 0xF and m == 0x7:
            t[b] = np.nan
        elif e == 0:
            t[b] = s * (m / 8.0) * 2.0 ** -6
        else:
            t[b] = s * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return t


E4M3 = e4m3_table()
NP = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h, 8 + n


def f32_to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = np.isnan(x)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    r[nan] = 0x7FC0
    return r


def to_f32(raw, dtype, shape):
    if dtype == "BF16":
        return (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype == "F8_E4M3":
        return E4M3[np.frombuffer(raw, dtype=np.uint8)].reshape(shape)
    return np.frombuffer(raw, dtype=NP[dtype]).astype(np.float32).reshape(shape)


def main(argv=None):
    src, dst = (argv or sys.argv[1:])[:2]
    os.makedirs(dst, exist_ok=True)
    idx = os.path.join(src, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) \
        else ["model.safetensors"]
    entries = {}  # name -> (file, dtype, shape, begin, end)
    for fn in files:
        p = os.path.join(src, fn)
        h, base = read_header(p)
        for k, v in h.items():
            b, e = v["data_offsets"]
            entries[k] = (p, v["dtype"], v["shape"], base + b, base + e)
    names = [k for k in sorted(entries) if not k.endswith("_scale_inv")]
    if any(k.endswith("qkv_proj.weight") and entries[k][1] == "F8_E4M3" for k in names):
        raise SystemExit("fused FP8 qkv_proj is not handled")
    cfg = json.load(open(os.path.join(src, "config.json")))
    pending = {}  # v_proj name -> its BF16 bytes, computed with its k_proj

    def read(name):
        p, dt, shape, b, e = entries[name]
        with open(p, "rb") as f:
            f.seek(b)
            return to_f32(f.read(e - b), dt, shape)

    def sectioned_pair(k):
        """(k, v) float32 when k is a sectioned full-attention k_proj, else None."""
        if not k.endswith("self_attn.k_proj.weight") or entries[k][1] != "F8_E4M3":
            return None
        vn = k.replace("k_proj", "v_proj")
        ks, vs = read(k + "_scale_inv"), read(vn + "_scale_inv")
        k8, v8 = read(k), read(vn)
        if ks.shape[0] == -(-k8.shape[0] // BLOCK) and vs.shape[0] == -(-v8.shape[0] // BLOCK):
            return None  # uniform grid
        nkv = int(cfg["num_key_value_heads"])
        dqk, dv = int(cfg["head_dim"]), int(cfg["v_head_dim"])
        if (ks.shape[0], vs.shape[0]) != sectioned_kv_scale_rows(nkv, nkv, dqk, dv) or \
                k8.shape[0] != nkv * dqk or v8.shape[0] != nkv * dv:
            raise SystemExit(f"{k}: k/v scale rows {ks.shape[0]}/{vs.shape[0]} match no layout")
        return dequant_sectioned_kv(k8, ks, v8, vs, nkv, nkv, dqk, dv)

    out_h, off, plan = {}, 0, []
    for k in names:
        p, dt, shape, b, e = entries[k]
        if dt == "F8_E4M3":
            odt, size = "BF16", int(np.prod(shape)) * 2
            if k + "_scale_inv" not in entries:
                raise SystemExit(f"{k}: F8_E4M3 without {k}_scale_inv")
        else:
            odt, size = dt, e - b
        out_h[k] = {"dtype": odt, "shape": shape, "data_offsets": [off, off + size]}
        plan.append((k, odt, size))
        off += size
    out_h["__metadata__"] = {"format": "pt"}
    hb = json.dumps(out_h, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    tmp = os.path.join(dst, "model.safetensors.tmp")
    n_fp8 = n_sec = 0
    with open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(hb)))
        out.write(hb)
        for k, odt, size in plan:
            p, dt, shape, b, e = entries[k]
            with open(p, "rb") as f:
                f.seek(b)
                raw = f.read(e - b)
            pair = sectioned_pair(k) if k.endswith("k_proj.weight") else None
            if k in pending:
                data = pending.pop(k)
                n_fp8 += 1
            elif pair is not None:
                data = f32_to_bf16_bits(pair[0].astype(np.float32)).tobytes()
                pending[k.replace("k_proj", "v_proj")] = f32_to_bf16_bits(pair[1].astype(np.float32)).tobytes()
                n_sec += 1
                n_fp8 += 1
            elif dt == "F8_E4M3":
                sp, sdt, sshape, sb, se = entries[k + "_scale_inv"]
                with open(sp, "rb") as f:
                    f.seek(sb)
                    s = to_f32(f.read(se - sb), sdt, sshape)
                w = to_f32(raw, dt, shape)
                n, kk = shape[-2], shape[-1]
                if list(s.shape[-2:]) != [-(-n // BLOCK), -(-kk // BLOCK)]:
                    raise SystemExit(f"{k}: scale shape {s.shape} for weight {shape}")
                full = np.repeat(np.repeat(s, BLOCK, axis=-2)[..., :n, :], BLOCK, axis=-1)[..., :kk]
                w = w * full
                data = f32_to_bf16_bits(w).tobytes()
                n_fp8 += 1
            else:
                data = raw
            assert len(data) == size, k
            out.write(data)
    os.replace(tmp, os.path.join(dst, "model.safetensors"))
    assert not pending, list(pending)
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = "bfloat16"
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in os.listdir(src):
        if fn in ("config.json", "model.safetensors", "model.safetensors.index.json") or fn in files:
            continue
        s, d = os.path.join(src, fn), os.path.join(dst, fn)
        if os.path.isdir(s):
            if not os.path.exists(d):
                shutil.copytree(s, d)
        else:
            shutil.copy2(s, d)
    print(f"{dst}: {len(plan)} tensors ({n_fp8} dequantized from FP8, {n_sec} k_proj/v_proj pairs "
          f"with the per-TP-section grid), {off / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
