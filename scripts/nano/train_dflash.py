"""Train the DFlash drafter of mimo-v2-nano from the model's own greedy outputs (self-distillation,
shared/spec/dflash.md sections 1-4), on these CPUs, and export it in the real `dflash/` layout.

  scripts/nano/py.sh train_dflash.py --model models/mimo-v2-nano --work build-nano/dflash \
      [--prompts 1200] [--steps 3000] [--out models-src/mimo-v2-nano/dflash]

1. Prompts from the training distribution (data.Generator, seed 31337: neither the corpus seed
   nor the evaluation's 777 or the probe's 4242); the target answers each greedily (its own
   outputs are the labels, so the drafter learns what the target says, not what the corpus says).
2. Features: the target's residual stream after each layer of target_layer_ids, every position.
3. The drafter (DFlashDrafter below: the draft forward of scripts/dflash_reference.py in float32,
   batched over many anchors): for an anchor at position P (a token the target wrote), context =
   the features of positions < P, block = [embed(anchor), mask x (B-1)] at P..P+B-1, row j is
   trained on the target's token at P+j with weight exp(-(j-1)/gamma). The softmax is limited to
   the tokens the target writes (nano_used_tokens.json), as the target's own training was.
4. Residual channel 0 is held at 4.0 (the anchor's embedding row has it, the mask embedding is
   pinned to it, nothing writes to it, the final norm has weight 1 there), as in the target: after
   the final norm h[0] > 0, so every token the target never writes scores below <|im_end|> through
   the target's lm_head (its README, "Tokens the model never writes") and cannot be a draft.
5. Evaluation: the decode loop simulated on held-out prompts (data.eval_set, seed 777): drafts =
   argmax over the whole vocabulary, accepted = longest prefix equal to the target's greedy
   tokens, mean tokens per verify step (accepted drafts + the bonus) reported.
"""
import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import data  # noqa: E402
import nano_io  # noqa: E402
import tok as toklib  # noqa: E402
from evaluate import build_eval, greedy  # noqa: E402
from model import RMSNorm  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))


@dataclass
class DraftCfg:
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    rot: int = 32  # partial_rotary_factor 0.5, as the released drafters
    intermediate: int = 384
    block: int = 8
    window: int = 1024
    layer_ids: List[int] = field(default_factory=lambda: [0, 2, 5])
    mask_id: int = 151675  # MiMo-V2.5 Flash's drafter's (an unused added token here too)
    value_scale: float = 0.612
    eps: float = 1e-6
    theta_draft: float = 10000.0
    theta_backbone: float = 5e6  # the target's full-attention rope_theta
    gamma: float = 7.0
    const_ch: int = 0
    const_val: float = 4.0


def rope_any(x, pos, rot, theta):
    """x [..., T, heads, d] with pos broadcastable to x.shape[:-2]: NeoX rotate-half on the first
    `rot` dims, inv_freq = theta^(-2i/rot)."""
    half = rot // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64) * 2.0 / rot)
    ang = (pos.to(torch.float64)[..., None] * inv).to(x.dtype)[..., None, :]  # [..., 1, half]
    cos, sin = ang.cos(), ang.sin()
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class DraftLayer(nn.Module):
    def __init__(self, c: DraftCfg):
        super().__init__()
        H, d = c.hidden, c.head_dim
        self.input_layernorm = RMSNorm(H, c.eps)
        self.q_proj = nn.Linear(H, c.heads * d, bias=False)
        self.k_proj = nn.Linear(H, c.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(H, c.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(c.heads * d, H, bias=False)
        self.q_norm = RMSNorm(d, c.eps)
        self.k_norm = RMSNorm(d, c.eps)
        self.attention_sink_bias = nn.Parameter(torch.zeros(c.heads))
        self.post_attention_layernorm = RMSNorm(H, c.eps)
        self.gate_proj = nn.Linear(H, c.intermediate, bias=False)
        self.up_proj = nn.Linear(H, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, H, bias=False)


class DFlashDrafter(nn.Module):
    def __init__(self, c: DraftCfg):
        super().__init__()
        self.c = c
        H = c.hidden
        self.fc = nn.Linear(len(c.layer_ids) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, c.eps)
        self.layers = nn.ModuleList([DraftLayer(c) for _ in range(c.layers)])
        self.norm = RMSNorm(H, c.eps)
        self.mask_embedding = nn.Parameter(torch.randn(H))
        for l in self.layers:
            for lin in (l.o_proj, l.down_proj):
                nn.init.normal_(lin.weight, std=lin.weight.shape[1] ** -0.5 / math.sqrt(2 * c.layers))
        self.apply_constraints()

    @torch.no_grad()
    def apply_constraints(self):
        c = self.c.const_ch
        self.mask_embedding[c] = self.c.const_val
        for l in self.layers:
            l.o_proj.weight[c, :] = 0
            l.down_proj.weight[c, :] = 0
        self.norm.weight[c] = 1.0

    def forward(self, feats, ctx_valid, anchor_emb, anchors):
        """feats [S, T, n*H] (target features of positions 0..T-1), ctx_valid [S, T] bool,
        anchor_emb [S, N, H], anchors [S, N] positions -> final hidden [S, N, B, H] (pre norm).
        Block of anchor n: positions anchors[n]..+B-1; it sees context keys t < anchors[n] with
        |p - t| <= window-1, and its own B keys (non-causal)."""
        c = self.c
        S, T, _ = feats.shape
        N = anchors.shape[1]
        B, nh, nkv, d = c.block, c.heads, c.kv_heads, c.head_dim
        rep = nh // nkv
        ctx = self.hidden_norm(self.fc(feats))                                  # [S, T, H]
        pos_c = torch.arange(T)
        pos_b = anchors[..., None] + torch.arange(B)                            # [S, N, B]
        x = torch.cat([anchor_emb[:, :, None], self.mask_embedding.expand(S, N, B - 1, c.hidden)],
                      dim=2)                                                    # [S, N, B, H]
        diff = pos_b[..., None] - pos_c                                         # [S, N, B, T]
        see = (pos_c < anchors[..., None, None]) & ctx_valid[:, None, None, :]
        if c.window:
            see = see & (diff.abs() <= c.window - 1)
        neg = torch.zeros(see.shape).masked_fill(~see, float("-inf"))[:, :, None]  # [S,N,1,B,T]
        for l in self.layers:
            kc = rope_any(l.k_norm(l.k_proj(ctx).view(S, T, nkv, d)), pos_c, c.rot,
                          c.theta_backbone)                                     # [S, T, nkv, d]
            vc = l.v_proj(ctx).view(S, T, nkv, d) * c.value_scale
            h = l.input_layernorm(x)
            q = rope_any(l.q_norm(l.q_proj(h).view(S, N, B, nh, d)), pos_b, c.rot, c.theta_draft)
            kb = rope_any(l.k_norm(l.k_proj(h).view(S, N, B, nkv, d)), pos_b, c.rot, c.theta_draft)
            vb = l.v_proj(h).view(S, N, B, nkv, d) * c.value_scale
            kc, vc = kc.repeat_interleave(rep, 2), vc.repeat_interleave(rep, 2)
            kb, vb = kb.repeat_interleave(rep, 3), vb.repeat_interleave(rep, 3)
            sc = torch.einsum("snbhd,sthd->snhbt", q, kc) / math.sqrt(d) + neg
            sb = torch.einsum("snbhd,snjhd->snhbj", q, kb) / math.sqrt(d)
            sink = l.attention_sink_bias.view(1, 1, nh, 1, 1).expand(S, N, nh, B, 1)
            p = torch.cat([sc, sb, sink], dim=-1).softmax(-1)
            o = torch.einsum("snhbt,sthd->snbhd", p[..., :T], vc) + \
                torch.einsum("snhbj,snjhd->snbhd", p[..., T:T + B], vb)
            x = x + l.o_proj(o.reshape(S, N, B, nh * d))
            h = l.post_attention_layernorm(x)
            x = x + l.down_proj(F.silu(l.gate_proj(h)) * l.up_proj(h))
        return x


# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def features(target, ids, layer_ids):
    """[T, n*H]: the target residual stream after each layer of layer_ids (pre final norm)."""
    x = target.embed(torch.tensor([ids]))
    pos = torch.arange(len(ids))
    caps = []
    for i, l in enumerate(target.layers[:layer_ids[-1] + 1]):
        x = l(x, pos)
        if i in layer_ids:
            caps.append(x[0])
    return torch.cat(caps, dim=-1)


def training_prompts(n, seed):
    tk, r, w = toklib.Tokenizer(), data.Renderer(), data.World()
    g = data.Generator(seed, w)
    out = []
    while len(out) < n:
        for s in g.conversation():
            out.append(tk.encode(data.prompt_text(r, s)))
    return out[:n]


def make_dataset(target, prompts, layer_ids, log):
    """[(ids, written, features f16)] with ids = prompt + the target's greedy answer; written[t]:
    the target wrote token t (anchors and labels are taken there)."""
    out, t0 = [], time.time()
    for i, p in enumerate(prompts):
        ids = p + greedy(target, p, max_new=160)
        written = [False] * len(p) + [True] * (len(ids) - len(p))
        out.append((ids, written, features(target, ids, layer_ids).to(torch.float16)))
        if (i + 1) % 100 == 0:
            log(f"data {i + 1}/{len(prompts)} ({time.time() - t0:.0f} s)")
    return out


def make_corpus_dataset(target, n_conv, seed, layer_ids, log):
    """The same from the target's training distribution without generating: conversations of
    data.Generator (every assistant turn of a multi-turn conversation in one sequence), written
    = the assistant's tokens. The target reproduces its corpus almost everywhere, so these are
    nearly its own outputs, at one forward pass per sequence instead of one per token; they
    bring many more names, cities and numbers than the greedy set can in the time."""
    tk, r, w = toklib.Tokenizer(), data.Renderer(), data.World()
    g = data.Generator(seed, w)
    out, t0 = [], time.time()
    while len(out) < n_conv:
        for ids, mask in data.encode_conversation(tk, r, g.conversation()):
            out.append((ids, [bool(m) for m in mask],
                        features(target, ids, layer_ids).to(torch.float16)))
        if len(out) % 500 < 2:
            log(f"corpus {len(out)}/{n_conv} ({time.time() - t0:.0f} s)")
    return out[:n_conv]


def batch(items, emb, out_index, n_anchor, B, rng):
    """Pads a few sequences; picks up to n_anchor anchors per sequence among the positions the
    target wrote whose next token it wrote too; labels only on written tokens (generation stops
    at the turn's <|im_end|>)."""
    S, T = len(items), max(len(ids) for ids, _, _ in items)
    nH = items[0][2].shape[1]
    feats = torch.zeros(S, T, nH)
    valid = torch.zeros(S, T, dtype=torch.bool)
    anchors = torch.zeros(S, n_anchor, dtype=torch.long)
    labels = torch.full((S, n_anchor, B - 1), -100, dtype=torch.long)
    aemb = torch.zeros(S, n_anchor, emb.shape[1])
    for s, (ids, written, f) in enumerate(items):
        feats[s, :len(ids)] = f.float()
        valid[s, :len(ids)] = True
        cand = [t for t in range(len(ids) - 1) if written[t] and written[t + 1]]
        pick = [rng.choice(cand) for _ in range(n_anchor)] if len(cand) < n_anchor else \
            rng.sample(cand, n_anchor)
        for n, a in enumerate(pick):
            anchors[s, n] = a
            aemb[s, n] = emb[ids[a]]
            for j in range(1, B):
                # (a corpus token the target never writes ends the labels: it would not be there)
                if a + j < len(ids) and written[a + j] and ids[a + j] in out_index:
                    labels[s, n, j - 1] = out_index[ids[a + j]]
                else:
                    break
    return feats, valid, aemb, anchors, labels


def simulate(drafter, target, seqs, log=None):
    """The decode loop on (ids, prompt_len, features): mean tokens per verify step, and the
    acceptance rate of each draft position."""
    c = drafter.c
    head, steps, emitted = target.lm_head.weight, 0, 0
    pos_hits = [0] * (c.block - 1)
    pos_tries = [0] * (c.block - 1)
    with torch.no_grad():
        for ids, written, f in seqs:
            L, P = len(ids), written.index(True)
            while P < L - 1:
                x = drafter(f[None, :P].float(), torch.ones(1, P, dtype=torch.bool),
                            target.embed.weight[ids[P]][None, None], torch.tensor([[P]]))
                drafts = (drafter.norm(x[0, 0, 1:]) @ head.T).argmax(-1).tolist()
                a = 0
                while a < len(drafts) and P + 1 + a < L and drafts[a] == ids[P + 1 + a]:
                    a += 1
                for j in range(min(a + 1, len(drafts))):
                    if P + 1 + j < L:
                        pos_tries[j] += 1
                        pos_hits[j] += j < a
                e = min(a + 1, L - 1 - P)
                steps += 1
                emitted += e
                P += e
    rate = [round(h / max(1, t), 3) for h, t in zip(pos_hits, pos_tries)]
    return emitted / max(1, steps), rate


# ---------------------------------------------------------------------------------------------
def export(drafter, target_cfg, out_dir, meta):
    c = drafter.c
    os.makedirs(out_dir, exist_ok=True)
    T = {}
    bf = lambda t: ("BF16", nano_io.f32_to_bf16_bits(t.detach().float().numpy()))  # noqa: E731
    T["fc.weight"] = bf(drafter.fc.weight)
    T["hidden_norm.weight"] = bf(drafter.hidden_norm.weight)
    T["norm.weight"] = bf(drafter.norm.weight)
    for i, l in enumerate(drafter.layers):
        p = f"layers.{i}."
        for name, mod in (("input_layernorm", l.input_layernorm),
                          ("post_attention_layernorm", l.post_attention_layernorm)):
            T[p + name + ".weight"] = bf(mod.weight)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
            T[p + "self_attn." + name + ".weight"] = bf(getattr(l, name).weight)
        T[p + "self_attn.attention_sink_bias"] = bf(l.attention_sink_bias)
        for name in ("gate_proj", "up_proj", "down_proj"):
            T[p + "mlp." + name + ".weight"] = bf(getattr(l, name).weight)
    nano_io.write_safetensors(os.path.join(out_dir, "dflash_draft_model.safetensors"), T,
                              {"format": "pt"})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(a.nbytes for _, a in T.values())},
                   "weight_map": {k: "dflash_draft_model.safetensors" for k in sorted(T)}},
                  f, indent=1)
    emb = torch.from_numpy(nano_io.bf16_round(drafter.mask_embedding.detach().numpy()))
    torch.save({"mask_token_id": c.mask_id, "embedding": emb.to(torch.bfloat16)},
               os.path.join(out_dir, "mask_embedding.pt"))
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": c.hidden, "intermediate_size": c.intermediate,
        "num_hidden_layers": c.layers, "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads, "head_dim": c.head_dim,
        "partial_rotary_factor": c.rot / c.head_dim, "rope_theta": c.theta_draft,
        "sliding_window": c.window, "rms_norm_eps": c.eps, "block_size": c.block,
        "num_target_layers": target_cfg["num_hidden_layers"],
        "vocab_size": target_cfg["vocab_size"], "tie_word_embeddings": False,
        "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "dflash_config": {
            "block_size": c.block, "target_layer_ids": c.layer_ids, "mask_token_id": c.mask_id,
            "use_swa": True, "swa_window_size": c.window,
            "backbone_rotary_base": c.theta_backbone, "attention_value_scale": c.value_scale,
            "attention_sink_bias": True, "loss_decay_gamma": c.gamma},
        "nano_training": meta,
    }
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    n_params = sum(p.numel() for p in drafter.parameters())
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(README.format(
            params=n_params, c=c, ids=c.layer_ids, mal=meta["held_out_mean_accepted_length"],
            rate=meta["held_out_acceptance_per_position"], prompts=meta["prompts"],
            corpus=meta["corpus"], layers=meta["layers"],
            steps=meta["steps"], seed=meta["seed"]))


README = """# DFlash drafter of mimo-v2-nano

A toy DFlash block-diffusion drafter (shared/spec/dflash.md) for the toy default model, in the
layout Xiaomi ships beside MiMo-V2.5/V2.6 (`dflash/`: config.json with `dflash_config`,
`dflash_draft_model.safetensors` in BF16, `mask_embedding.pt` holding
`{{"mask_token_id", "embedding"}}`). {params:,} parameters: {c.layers} layers, hidden
{c.hidden}, {c.heads} heads / {c.kv_heads} kv heads of {c.head_dim} (RoPE on the first {c.rot}
dims), MLP {c.intermediate}, block {c.block}, symmetric window {c.window}, sinks, value scale
{c.value_scale}; features from target layers {ids}; the target's embedding and lm_head.
RoPE: context K at backbone_rotary_base {c.theta_backbone:g}, the block at rope_theta
{c.theta_draft:g} (the engine's default `--dflash-rope split`).

Trained by `scripts/nano/train_dflash.py` (self-distillation: {prompts} prompts of the training
distribution, seed {seed}, answered greedily by the target, plus {corpus} sequences of its
training corpus (which it reproduces); {steps} AdamW steps of 8 sequences x 24 anchors, loss
weights exp(-(j-1)/7) over the block rows, residual channel 0 held at 4.0 so tokens the target
never writes never win a draft). Reproduce:
`scripts/nano/py.sh train_dflash.py --prompts {prompts} --corpus {corpus} --layers {layers}
--steps {steps} --out DIR`.

Held-out prompts (the evaluation set of the target, seed 777), the decode loop simulated in
float32 with drafts over the whole vocabulary: mean accepted length {mal} tokens per verify step
of up to 8; acceptance by draft position {rate}.
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models", "mimo-v2-nano"))
    ap.add_argument("--work", default=os.path.join(REPO, "build-nano", "dflash"))
    ap.add_argument("--out", default=None, help="export the drafter here (a dflash/ folder)")
    ap.add_argument("--prompts", type=int, default=1200)
    ap.add_argument("--corpus", type=int, default=0,
                    help="also train on this many corpus sequences (make_corpus_dataset)")
    ap.add_argument("--eval-prompts", type=int, default=10, help="held-out prompts per kind")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--seqs", type=int, default=8, help="sequences per step")
    ap.add_argument("--anchors", type=int, default=24, help="anchors per sequence")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=31337)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--resume", action="store_true", help="start from WORK/drafter.pt "
                    "(with --steps 0: only evaluate and export it)")
    ap.add_argument("--trained-steps", type=int, default=0, help="for the export's notes with "
                    "--steps 0: how many steps WORK/drafter.pt was trained")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    os.makedirs(a.work, exist_ok=True)
    logf = open(os.path.join(a.work, "train.log"), "a")

    def log(s):
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    c = DraftCfg(layers=a.layers)
    target, tcfg = nano_io.load_model(a.model)
    for p in target.parameters():
        p.requires_grad_(False)
    with open(os.path.join(a.model, "nano_used_tokens.json")) as f:
        out_ids = json.load(f)["output_ids"]
    out_index = {t: i for i, t in enumerate(out_ids)}
    head_used = target.lm_head.weight[out_ids]                                  # [n_out, H]

    cache = os.path.join(a.work, f"data-{a.prompts}-{a.seed}.pt")
    if os.path.exists(cache):
        train = torch.load(cache)
    else:
        train = make_dataset(target, training_prompts(a.prompts, a.seed), c.layer_ids, log)
        torch.save(train, cache)
    ecache = os.path.join(a.work, f"eval-{a.eval_prompts}.pt")
    if os.path.exists(ecache):
        held = torch.load(ecache)
    else:
        _, items = build_eval(a.eval_prompts, None)
        held = make_dataset(target, [p for _, p, _ in items], c.layer_ids, log)
        torch.save(held, ecache)
    # Caches written before `written` existed hold the prompt length instead.
    def upgrade(items):
        return [(ids, [t >= w for t in range(len(ids))] if isinstance(w, int) else w, f)
                for ids, w, f in items]
    train, held = upgrade(train), upgrade(held)
    if a.corpus:
        ccache = os.path.join(a.work, f"corpus-{a.corpus}-{a.seed}.pt")
        if os.path.exists(ccache):
            corpus = torch.load(ccache)
        else:
            corpus = make_corpus_dataset(target, a.corpus, a.seed + 1, c.layer_ids, log)
            torch.save(corpus, ccache)
        train = train + corpus
    log(f"train {len(train)} sequences, {sum(sum(w) for _, w, _ in train)} answer tokens; "
        f"held-out {len(held)}")

    drafter = DFlashDrafter(c)
    if a.resume:
        drafter.load_state_dict(torch.load(os.path.join(a.work, "drafter.pt")))
    opt = torch.optim.AdamW(drafter.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.98))
    wj = torch.tensor([math.exp(-j / c.gamma) for j in range(c.block - 1)])
    emb = target.embed.weight
    t0 = time.time()
    for step in range(1, a.steps + 1):
        lr = a.lr * min(1.0, step / 100) * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        items = rng.sample(train, a.seqs)
        feats, valid, aemb, anchors, labels = batch(items, emb, out_index, a.anchors, c.block, rng)
        x = drafter(feats, valid, aemb, anchors)[:, :, 1:]                      # [S, N, B-1, H]
        logits = drafter.norm(x) @ head_used.T
        ce = F.cross_entropy(logits.reshape(-1, len(out_ids)), labels.reshape(-1),
                             ignore_index=-100, reduction="none").view(labels.shape)
        m = (labels >= 0).float()
        loss = (ce * m * wj).sum() / (m * wj).sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        drafter.apply_constraints()
        if step % 50 == 0:
            with torch.no_grad():
                acc = ((logits.argmax(-1) == labels).float() * m).sum(dim=(0, 1)) / m.sum(dim=(0, 1))
            log(f"step {step} loss {loss.item():.4f} lr {lr:.2e} acc/pos "
                f"{[round(v, 2) for v in acc.tolist()]} {time.time() - t0:.0f} s")
        if step % 500 == 0 or step == a.steps:
            drafter.eval()
            mal, rate = simulate(drafter, target, held)
            drafter.train()
            log(f"step {step} held-out mean accepted length {mal:.3f} per-position {rate}")
            torch.save(drafter.state_dict(), os.path.join(a.work, "drafter.pt"))
    if a.steps == 0:
        drafter.eval()
        mal, rate = simulate(drafter, target, held)
        log(f"held-out mean accepted length {mal:.3f} per-position {rate}")
    if a.out:
        meta = {"prompts": a.prompts, "corpus": a.corpus, "steps": a.steps or a.trained_steps,
                "seed": a.seed, "layers": a.layers,
                "held_out_mean_accepted_length": round(mal, 3),
                "held_out_acceptance_per_position": rate}
        export(drafter, tcfg, a.out, meta)
        log(f"exported to {a.out}")


if __name__ == "__main__":
    main()
