"""Trainable PyTorch module of the MiMo-V2 architecture (spec sections 2-3), used to train and
evaluate mimo-v2-nano. Batched [B, T]; every feature of the spec is in:

- hybrid attention: full layers where hybrid_layer_pattern[i] == 0, sliding-window (SWA) otherwise;
  SWA sees the W keys i-W+1..i (the current one included);
- Q/K head dim `head_dim`, V head dim `v_head_dim`, partial NeoX RoPE on the first `rot` dims of
  each Q/K head (inv_freq = theta^(-2i/rot)), theta per layer kind;
- V multiplied by attention_value_scale before attention; scores scaled by 1/sqrt(head_dim);
- GQA (repeat_interleave) with different kv-head counts per kind; learned sink logits (per query
  head) in the softmax denominator on SWA layers;
- dense MLP on layer 0, MoE elsewhere: sigmoid router in fp32, e_score_correction_bias used only for
  the top-k selection, weights = raw sigmoid scores of the selected experts renormalised;
  the bias is a buffer updated by auxiliary-loss-free balancing (bias += gamma*sign(mean - load));
- MTP layers (spec section 3, SGLang convention): depth k at position t computes
  f_k(embed(x[t+k+1]), h[t]) with h = the main model's residual stream BEFORE model.norm, and is
  trained to predict x[t+k+2]. Layer: eh_proj(cat[enorm(e), hnorm(h)]) -> SWA block with sinks ->
  dense MLP -> final_layernorm -> shared lm_head.

Vocabulary: the module works on a compact input vocabulary (every token id the corpus contains) and
a compact output vocabulary (every token id the assistant writes); export.py scatters them into the
full 152k tables. Channel `const_ch` of the residual stream is a constant (see apply_constraints),
which export.py uses to make unused output tokens lose every argmax by a wide margin.
"""
import math
from dataclasses import dataclass, field, asdict
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class NanoConfig:
    hidden: int = 128
    layers: int = 6
    heads: int = 4
    full_kv: int = 2
    swa_kv: int = 4
    head_dim: int = 192
    v_head_dim: int = 128
    rot: int = 64
    rope_theta: float = 5e6
    swa_rope_theta: float = 1e4
    window: int = 64
    value_scale: float = 0.707
    intermediate: int = 256
    experts: int = 16
    top_k: int = 4
    moe_intermediate: int = 64
    mtp: int = 3
    eps: float = 1e-5
    n_in: int = 0     # compact input vocab
    n_out: int = 0    # compact output vocab
    const_ch: int = 0
    const_val: float = 4.0

    def pattern(self) -> List[int]:
        return [0 if (i == 0 or (i + 1) % 6 == 0) else 1 for i in range(self.layers)]

    def is_moe(self, i: int) -> bool:
        return i > 0


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x: torch.Tensor, pos: torch.Tensor, rot: int, theta: float) -> torch.Tensor:
    """x [B, h, T, d]; NeoX rotate-half on the first `rot` dims; pos [T] absolute positions."""
    half = rot // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float32) * 2.0 / rot)
    ang = pos.to(torch.float32)[:, None] * inv[None, :]          # [T, half]
    cos, sin = ang.cos(), ang.sin()
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class Attention(nn.Module):
    def __init__(self, c: NanoConfig, swa: bool):
        super().__init__()
        self.c, self.swa = c, swa
        self.nh, self.nkv = c.heads, (c.swa_kv if swa else c.full_kv)
        self.q_proj = nn.Linear(c.hidden, self.nh * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden, self.nkv * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden, self.nkv * c.v_head_dim, bias=False)
        self.o_proj = nn.Linear(self.nh * c.v_head_dim, c.hidden, bias=False)
        self.attention_sink_bias = nn.Parameter(torch.zeros(self.nh)) if swa else None
        self.theta = c.swa_rope_theta if swa else c.rope_theta

    def qkv(self, h, pos):
        """h [B, T, H] -> q [B, nh, T, dqk], k [B, nkv, T, dqk] (RoPE'd), v [B, nkv, T, dv] (x value scale)."""
        c = self.c
        B, T, _ = h.shape
        q = self.q_proj(h).view(B, T, self.nh, c.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.nkv, c.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.nkv, c.v_head_dim).transpose(1, 2)
        return rope(q, pos, c.rot, self.theta), rope(k, pos, c.rot, self.theta), v * c.value_scale

    def attend(self, q, pos, k, v, kpos):
        """q [B, nh, T, dqk] at positions pos [T]; k/v [B, nkv, S, *] at kpos [S] -> [B, T, H]."""
        c = self.c
        B, _, T, _ = q.shape
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)                                      # [B, nh, S, dqk]
        v = v.repeat_interleave(rep, dim=1)                                      # [B, nh, S, dv]
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(c.head_dim)         # [B, nh, T, S]
        d = pos[:, None] - kpos[None, :]                                         # [T, S]
        allowed = d >= 0
        if self.swa:
            allowed = allowed & (d < c.window)
        s = s.masked_fill(~allowed, float("-inf"))
        if self.attention_sink_bias is not None:
            sink = self.attention_sink_bias.view(1, self.nh, 1, 1).expand(B, self.nh, T, 1)
            p = torch.cat([s, sink], dim=-1).softmax(-1)[..., :-1]
        else:
            p = s.softmax(-1)
        o = torch.matmul(p, v)                                                   # [B, nh, T, dv]
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.nh * c.v_head_dim))

    def attend_local(self, q, k, v):
        """Sliding-window self-attention of one contiguous span in blocks of W queries, each over
        the keys of its own and the previous block: O(T W) instead of attend()'s O(T^2), the same
        result (tests/python/test_nano_model.py). q [B, nh, T, dqk], k/v [B, nkv, T, *] -> [B, T, H]."""
        c = self.c
        W = c.window
        B, _, T, dq = q.shape
        rep = self.nh // self.nkv
        n = -(-T // W)
        pad = n * W - T

        def blocks(x, lead):  # [B, h, T, d] -> [B, h, n + lead, W, d], lead zero blocks in front
            x = F.pad(x, (0, 0, lead * W, pad))
            return x.view(B, x.shape[1], n + lead, W, x.shape[-1])

        qb = blocks(q, 0)                                                        # [B, nh, n, W, dqk]
        kb = blocks(k.repeat_interleave(rep, dim=1), 1)                          # [B, nh, n+1, W, dqk]
        vb = blocks(v.repeat_interleave(rep, dim=1), 1)                          # [B, nh, n+1, W, dv]
        kk = torch.cat([kb[:, :, :-1], kb[:, :, 1:]], dim=3)                     # [B, nh, n, 2W, dqk]
        vv = torch.cat([vb[:, :, :-1], vb[:, :, 1:]], dim=3)                     # [B, nh, n, 2W, dv]
        s = torch.matmul(qb, kk.transpose(-1, -2)) / math.sqrt(c.head_dim)      # [B, nh, n, W, 2W]
        a = torch.arange(W)[:, None]
        b = torch.arange(2 * W)[None, :]
        d = a + W - b                                                            # query - key position
        allowed = ((d >= 0) & (d < W)).expand(n, W, 2 * W).clone()
        allowed[0, :, :W] = False                                                # before position 0
        s = s.masked_fill(~allowed, float("-inf"))
        if self.attention_sink_bias is not None:
            sink = self.attention_sink_bias.view(1, self.nh, 1, 1, 1).expand(B, self.nh, n, W, 1)
            p = torch.cat([s, sink], dim=-1).softmax(-1)[..., :-1]
        else:
            p = s.softmax(-1)
        o = torch.matmul(p, vv).reshape(B, self.nh, n * W, -1)[:, :, :T]         # [B, nh, T, dv]
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.nh * c.v_head_dim))

    def forward(self, h, pos, cache: Optional[dict] = None):
        """h [B, T, H]; pos [T] absolute positions (contiguous). cache (inference): dict with
        'k','v','pos' of earlier tokens, extended in place."""
        q, k, v = self.qkv(h, pos)
        if cache is None and self.swa and q.shape[2] > 2 * self.c.window:
            return self.attend_local(q, k, v)
        kpos = pos
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
                kpos = torch.cat([cache["pos"], pos])
            cache["k"], cache["v"], cache["pos"] = k, v, kpos
        return self.attend(q, pos, k, v, kpos)

    def forward_split(self, hp, pp, hs, ps):
        """Shared prefix hp [1, P, H] (positions pp) + per-sample suffixes hs [B, S, H] (positions ps,
        right after the prefix): the prefix is computed once, the suffixes attend to it."""
        qp, kp, vp = self.qkv(hp, pp)
        op = self.attend(qp, pp, kp, vp, pp)
        qs, ks, vs = self.qkv(hs, ps)
        B = hs.shape[0]
        keep = slice(None)
        if self.swa:
            keep = slice(max(0, hp.shape[1] - self.c.window), None)
        k = torch.cat([kp[:, :, keep].expand(B, -1, -1, -1), ks], dim=2)
        v = torch.cat([vp[:, :, keep].expand(B, -1, -1, -1), vs], dim=2)
        os_ = self.attend(qs, ps, k, v, torch.cat([pp[keep], ps]))
        return op, os_


class MLP(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.gate_proj = nn.Linear(d, inter, bias=False)
        self.up_proj = nn.Linear(d, inter, bias=False)
        self.down_proj = nn.Linear(inter, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    def __init__(self, c: NanoConfig):
        super().__init__()
        self.c = c
        E, D, I = c.experts, c.hidden, c.moe_intermediate
        self.gate_weight = nn.Parameter(torch.randn(E, D) * 0.02)                # [E, H] fp32
        self.register_buffer("e_score_correction_bias", torch.zeros(E))          # [E]
        self.w_gate = nn.Parameter(torch.randn(E, I, D) * D ** -0.5)             # [E, I, H]
        self.w_up = nn.Parameter(torch.randn(E, I, D) * D ** -0.5)               # [E, I, H]
        self.w_down = nn.Parameter(torch.randn(E, D, I) * I ** -0.5 * 0.5)       # [E, H, I]
        self.last_load = None

    def forward(self, x, valid: Optional[torch.Tensor] = None):
        c = self.c
        shp = x.shape
        h = x.reshape(-1, shp[-1])                                               # [N, H]
        scores = torch.sigmoid(h.float() @ self.gate_weight.float().t())         # [N, E]
        choice = scores + self.e_score_correction_bias
        idx = choice.topk(c.top_k, dim=-1).indices                               # [N, k]
        w = scores.gather(1, idx)
        w = w / (w.sum(-1, keepdim=True) + 1e-20)                                # [N, k]
        out = torch.zeros_like(h)
        flat_e = idx.reshape(-1)
        flat_t = torch.arange(h.shape[0]).repeat_interleave(c.top_k)
        flat_w = w.reshape(-1)
        if self.training:
            v = valid.reshape(-1).repeat_interleave(c.top_k) if valid is not None else None
            load = torch.bincount(flat_e[v] if v is not None else flat_e, minlength=c.experts)
            self.last_load = load.float()
        order = torch.argsort(flat_e)
        counts = torch.bincount(flat_e, minlength=c.experts).tolist()
        st = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            sel = order[st:st + n]
            st += n
            tok = flat_t[sel]
            xe = h[tok]
            ye = F.linear(F.silu(F.linear(xe, self.w_gate[e])) * F.linear(xe, self.w_up[e]), self.w_down[e])
            out.index_add_(0, tok, ye * flat_w[sel, None].to(ye.dtype))
        return out.view(shp)

    @torch.no_grad()
    def balance(self, gamma: float):
        if self.last_load is None:
            return
        load = self.last_load
        self.e_score_correction_bias += gamma * torch.sign(load.mean() - load)


class DecoderLayer(nn.Module):
    def __init__(self, c: NanoConfig, i: int):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.self_attn = Attention(c, swa=c.pattern()[i] == 1)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.eps)
        self.mlp = MoE(c) if c.is_moe(i) else MLP(c.hidden, c.intermediate)

    def forward(self, x, pos, valid=None, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), pos, cache)
        h = self.post_attention_layernorm(x)
        return x + (self.mlp(h, valid) if isinstance(self.mlp, MoE) else self.mlp(h))

    def forward_split(self, xp, pp, xs, ps, valid_s):
        ap, as_ = self.self_attn.forward_split(self.input_layernorm(xp), pp, self.input_layernorm(xs), ps)
        xp, xs = xp + ap, xs + as_
        H = xp.shape[-1]
        hcat = torch.cat([self.post_attention_layernorm(xp).reshape(-1, H),
                          self.post_attention_layernorm(xs).reshape(-1, H)])
        if isinstance(self.mlp, MoE):
            vcat = torch.cat([torch.ones(xp.shape[1], dtype=torch.bool), valid_s.reshape(-1)])
            m = self.mlp(hcat, vcat)
        else:
            m = self.mlp(hcat)
        P = xp.shape[1]
        return xp + m[:P].view_as(xp), xs + m[P:].view_as(xs)


class MTPLayer(nn.Module):
    def __init__(self, c: NanoConfig):
        super().__init__()
        self.enorm = RMSNorm(c.hidden, c.eps)
        self.hnorm = RMSNorm(c.hidden, c.eps)
        self.eh_proj = nn.Linear(2 * c.hidden, c.hidden, bias=False)
        self.input_layernorm = RMSNorm(c.hidden, c.eps)
        self.self_attn = Attention(c, swa=True)
        self.pre_mlp_layernorm = RMSNorm(c.hidden, c.eps)
        self.mlp = MLP(c.hidden, c.intermediate)
        self.final_layernorm = RMSNorm(c.hidden, c.eps)

    def forward(self, emb, hprev, pos, cache=None):
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hprev)], dim=-1))
        x = x + self.self_attn(self.input_layernorm(x), pos, cache)
        x = x + self.mlp(self.pre_mlp_layernorm(x))
        return self.final_layernorm(x)


class NanoMiMo(nn.Module):
    def __init__(self, c: NanoConfig):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.n_in, c.hidden)
        self.layers = nn.ModuleList([DecoderLayer(c, i) for i in range(c.layers)])
        self.norm = RMSNorm(c.hidden, c.eps)
        self.lm_head = nn.Linear(c.hidden, c.n_out, bias=False)
        self.mtp = nn.ModuleList([MTPLayer(c) for _ in range(c.mtp)])
        self._init()
        self.apply_constraints()

    def _init(self):
        nn.init.normal_(self.embed.weight, std=1.0)
        n_res = 2 * (self.c.layers + 1)
        for name, p in self.named_parameters():
            if p.dim() == 2 and "embed" not in name and "gate_weight" not in name:
                std = p.shape[1] ** -0.5
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    std /= math.sqrt(n_res)
                nn.init.normal_(p, std=std)

    def residual_writers(self):
        """Linear weights [H, *] that add to a residual stream (row const_ch must stay 0)."""
        for l in self.layers:
            yield l.self_attn.o_proj.weight
            if isinstance(l.mlp, MLP):
                yield l.mlp.down_proj.weight
        for m in self.mtp:
            yield m.self_attn.o_proj.weight
            yield m.mlp.down_proj.weight

    @torch.no_grad()
    def apply_constraints(self):
        """Keep residual channel c constant: every embedding row has x[c] = const_val, nothing adds
        to channel c (o_proj / down_proj / expert down rows are zero), MTP eh_proj row c copies
        enorm(e)[c] (so the MTP stream keeps a positive c too), and the final norms / enorm have
        weight 1 on c. So the final hidden state always has h[c] > 0 (see export.py)."""
        c = self.c.const_ch
        self.embed.weight[:, c] = self.c.const_val
        for w in self.residual_writers():
            w[c, :] = 0
        for l in self.layers:
            if isinstance(l.mlp, MoE):
                l.mlp.w_down[:, c, :] = 0
        self.norm.weight[c] = 1.0
        for m in self.mtp:
            m.eh_proj.weight[c, :] = 0
            m.eh_proj.weight[c, c] = 1.0
            m.enorm.weight[c] = 1.0
            m.final_layernorm.weight[c] = 1.0

    def hidden(self, ids, valid=None, caches=None, pos0: int = 0):
        """ids [B, T] compact input ids -> main residual stream before model.norm [B, T, H]."""
        T = ids.shape[1]
        pos = torch.arange(pos0, pos0 + T)
        x = self.embed(ids)
        for i, l in enumerate(self.layers):
            x = l(x, pos, valid, None if caches is None else caches[i])
        return x

    def hidden_split(self, prefix_ids, suffix_ids, valid_s):
        """prefix_ids [1, P], suffix_ids [B, S] -> pre-norm residual streams ([1, P, H], [B, S, H])."""
        P, S = prefix_ids.shape[1], suffix_ids.shape[1]
        pp, ps = torch.arange(P), torch.arange(P, P + S)
        xp, xs = self.embed(prefix_ids), self.embed(suffix_ids)
        for l in self.layers:
            xp, xs = l.forward_split(xp, pp, xs, ps, valid_s)
        return xp, xs

    def logits(self, h):
        return self.lm_head(self.norm(h))

    def mtp_hidden(self, k, emb_ids, hprev, pos0: int = 0, cache=None):
        T = emb_ids.shape[1]
        pos = torch.arange(pos0, pos0 + T)
        return self.mtp[k](self.embed(emb_ids), hprev, pos, cache)

    def balance(self, gamma):
        for l in self.layers:
            if isinstance(l.mlp, MoE):
                l.mlp.balance(gamma)

    def loads(self):
        return [l.mlp.last_load for l in self.layers if isinstance(l.mlp, MoE)]


def config_dict(c: NanoConfig):
    return asdict(c)
