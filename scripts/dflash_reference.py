#!/usr/bin/python3
"""Float64 PyTorch reference of the DFlash draft forward (one block), written from
shared/spec/dflash.md sections 2-4, for the C++ drafter to be compared against.

The target side (embeddings, the decoder layers whose outputs are the features, lm_head) is
mimo_reference.Reference, so every target variant (FP8 grids, MXFP4, fused qkv, tied...) works.

Draft forward (spec section 3), P committed tokens at positions 0..P-1, the anchor at P:
  1. F = features(context) [P, n*H]: the target residual stream right AFTER each layer in
     dflash_config.target_layer_ids (pre final norm, every row), concatenated in id order.
  2. c = RMSNorm_hidden_norm(F @ fc^T). Per draft layer: context K = k_norm(k_proj c) per head,
     RoPE at 0..P-1 (theta_ctx); context V = v_proj(c) * attention_value_scale.
  3. Block x [B, H]: row 0 = the target embedding of the anchor, rows 1..B-1 = mask_embedding.pt
     (NOT the vocabulary row of mask_token_id); positions P..P+B-1.
  4. Each layer: h = input_layernorm(x); q = q_norm(q_proj h), k = k_norm(k_proj h) per head,
     v = v_proj(h) * value_scale; RoPE (theta_block) on block q and k; keys = context K + block
     K; query at p sees key at j iff |p - j| <= W - 1 (symmetric, NON-causal); softmax scale
     1/sqrt(head_dim) with one per-head sink logit in the denominator only; GQA head h reads kv
     head h // (nh / nkv); o_proj; residual; post_attention_layernorm; SwiGLU MLP; residual.
  5. logits = target lm_head(RMSNorm(x, norm.weight)) of rows 1..B-1 (row j: the token at P+j).
RoPE: NeoX rotate-half on the first int(head_dim * partial_rotary_factor) dims of each head,
inv_freq[i] = theta^(-2i/rot). The theta choice is OPEN in the spec, hence `rope`:
  "split"    theta_ctx = dflash_config.backbone_rotary_base, theta_block = rope_theta (IK),
  "backbone" both backbone_rotary_base (WIKI),
  "draft"    both rope_theta.

Library:
    ref = DFlashReference("CKPT")                 # drafter in CKPT/dflash
    ref.draft_logits(context_ids, anchor)          # float64 [B-1, vocab]
    ref.features(ids)                              # float64 [T, n*H]

CLI (float32 little-endian output, row-major):
    dflash_reference.py --model CKPT --ids 1,2,...,ANCHOR [--rope split|backbone|draft]
                        [--drafter DIR] --out LOGITS.bin [--features-out FEAT.bin]
writes draft_logits(ids[:-1], ids[-1]) as [B-1, vocab] and features(ids[:-1]) as [P, n*H].
"""
import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mimo_reference as R  # noqa: E402

ROPE_VARIANTS = ("split", "backbone", "draft")


@dataclass
class DraftOptions:
    """Deliberate deviations, used by the self-tests to show that each choice is observable."""
    causal: bool = False  # block rows see only earlier block rows
    mask_from_vocab: bool = False  # mask rows = the target embedding row of mask_token_id
    use_sinks: bool = True


@dataclass
class DraftConfig:
    raw: dict
    hidden: int
    inter: int
    n_layers: int
    nh: int
    nkv: int
    hd: int
    rot: int
    eps: float
    block: int
    window: int  # 0 = no window
    layer_ids: List[int]
    mask_id: int
    value_scale: float
    sinks: bool
    theta_draft: float
    theta_backbone: float


def parse_draft_config(cfg: dict) -> DraftConfig:
    dc = cfg.get("dflash_config") or {}

    def need(d, k, where="config.json"):
        if k not in d or d[k] is None:
            raise ValueError(f"drafter {where}: missing {k}")
        return d[k]

    hd = int(need(cfg, "head_dim"))
    rot = int(hd * float(cfg.get("partial_rotary_factor", 1.0)))
    if hd % 2 or rot % 2 or rot > hd:
        raise ValueError(f"drafter: head_dim {hd} / rotary dim {rot} must be even, rot <= head_dim")
    nh, nkv = int(need(cfg, "num_attention_heads")), int(need(cfg, "num_key_value_heads"))
    if nh % nkv:
        raise ValueError(f"drafter: {nh} heads not a multiple of {nkv} kv heads")
    window = 0
    if dc.get("use_swa", False):
        window = int(dc.get("swa_window_size") or need(cfg, "sliding_window"))
        if cfg.get("sliding_window") not in (None, window):
            raise ValueError(f"drafter: sliding_window {cfg['sliding_window']} != "
                             f"dflash_config.swa_window_size {window}")
    block = int(dc.get("block_size") or need(cfg, "block_size"))
    if cfg.get("block_size") not in (None, block):
        raise ValueError("drafter: block_size and dflash_config.block_size differ")
    ids = [int(i) for i in need(dc, "target_layer_ids", "dflash_config")]
    if not ids or sorted(set(ids)) != ids:
        raise ValueError(f"drafter: target_layer_ids {ids} must be ascending and distinct")
    return DraftConfig(
        raw=cfg, hidden=int(need(cfg, "hidden_size")), inter=int(need(cfg, "intermediate_size")),
        n_layers=int(need(cfg, "num_hidden_layers")), nh=nh, nkv=nkv, hd=hd, rot=rot,
        eps=float(cfg.get("rms_norm_eps", 1e-6)), block=block, window=window, layer_ids=ids,
        mask_id=int(need(dc, "mask_token_id", "dflash_config")),
        value_scale=float(dc.get("attention_value_scale") or 1.0),
        sinks=bool(dc.get("attention_sink_bias", False)),
        theta_draft=float(cfg.get("rope_theta", 10000.0)),
        theta_backbone=float(dc.get("backbone_rotary_base") or cfg.get("rope_theta", 10000.0)))


def load_mask_embedding(path: str):
    """(mask_token_id or None, float64 [H]) from mask_embedding.pt: a dict
    {"mask_token_id", "embedding"} or a bare tensor."""
    obj = torch.load(path, map_location="cpu")
    mid = None
    if isinstance(obj, dict):
        mid = obj.get("mask_token_id")
        obj = obj["embedding"]
    if not isinstance(obj, torch.Tensor):
        raise ValueError(f"{path}: neither a tensor nor a dict with 'embedding'")
    return (None if mid is None else int(mid)), obj.detach().to(torch.float64).reshape(-1)


def block_attention(q, k, v, pos_q, pos_k, window: int, sinks: Optional[torch.Tensor],
                    causal: bool = False):
    """q [Tq, nh, d], k [Tk, nkv, d], v [Tk, nkv, dv]. Key j visible to query p iff
    |p - j| <= window - 1 (window 0: all), and j <= p when causal. sinks [nh]: one extra logit
    per head in the softmax denominator. Scale 1/sqrt(d)."""
    nh, nkv, d = q.shape[1], k.shape[1], q.shape[2]
    rep = nh // nkv
    k = k.repeat_interleave(rep, dim=1)  # q head h -> kv head h // rep
    v = v.repeat_interleave(rep, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
    diff = pos_q[:, None] - pos_k[None, :]
    allowed = torch.ones_like(diff, dtype=torch.bool)
    if window > 0:
        allowed &= diff.abs() <= window - 1
    if causal:
        allowed &= diff >= 0
    s = s.masked_fill(~allowed[None], float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks[:, None, None].expand(nh, s.shape[1], 1)], dim=-1)
    p = torch.softmax(s, dim=-1)
    if sinks is not None:
        p = p[..., :-1]
    return torch.einsum("hqk,khd->qhd", p, v)


class DFlashReference:
    def __init__(self, target_dir: str, drafter_dir: Optional[str] = None, rope: str = "split",
                 target: Optional[R.Reference] = None, opts: Optional[DraftOptions] = None):
        if rope not in ROPE_VARIANTS:
            raise ValueError(f"rope must be one of {ROPE_VARIANTS}, got {rope!r}")
        self.rope = rope
        self.opts = opts or DraftOptions()
        self.target = target if target is not None else R.load_reference(target_dir)
        self.drafter_dir = drafter_dir or os.path.join(target_dir, "dflash")
        with open(os.path.join(self.drafter_dir, "config.json")) as f:
            self.cfg = parse_draft_config(json.load(f))
        c, t = self.cfg, self.target.cfg
        if c.hidden != t.hidden:
            raise ValueError(f"drafter hidden_size {c.hidden} != target {t.hidden}")
        if c.raw.get("vocab_size") not in (None, t.vocab):
            raise ValueError(f"drafter vocab_size {c.raw['vocab_size']} != target {t.vocab}")
        if c.layer_ids[0] < 0 or c.layer_ids[-1] >= t.n_layers:
            raise ValueError(f"target_layer_ids {c.layer_ids} outside 0..{t.n_layers - 1}")
        if not 0 <= c.mask_id < t.vocab:
            raise ValueError(f"mask_token_id {c.mask_id} outside the vocabulary")
        self.w = self._load_weights()
        mid, self.mask_embedding = load_mask_embedding(
            os.path.join(self.drafter_dir, "mask_embedding.pt"))
        if mid is not None and mid != c.mask_id:
            raise ValueError(f"mask_embedding.pt says mask_token_id {mid}, config {c.mask_id}")
        if self.mask_embedding.shape != (c.hidden,):
            raise ValueError(f"mask embedding shape {list(self.mask_embedding.shape)}")

    def with_options(self, rope: Optional[str] = None,
                     opts: Optional[DraftOptions] = None) -> "DFlashReference":
        """A copy sharing the loaded weights, with another rope variant and/or options."""
        r = DFlashReference.__new__(DFlashReference)
        r.__dict__.update(self.__dict__)
        r.rope = rope or self.rope
        if r.rope not in ROPE_VARIANTS:
            raise ValueError(f"rope must be one of {ROPE_VARIANTS}, got {r.rope!r}")
        r.opts = opts or self.opts
        return r

    # -- weights ---------------------------------------------------------------------------
    def expected_shapes(self) -> Dict[str, List[int]]:
        c = self.cfg
        H, n = c.hidden, len(c.layer_ids)
        out = {"fc.weight": [H, n * H], "hidden_norm.weight": [H], "norm.weight": [H]}
        for i in range(c.n_layers):
            p = f"layers.{i}."
            out.update({
                p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
                p + "self_attn.q_proj.weight": [c.nh * c.hd, H],
                p + "self_attn.k_proj.weight": [c.nkv * c.hd, H],
                p + "self_attn.v_proj.weight": [c.nkv * c.hd, H],
                p + "self_attn.o_proj.weight": [H, c.nh * c.hd],
                p + "self_attn.q_norm.weight": [c.hd], p + "self_attn.k_norm.weight": [c.hd],
                p + "mlp.gate_proj.weight": [c.inter, H], p + "mlp.up_proj.weight": [c.inter, H],
                p + "mlp.down_proj.weight": [H, c.inter]})
            if c.sinks:
                out[p + "self_attn.attention_sink_bias"] = [c.nh]
        return out

    def _load_weights(self) -> Dict[str, torch.Tensor]:
        raw = _read_drafter_tensors(self.drafter_dir)
        by_name: Dict[str, R.RawTensor] = {}
        for name, t in raw.items():
            short = name[len("model."):] if name.startswith("model.") else name
            if short in by_name:
                raise ValueError(f"drafter tensor {short} spelled both with and without 'model.'")
            by_name[short] = t
        w = {}
        for name, shape in self.expected_shapes().items():
            if name not in by_name:
                raise KeyError(f"drafter: missing tensor {name} (or model.{name})")
            t = by_name[name]
            if list(t.shape) != shape:
                raise ValueError(f"drafter tensor {name}: shape {t.shape}, expected {shape}")
            w[name] = torch.from_numpy(R.decode_raw(t))
        return w

    # -- target side -----------------------------------------------------------------------
    def features(self, ids: List[int]) -> torch.Tensor:
        """[T, n*H]: the target residual stream right after each target_layer_ids layer (before
        the final norm), every row, concatenated in id order."""
        t = self.target
        x = t.embed(ids)
        pos = torch.arange(len(ids))
        caps = {}
        for l in range(self.cfg.layer_ids[-1] + 1):
            x = t.decoder_layer(l, x, pos)
            if l in self.cfg.layer_ids:
                caps[l] = x
        return torch.cat([caps[i] for i in self.cfg.layer_ids], dim=-1)

    # -- draft side ------------------------------------------------------------------------
    def thetas(self):
        """(theta for context K, theta for block Q/K)."""
        c = self.cfg
        return {"split": (c.theta_backbone, c.theta_draft),
                "backbone": (c.theta_backbone, c.theta_backbone),
                "draft": (c.theta_draft, c.theta_draft)}[self.rope]

    def block_input(self, anchor: int) -> torch.Tensor:
        c = self.cfg
        mask = self.target.embed([c.mask_id])[0] if self.opts.mask_from_vocab else self.mask_embedding
        return torch.cat([self.target.embed([anchor]), mask[None].expand(c.block - 1, c.hidden)])

    def draft_from_features(self, feats: torch.Tensor, anchor: Optional[int] = None,
                            x: Optional[torch.Tensor] = None, pos0: int = 0) -> dict:
        """The block forward from features [P, n*H] (context positions pos0..pos0+P-1, block at
        pos0+P..). x overrides the block input [B, H]. Returns {"logits": [B-1, vocab],
        "layers": [each layer's output [B, H]], "context": c [P, H], "input": x}."""
        c = self.cfg
        P = feats.shape[0]
        if x is None:
            x = self.block_input(anchor)
        x = x.to(torch.float64)
        x_in = x
        theta_ctx, theta_blk = self.thetas()
        pos_c = torch.arange(pos0, pos0 + P)
        pos_b = torch.arange(pos0 + P, pos0 + P + c.block)
        ctx = R.rms_norm(feats @ self.w["fc.weight"].T, self.w["hidden_norm.weight"], c.eps)
        layers = []
        for i in range(c.n_layers):
            p = f"layers.{i}."
            W = lambda n: self.w[p + n]  # noqa: E731
            wq, wk, wv = W("self_attn.q_proj.weight"), W("self_attn.k_proj.weight"), \
                W("self_attn.v_proj.weight")
            qn, kn = W("self_attn.q_norm.weight"), W("self_attn.k_norm.weight")
            # context K/V (spec section 3 step 2)
            kc = R.rms_norm((ctx @ wk.T).view(P, c.nkv, c.hd), kn, c.eps)
            kc = R.rope_neox(kc, pos_c, c.rot, theta_ctx)
            vc = (ctx @ wv.T).view(P, c.nkv, c.hd) * c.value_scale
            # block
            h = R.rms_norm(x, W("input_layernorm.weight"), c.eps)
            q = R.rms_norm((h @ wq.T).view(c.block, c.nh, c.hd), qn, c.eps)
            kb = R.rms_norm((h @ wk.T).view(c.block, c.nkv, c.hd), kn, c.eps)
            vb = (h @ wv.T).view(c.block, c.nkv, c.hd) * c.value_scale
            q = R.rope_neox(q, pos_b, c.rot, theta_blk)
            kb = R.rope_neox(kb, pos_b, c.rot, theta_blk)
            sinks = W("self_attn.attention_sink_bias") if (c.sinks and self.opts.use_sinks) \
                else None
            o = block_attention(q, torch.cat([kc, kb]), torch.cat([vc, vb]), pos_b,
                                torch.cat([pos_c, pos_b]), c.window, sinks, self.opts.causal)
            x = x + o.reshape(c.block, c.nh * c.hd) @ W("self_attn.o_proj.weight").T
            h = R.rms_norm(x, W("post_attention_layernorm.weight"), c.eps)
            x = x + R.silu_mlp(h, W("mlp.gate_proj.weight"), W("mlp.up_proj.weight"),
                               W("mlp.down_proj.weight"))
            layers.append(x)
        logits = self.target.lm_head(R.rms_norm(x, self.w["norm.weight"], c.eps))
        return {"logits": logits[1:], "layers": layers, "context": ctx, "input": x_in}

    def draft_logits(self, context_ids: List[int], anchor: int) -> torch.Tensor:
        """float64 [B-1, vocab]: row j-1 scores the token at position P+j (P = len(context))."""
        if not context_ids:
            raise ValueError("draft_logits needs at least one committed context token")
        return self.draft_from_features(self.features(list(context_ids)), anchor)["logits"]


def _read_drafter_tensors(d: str) -> Dict[str, R.RawTensor]:
    """Index-listed shards if model.safetensors.index.json exists, else every *.safetensors."""
    if os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        return R.read_checkpoint_tensors(d)
    out: Dict[str, R.RawTensor] = {}
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"{d}: no drafter safetensors")
    for fn in files:
        out.update(R.read_safetensors_file(os.path.join(d, fn)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="DFlash draft-forward reference (float64)")
    ap.add_argument("--model", required=True, help="target checkpoint directory")
    ap.add_argument("--drafter", help="drafter directory (default MODEL/dflash)")
    ap.add_argument("--ids", required=True, help="comma-separated context ids, then the anchor")
    ap.add_argument("--rope", default="split", choices=ROPE_VARIANTS)
    ap.add_argument("--out", help="float32 LE [B-1, vocab] logits")
    ap.add_argument("--features-out", help="float32 LE [P, n*H] features of the context")
    a = ap.parse_args(argv)
    ids = [int(x) for x in a.ids.split(",") if x.strip()]
    if len(ids) < 2:
        ap.error("--ids needs at least one context token and the anchor")
    ref = DFlashReference(a.model, a.drafter, a.rope)
    feats = ref.features(ids[:-1])
    logits = ref.draft_from_features(feats, ids[-1])["logits"]
    if a.out:
        logits.numpy().astype("<f4").tofile(a.out)
    if a.features_out:
        feats.numpy().astype("<f4").tofile(a.features_out)
    print(f"P={len(ids) - 1} anchor={ids[-1]} rope={a.rope} logits={list(logits.shape)} "
          f"features={list(feats.shape)} argmax={logits.argmax(-1).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
