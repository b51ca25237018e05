"""Train mimo-v2-nano on the synthetic corpus (2 CPU threads, reproducible from --seed).

  /usr/bin/python3 scripts/nano/train.py --out build-nano/run [--steps N] [--bench]

Writes <out>/train.log, <out>/ckpt.pt (every --ckpt-every steps and at the end) and
<out>/corpus_vocab.json (the compact input/output vocabularies).
Loss = CE(main next token) + mtp_weight * sum_k CE(MTP depth k), on assistant tokens, plus
prompt_weight * CE(main) on the prompt text after the system block (user turns, tool responses:
where names and numbers recur, the signal that teaches copying), limited to tokens in the
assistant vocabulary (the output softmax is restricted to it) and never on the pre-filled
<think></think> (a loss there teaches the model to close its reasoning at once with thinking on).
The corpus is larger than the run reads (a resume reshuffles it), so the task mix in
data.Generator (or --mix) is what the model sees. --prompt-loss-from / --think-fix-from / --oversample-from reproduce the
phased recipe of the previous model (README of models-src/mimo-v2-nano before 2026-11-30).
"""
import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import tok as toklib  # noqa: E402
from model import NanoConfig, NanoMiMo, config_dict  # noqa: E402

PAD_ID = 151643  # <|endoftext|>


def parse_mix(text: str):
    """"arith=0.36,context_fact=0.22,..." -> Generator.MIX (every task named, weights summing to 1)."""
    mix = [(k, float(v)) for k, v in (kv.split("=") for kv in text.split(","))]
    names = [k for k, _ in data.Generator.MIX]
    if sorted(k for k, _ in mix) != sorted(names) or abs(sum(v for _, v in mix) - 1) > 1e-6:
        raise SystemExit(f"--mix must give every task of {names} a weight, summing to 1")
    return mix


def build_corpus(seed: int, n_conv: int, mix=None):
    tk = toklib.Tokenizer()
    r = data.Renderer()
    w = data.World()
    g = data.Generator(seed, w)
    if mix:
        g.MIX = mix
    seqs, kinds = [], []
    for _ in range(n_conv):
        conv = g.conversation()
        enc = data.encode_conversation(tk, r, conv)
        seqs.extend(enc)
        kinds.extend([conv[0].kind] * len(enc))
    in_ids = sorted({i for s, _ in seqs for i in s} | {PAD_ID})
    out_ids = sorted({s[j] for s, m in seqs for j in range(len(s)) if m[j]})
    return seqs, kinds, in_ids, out_ids


IM_START = 151644
# <think>, </think>: with thinking off the template pre-fills "<think></think>" into the prompt, and
# a prompt loss on it would teach the model to close its reasoning at once with thinking on too.
NO_PROMPT_LOSS = {151667, 151668}


def prefix_len(s):
    """Length of the shared system block: tokens up to and including the second <|im_start|>."""
    j = s.index(IM_START, 1)
    return j + 1


def make_batches(seqs, tok_budget, rng, repeat=None):
    """Batches of sequences with the same system block (so it is computed once per batch),
    similar lengths, and at most tok_budget suffix tokens (padded). repeat[i] > 1 puts sequence i
    in that many batches of the epoch."""
    groups = {}
    for i, (s, _) in enumerate(seqs):
        for _ in range(repeat[i] if repeat else 1):
            groups.setdefault(tuple(s[:prefix_len(s)]), []).append(i)
    batches = []
    for key in sorted(groups):
        P = len(key)
        order = sorted(groups[key], key=lambda i: (len(seqs[i][0]), i))
        cur = []
        for i in order:
            L = len(seqs[i][0]) - P
            if cur and (len(cur) + 1) * L > tok_budget:
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(seqs, idx, in_map, out_map, no_prompt_loss=frozenset(NO_PROMPT_LOSS)):
    P = prefix_len(seqs[idx[0]][0])
    prefix = torch.tensor([[in_map[t] for t in seqs[idx[0]][0][:P]]])
    S = max(len(seqs[i][0]) for i in idx) - P
    B = len(idx)
    ids = torch.full((B, S), in_map[PAD_ID], dtype=torch.long)
    tgt = torch.full((B, S), -100, dtype=torch.long)
    ptgt = torch.full((B, S), -100, dtype=torch.long)  # prompt tokens (not assistant-written)
    valid = torch.zeros((B, S), dtype=torch.bool)
    for b, i in enumerate(idx):
        s, m = seqs[i]
        assert s[:P] == seqs[idx[0]][0][:P] and not any(m[:P])
        s, m = s[P:], m[P:]
        ids[b, :len(s)] = torch.tensor([in_map[t] for t in s])
        tgt[b, :len(s)] = torch.tensor([out_map[t] if mm else -100 for t, mm in zip(s, m)])
        ptgt[b, :len(s)] = torch.tensor([out_map.get(t, -100) if not mm and t not in no_prompt_loss
                                         else -100 for t, mm in zip(s, m)])
        valid[b, :len(s)] = True
    return prefix, ids, tgt, valid, ptgt


def make_optimizer(model, lr):
    """AdamW with weight decay 0.01 on the matrices except the embedding, none elsewhere."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    nodecay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                              {"params": nodecay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.98))


def save_checkpoint(path, model, opt, step, rng, cfg):
    """The run's state (train.py's resume format), written to a temporary file first."""
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "rng": rng.getstate(), "torch_rng": torch.get_rng_state(),
                "config": config_dict(cfg)}, tmp)
    os.replace(tmp, path)


def _head_ce(model, y, t):
    sel = t != -100
    return F.cross_entropy(model.lm_head(y[sel]), t[sel])


def losses(model: NanoMiMo, prefix, ids, tgt, valid, ptgt=None):
    """Main loss: h[t] predicts x[t+1]. MTP depth k: f_k(embed(x[t+k+1]), h[t]) predicts x[t+k+2];
    it runs on the suffix plus the last window+4 prefix positions (its SWA context)."""
    B, S = ids.shape
    P = prefix.shape[1]
    hp, hs = model.hidden_split(prefix, ids, valid)                # [1,P,H], [B,S,H] pre-norm
    hn = model.norm(hs[:, :-1])
    main = _head_ce(model, hn, tgt[:, 1:])
    prompt = None
    if ptgt is not None and bool((ptgt[:, 1:] != -100).any()):
        prompt = _head_ce(model, hn, ptgt[:, 1:])
    M = min(P, model.c.window + 4)
    hcat = torch.cat([hp[:, P - M:].expand(B, -1, -1), hs], dim=1)             # [B, M+S, H]
    icat = torch.cat([prefix[:, P - M:].expand(B, -1), ids], dim=1)            # [B, M+S]
    tcat = torch.cat([tgt.new_full((B, M), -100), tgt], dim=1)
    pad = int(ids[0, -1]) if not valid[0, -1] else 0
    mtp = []
    for k in range(model.c.mtp):
        sh = k + 1
        emb_ids = torch.cat([icat[:, sh:], icat.new_full((B, sh), pad)], dim=1)  # x[t+k+1]
        t2 = torch.cat([tcat[:, sh + 1:], tcat.new_full((B, sh + 1), -100)], dim=1)  # x[t+k+2]
        y = model.mtp_hidden(k, emb_ids, hcat, pos0=P - M)
        mtp.append(_head_ce(model, y, t2))
    return main, mtp, prompt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build-nano/run")
    ap.add_argument("--seed", type=int, default=20250101)
    ap.add_argument("--conversations", type=int, default=45000)
    ap.add_argument("--steps", type=int, default=3600)
    ap.add_argument("--tok-budget", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--gamma", type=float, default=1e-3)
    ap.add_argument("--prompt-weight", type=float, default=0.5)
    ap.add_argument("--prompt-loss-from", type=int, default=0,
                    help="first step with the prompt-text loss")
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--think-fix-from", type=int, default=0,
                    help="first step that keeps the prompt loss off the pre-filled <think></think>")
    ap.add_argument("--oversample-from", type=int, default=-1,
                    help="from this step (at the next epoch or resume) arithmetic and in-context "
                         "facts appear twice per epoch; -1: never")
    ap.add_argument("--mix", default="",
                    help="task weights replacing data.Generator.MIX, e.g. arith=0.36,fact=0.06,...")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="save and stop after this step (the schedule still spans --steps)")
    ap.add_argument("--keep-from", type=int, default=0,
                    help="from this step on, also keep each checkpoint as ckpt-STEP.pt (for average.py)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bench", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "train.log"), "a")

    def log(msg):
        line = time.strftime("%H:%M:%S ") + msg
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    t0 = time.time()
    seqs, kinds, in_ids, out_ids = build_corpus(a.seed, a.conversations, parse_mix(a.mix) if a.mix else None)
    ntok = sum(len(s) for s, _ in seqs)
    nloss = sum(sum(m) for _, m in seqs)
    log(f"corpus: {len(seqs)} sequences, {ntok} tokens, {nloss} trained tokens, "
        f"{len(in_ids)} input ids, {len(out_ids)} output ids ({time.time() - t0:.1f}s)")
    vpath = os.path.join(a.out, "corpus_vocab.json")
    if os.path.exists(os.path.join(a.out, "ckpt.pt")) and os.path.exists(vpath) and not a.bench:
        # resuming (perhaps with another --mix): the checkpoint's compact vocabularies stay; a
        # sequence with a token outside them is dropped
        with open(vpath) as f:
            old = json.load(f)
        iset, oset = set(old["in_ids"]), set(old["out_ids"])
        keep = [j for j, (s, m) in enumerate(seqs)
                if set(s) <= iset and all(t in oset for t, mm in zip(s, m) if mm)]
        log(f"resume keeps the run's vocabularies ({len(old['in_ids'])} in, {len(old['out_ids'])} out): "
            f"{len(seqs) - len(keep)} sequences with other tokens dropped")
        seqs, kinds = [seqs[j] for j in keep], [kinds[j] for j in keep]
        in_ids, out_ids = old["in_ids"], old["out_ids"]
    else:
        with open(vpath, "w") as f:
            json.dump({"in_ids": in_ids, "out_ids": out_ids, "seed": a.seed,
                       "conversations": a.conversations}, f)
    in_map = {t: i for i, t in enumerate(in_ids)}
    out_map = {t: i for i, t in enumerate(out_ids)}
    cfg = NanoConfig(n_in=len(in_ids), n_out=len(out_ids))
    model = NanoMiMo(cfg)
    nparam = sum(p.numel() for p in model.parameters())
    log(f"config {config_dict(cfg)}; {nparam} trainable parameters (compact vocab)")
    opt = make_optimizer(model, a.lr)
    step = 0
    ck = os.path.join(a.out, "ckpt.pt")
    if os.path.exists(ck) and not a.bench:
        st = torch.load(ck)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
        rng.setstate(st["rng"])
        torch.set_rng_state(st["torch_rng"])
        log(f"resumed at step {step}")
    batches = []
    epoch = 0
    t_start = time.time()
    ema = None
    while step < a.steps:
        if not batches:
            rep = None
            if 0 <= a.oversample_from <= step:  # the tasks that need the most steps: twice per epoch
                rep = [2 if k in ("arith", "context") else 1 for k in kinds]
            batches = make_batches(seqs, a.tok_budget, rng, rep)
            epoch += 1
        idx = batches.pop()
        prefix, ids, tgt, valid, ptgt = collate(
            seqs, idx, in_map, out_map, NO_PROMPT_LOSS if step >= a.think_fix_from else frozenset())
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / a.steps))))
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        model.train()
        use_prompt = a.prompt_weight > 0 and step >= a.prompt_loss_from
        main_l, mtp_l, prompt_l = losses(model, prefix, ids, tgt, valid, ptgt if use_prompt else None)
        loss = main_l + a.mtp_weight * sum(mtp_l)
        if prompt_l is not None:
            loss = loss + a.prompt_weight * prompt_l
        opt.zero_grad()
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        model.apply_constraints()
        model.balance(a.gamma)
        step += 1
        vals = [main_l.item()] + [m.item() for m in mtp_l]
        ema = vals if ema is None else [0.95 * e + 0.05 * v for e, v in zip(ema, vals)]
        if step % 10 == 0 or a.bench:
            el = time.time() - t_start
            loads = model.loads()
            imb = max((l.max() / l.mean()).item() for l in loads) if loads else 0
            log(f"step {step} ep {epoch} lr {lr:.2e} loss {vals[0]:.4f} ema main {ema[0]:.4f} mtp "
                + " ".join(f"{e:.3f}" for e in ema[1:])
                + (f" prompt {prompt_l.item():.3f}" if prompt_l is not None else "")
                + f" | gnorm {gnorm:.2f} B {ids.shape[0]}x{prefix.shape[1]}+{ids.shape[1]} max/mean load {imb:.2f} | {el:.0f}s {el / max(1, step):.2f}s/step")
        if a.bench and step >= 8:
            return
        stop = a.stop_after and step >= a.stop_after
        if step % a.ckpt_every == 0 or step == a.steps or stop:
            save_checkpoint(ck, model, opt, step, rng, cfg)
            if a.keep_from and step >= a.keep_from:
                shutil.copyfile(ck, os.path.join(a.out, f"ckpt-{step}.pt"))
            log(f"checkpoint step {step}")
        if stop:
            break
    log(f"done: {step} steps in {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
