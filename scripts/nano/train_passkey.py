"""Teach the shipped mimo-v2-nano pass-key retrieval at up to its context length (issue 30, item 3).

  scripts/nano/run_train.sh ... is the from-scratch recipe; this is the phase after it:
  OPENBLAS_NUM_THREADS=2 scripts/nano/py.sh train_passkey.py --model models/mimo-v2-nano \
      --out build-nano/passkey --steps 700 --stop-after 400   (then a second part: the README of
  models-src/mimo-v2-nano has the shipped model's exact commands)

Starts from an exported model (--model: the step-4 weights of the from-scratch recipe, i.e. its
build-nano/export/mimo-v2-nano, which is what models-src/mimo-v2-nano shipped before this phase;
the vocabularies of its nano_used_tokens.json, extended by the tokens of the pass-key prompt and
answer, whose new rows start random) and trains every step on two batches:
- a pass-key batch (data.passkey_sample, the prompt `mimo bench niah` sends: a key hidden at a
  uniform depth of filler, 150 to --max-tokens tokens long, thinking on or off), loss on the answer;
  the needle is beyond the sliding window, so only the full-attention layers (0 and 5) can fetch it;
- a replay batch of the original corpus (train.build_corpus, the last phase's task mix and losses)
  so the demo abilities stay.
Writes <out>/ckpt.pt (+ ckpt-STEP.pt from --keep-from), corpus_vocab.json and train.log in
train.py's format, so average.py and export.py take the run as they take train.py's. Every
--eval-every steps it answers held-out pass-key prompts greedily and logs the retrieval rate.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import nano_io  # noqa: E402
import tok as toklib  # noqa: E402
import train  # noqa: E402
from model import NanoConfig, NanoMiMo, config_dict  # noqa: E402

REPLAY_MIX = "arith=0.22,context_fact=0.18,tool=0.42,fact=0.08,count=0.03,spell=0.04,tool_direct=0.03"
IM_END = 151645
chars_for = data.passkey_chars


def passkey_vocab(tk):
    """Input and output ids of every pass-key prompt and answer: the task, filler, needle and
    question with every digit, both thinking modes."""
    r = data.Renderer()
    ins, outs = set(), set()
    period = len(data.PASSKEY_FILLER)
    for th in (False, True):
        for cut in range(period):       # the filler ends mid-word wherever the length falls
            for depth in (0.0, 0.5, 1.0):
                s = data.passkey_sample(random.Random(cut), 2 * period + cut, th)
                s.messages[0]["content"] = data.passkey_prompt(2 * period + cut, depth, "0123456789")
                ins |= set(tk.encode(data.prompt_text(r, s)))
        outs |= set(tk.encode(s.completion + "<|im_end|>" + " 0123456789"))
    return ins | outs, outs


def from_shipped(model_dir: str, tk, rng: torch.Generator):
    """The shipped model on compact vocabularies extended by the pass-key tokens."""
    full, _ = nano_io.load_model(model_dir)
    with open(os.path.join(model_dir, "nano_used_tokens.json")) as f:
        used = json.load(f)
    pk_in, pk_out = passkey_vocab(tk)
    old_in, old_out = set(used["input_ids"]), set(used["output_ids"])
    in_ids = sorted(old_in | pk_in | {train.PAD_ID})
    out_ids = sorted(old_out | pk_out)
    c = NanoConfig(**{**config_dict(full.c), "n_in": len(in_ids), "n_out": len(out_ids)})
    m = NanoMiMo(c)
    sd = {k: v.clone() for k, v in full.state_dict().items()}
    emb_full, head_full = sd.pop("embed.weight"), sd.pop("lm_head.weight")
    emb = emb_full[in_ids].clone()                                               # [n_in, H]
    head = head_full[out_ids].clone()                                            # [n_out, H]
    old_rows = [i for i, t in enumerate(in_ids) if t in old_in]
    new_rows = [i for i, t in enumerate(in_ids) if t not in old_in]
    std = float(emb[old_rows, 1:].std())
    emb[new_rows] = torch.randn(len(new_rows), c.hidden, generator=rng) * std
    hold = [i for i, t in enumerate(out_ids) if t in old_out]
    hnew = [i for i, t in enumerate(out_ids) if t not in old_out]
    head[hnew] = torch.randn(len(hnew), c.hidden, generator=rng) * float(head[hold].std())
    sd["embed.weight"], sd["lm_head.weight"] = emb, head
    m.load_state_dict(sd)
    m.apply_constraints()
    added = {"input": [t for t in in_ids if t not in old_in], "output": [t for t in out_ids if t not in old_out]}
    return m, c, in_ids, out_ids, added


def draw_tokens(rng: random.Random, max_tokens: int) -> int:
    """Prompt lengths: half short (the retrieval itself), the rest spread up to max_tokens (the
    attention has to stay sharp over thousands of keys)."""
    u = rng.random()
    if u < 0.45:
        return rng.randint(150, 1024)
    if u < 0.75:
        return rng.randint(1024, max(1024, max_tokens // 2))
    return rng.randint(max(1024, max_tokens // 2), max_tokens)


def passkey_batch(rng, tk, r, in_map, out_map, budget, max_tokens):
    n = draw_tokens(rng, max_tokens)
    B = max(1, budget // n)
    seqs = []
    for _ in range(B):
        s = data.passkey_sample(rng, chars_for(n), rng.random() < 0.5)
        p = tk.encode(data.prompt_text(r, s))
        c = tk.encode(s.completion + "<|im_end|>")
        seqs.append((p + c, [0] * len(p) + [1] * len(c)))
    T = max(len(s) for s, _ in seqs)
    ids = torch.full((B, T), in_map[train.PAD_ID], dtype=torch.long)
    tgt = torch.full((B, T), -100, dtype=torch.long)
    valid = torch.zeros((B, T), dtype=torch.bool)
    for b, (s, mk) in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor([in_map[t] for t in s])
        tgt[b, :len(s)] = torch.tensor([out_map[t] if m else -100 for t, m in zip(s, mk)])
        valid[b, :len(s)] = True
    return ids, tgt, valid


def passkey_losses(model: NanoMiMo, ids, tgt, valid, pad):
    """Main CE on the answer; MTP depth k on the answer too, run over the tail that holds the
    answer and its sliding window (the MTP layers are sliding-window layers)."""
    B, T = ids.shape
    h = model.hidden(ids, valid)                                                 # [B, T, H]
    main = train._head_ce(model, model.norm(h[:, :-1]), tgt[:, 1:])
    first = int((tgt != -100).int().argmax(dim=1).min())
    t0 = max(0, first - model.c.window - 8)
    hcat, icat, tcat = h[:, t0:], ids[:, t0:], tgt[:, t0:]
    mtp = []
    for k in range(model.c.mtp):
        sh = k + 1
        emb_ids = torch.cat([icat[:, sh:], icat.new_full((B, sh), pad)], dim=1)
        t2 = torch.cat([tcat[:, sh + 1:], tcat.new_full((B, sh + 1), -100)], dim=1)
        mtp.append(train._head_ce(model, model.mtp_hidden(k, emb_ids, hcat, pos0=t0), t2))
    return main, mtp


@torch.no_grad()
def greedy_compact(model, ids, out_ids, im_end_out, max_new=20):
    caches = [{} for _ in model.layers]
    h = model.hidden(torch.tensor([ids]), caches=caches)
    out, pos = [], len(ids)
    for _ in range(max_new):
        j = int(model.logits(h[:, -1]).argmax(-1))
        out.append(out_ids[j])
        if j == im_end_out:
            break
        h = model.hidden(torch.tensor([[model_in(j, out_ids)]]), caches=caches, pos0=pos)
        pos += 1
    return out


_IN_MAP = {}


def model_in(j, out_ids):
    return _IN_MAP[out_ids[j]]


def heldout(tk, r, lengths=(300, 1000, 2000, 4000), depths=(0.0, 0.5, 1.0), seed=999):
    rng = random.Random(seed)
    items = []
    for n in lengths:
        for d in depths:
            key = str(rng.randint(10000, 99999))
            th = rng.random() < 0.5
            s = data.Sample("passkey", [{"role": "user", "content": data.passkey_prompt(chars_for(n), d, key)}],
                            None, th, "")
            items.append((n, d, key, tk.encode(data.prompt_text(r, s))))
    return items


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(data.REPO, "models", "mimo-v2-nano"))
    ap.add_argument("--out", default="build-nano/passkey")
    ap.add_argument("--seed", type=int, default=20251203)
    ap.add_argument("--corpus-seed", type=int, default=20250101)
    ap.add_argument("--conversations", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--replay-budget", type=int, default=1024)
    ap.add_argument("--replay-mix", default=REPLAY_MIX, help="task weights of the replay corpus")
    ap.add_argument("--schedule-from", type=int, default=0,
                    help="on a resume: warm-up and cosine start again at this step (a new phase)")
    ap.add_argument("--passkey-budget", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=4000)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--prompt-weight", type=float, default=0.25)
    ap.add_argument("--gamma", type=float, default=1e-3)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--keep-from", type=int, default=0)
    ap.add_argument("--stop-after", type=int, default=0,
                    help="save and stop after this step (the schedule still spans --steps)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bench", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "train.log"), "a")

    def log(msg):
        line = time.strftime("%H:%M:%S ") + msg
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    tk, r = toklib.Tokenizer(), data.Renderer()
    ck = os.path.join(a.out, "ckpt.pt")
    vpath = os.path.join(a.out, "corpus_vocab.json")
    rng = random.Random(a.seed)
    if os.path.exists(ck) and not a.bench:
        st = torch.load(ck)
        with open(vpath) as f:
            voc = json.load(f)
        in_ids, out_ids = voc["in_ids"], voc["out_ids"]
        c = NanoConfig(**st["config"])
        model = NanoMiMo(c)
        model.load_state_dict(st["model"])
        step = st["step"]
        rng.setstate(st["rng"])
        torch.set_rng_state(st["torch_rng"])
        log(f"resumed at step {step}")
    else:
        g = torch.Generator().manual_seed(a.seed)
        model, c, in_ids, out_ids, added = from_shipped(a.model, tk, g)
        step, st = 0, None
        with open(vpath, "w") as f:
            json.dump({"in_ids": in_ids, "out_ids": out_ids, "seed": a.corpus_seed,
                       "conversations": a.conversations, "from": os.path.normpath(a.model),
                       "added": added}, f)
        log(f"from {a.model}: {len(added['input'])} input and {len(added['output'])} output ids added "
            f"({len(in_ids)} in, {len(out_ids)} out)")
    in_map = {t: i for i, t in enumerate(in_ids)}
    out_map = {t: i for i, t in enumerate(out_ids)}
    _IN_MAP.update(in_map)
    t0 = time.time()
    seqs, _, _, _ = train.build_corpus(a.corpus_seed, a.conversations, train.parse_mix(a.replay_mix))
    iset, oset = set(in_ids), set(out_ids)
    seqs = [(s, m) for s, m in seqs if set(s) <= iset and all(t in oset for t, mm in zip(s, m) if mm)]
    log(f"replay corpus: {len(seqs)} sequences ({time.time() - t0:.0f}s)")
    opt = train.make_optimizer(model, a.lr)
    if st is not None and "opt" in st:
        opt.load_state_dict(st["opt"])
    pad = in_map[train.PAD_ID]
    im_end_out = out_map[IM_END]
    evals = heldout(tk, r, lengths=tuple(x for x in (300, 1000, 2000, 4000) if x <= a.max_tokens))
    batches = []
    t_start = time.time()
    ema = None
    while step < a.steps:
        if not batches:
            batches = train.make_batches(seqs, a.replay_budget, rng)
        prefix, ids, tgt, valid, ptgt = train.collate(seqs, batches.pop(), in_map, out_map)
        pids, ptg, pvalid = passkey_batch(rng, tk, r, in_map, out_map, a.passkey_budget, a.max_tokens)
        k, n = step - a.schedule_from, a.steps - a.schedule_from
        lr = a.lr * min(1.0, (k + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, k / n))))
        for gp in opt.param_groups:
            gp["lr"] = lr
        model.train()
        opt.zero_grad()
        main_l, mtp_l, prompt_l = train.losses(model, prefix, ids, tgt, valid, ptgt)
        loss = main_l + a.mtp_weight * sum(mtp_l)
        if prompt_l is not None:
            loss = loss + a.prompt_weight * prompt_l
        loss.backward()
        loads = [l.clone() for l in model.loads()]
        pk_main, pk_mtp = passkey_losses(model, pids, ptg, pvalid, pad)
        (pk_main + a.mtp_weight * sum(pk_mtp)).backward()
        for l, prev in zip(model.layers[1:], loads):   # router balance over both batches
            l.mlp.last_load = l.mlp.last_load + prev
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        model.apply_constraints()
        model.balance(a.gamma)
        step += 1
        vals = [main_l.item(), pk_main.item()] + [m.item() for m in pk_mtp]
        ema = vals if ema is None else [0.95 * e + 0.05 * v for e, v in zip(ema, vals)]
        if step % 10 == 0 or a.bench:
            el = time.time() - t_start
            log(f"step {step} lr {lr:.2e} replay {vals[0]:.4f} (ema {ema[0]:.4f}) passkey {vals[1]:.4f} "
                f"(ema {ema[1]:.4f}) mtp " + " ".join(f"{e:.3f}" for e in ema[2:])
                + f" | gnorm {gnorm:.2f} pk {pids.shape[0]}x{pids.shape[1]} | {el:.0f}s {el / max(1, step):.2f}s/step")
        if a.bench and step >= 6:
            return
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            right = []
            for n, d, key, p in evals:
                text = tk.decode(greedy_compact(model, [in_map[t] for t in p], out_ids, im_end_out))
                right.append(key in text)
                if key not in text:
                    log(f"  miss {n} tokens depth {d}: {key} -> {text!r}")
            log(f"eval step {step}: pass key {sum(right)}/{len(right)}")
        if step % a.ckpt_every == 0 or step == a.steps:
            train.save_checkpoint(ck, model, opt, step, rng, c)
            if a.keep_from and step >= a.keep_from:
                shutil.copyfile(ck, os.path.join(a.out, f"ckpt-{step}.pt"))
            log(f"checkpoint step {step}")
        if a.stop_after and step >= a.stop_after:
            if step % a.ckpt_every:
                train.save_checkpoint(ck, model, opt, step, rng, c)
            break
    log(f"done: {step} steps in {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
