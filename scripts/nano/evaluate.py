"""Greedy evaluation of an exported mimo-v2-nano checkpoint on held-out prompts.

  /usr/bin/python3 scripts/nano/evaluate.py [--model models/mimo-v2-nano] [--n-per-kind 40]
                                            [--mtp-samples 40] [--json build-nano/eval.json]

Held-out prompts (data.eval_set): arithmetic pairs never trained on, fact-table questions in
phrasings never trained on, in-context facts and tool calls with names/cities from a disjoint pool.
Scores (final answer = text after </think>):
- arith / fact / context: the expected value appears in the answer (arith: the number after '=');
- tool_call: the output parses as <tool_call><function=NAME><parameter=K>V</parameter>...
  with exactly the expected function name and arguments;
- tool_answer: given the tool response, the answer contains every fact of the response it should use;
- passkey: the 5-digit key of a `mimo bench niah` prompt (500 to 4000 tokens, five depths) in the answer;
- MTP: mean accepted length per speculative step with 3 drafts (greedy chain of the 3 MTP layers,
  each fed the main model's pre-norm hidden state at t and the previous draft; 1 + accepted drafts).
"""
import argparse
import json
import os
import re
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import data  # noqa: E402
import nano_io  # noqa: E402
import tok as toklib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
IM_END = 151645

TOOL_RE = re.compile(r"<tool_call>\n<function=([^>\n]+)>\n(.*?)</function>\n</tool_call>", re.S)
PARAM_RE = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>\n", re.S)


def parse_tool_calls(text: str):
    """[(name, {key: value})] from MiMo tool-call blocks; values kept verbatim."""
    out = []
    for m in TOOL_RE.finditer(text):
        body = m.group(2)
        params = dict(PARAM_RE.findall(body))
        if PARAM_RE.sub("", body).strip():
            continue  # junk inside the function block: not a valid call
        out.append((m.group(1), params))
    return out


def final_answer(text: str) -> str:
    t = text.split("</think>")[-1]
    return t.replace("<|im_end|>", "").strip()


def contains_value(text: str, value: str) -> bool:
    """value as a whole word or number: "-3" is found in "it is -3 degrees", "3" is not, nor is
    "Gal" in "Galton" (a plain \\b would reject the first: no boundary between " " and "-")."""
    return re.search(r"(?<![\w-])" + re.escape(value) + r"(?!\w)", text) is not None


def score(sample, text: str) -> bool:
    ans = final_answer(text)
    if sample.kind == "arith":
        nums = re.findall(r"=\s*(-?\d+)", ans)
        return bool(nums) and nums[-1] == sample.meta["answer"]
    if sample.kind in ("fact", "context"):
        return contains_value(ans, sample.meta["answer"])
    if sample.kind == "tool_call":
        calls = parse_tool_calls(text.split("</think>")[-1])
        return len(calls) == 1 and calls[0][0] == sample.meta["name"] and \
            calls[0][1] == {k: str(v) for k, v in sample.meta["args"].items()}
    if sample.kind == "tool_answer":
        return all(contains_value(ans, f) for f in sample.meta["facts"])
    if sample.kind == "passkey":
        return contains_value(ans, sample.meta["answer"])
    raise ValueError(sample.kind)


@torch.no_grad()
def greedy(model, ids, max_new=96):
    caches = [{} for _ in model.layers]
    h = model.hidden(torch.tensor([ids]), caches=caches)
    out = []
    pos = len(ids)
    for _ in range(max_new):
        nxt = int(model.logits(h[:, -1]).argmax(-1))
        out.append(nxt)
        if nxt == IM_END:
            break
        h = model.hidden(torch.tensor([[nxt]]), caches=caches, pos0=pos)
        pos += 1
    return out


@torch.no_grad()
def mtp_accept(model, prompt, completion, n_draft=3):
    """Simulated speculative decoding over a greedy completion: per step, the drafts come from the
    MTP chain at the last verified position t; accepted = matching prefix of the greedy tokens."""
    full = prompt + completion
    x = torch.tensor([full])
    H = model.hidden(x)                                         # [1, N, H] pre-norm
    W = model.c.window
    steps, total = 0, 0
    t = len(prompt) - 1                                         # h[t] produced x[t+1] = completion[0]
    n = len(full)
    while t + 1 < n - 1:
        drafts = []
        z = full[:t + 2]                                        # verified tokens x[0..t+1]
        for k in range(n_draft):
            zz = z + drafts
            lo = max(0, t - W + 1)
            emb = torch.tensor([[zz[p + k + 1] for p in range(lo, t + 1)]])
            y = model.mtp_hidden(k, emb, H[:, lo:t + 1], pos0=lo)
            drafts.append(int(model.lm_head(y[:, -1]).argmax(-1)))
        acc = 0
        for j, d in enumerate(drafts):
            if t + 2 + j < n and full[t + 2 + j] == d:
                acc += 1
            else:
                break
        steps += 1
        total += acc + 1
        t += acc + 1
    return steps, total


def build_eval(n_per_kind, used):
    tk, r, w = toklib.Tokenizer(), data.Renderer(), data.World()
    def encode(s):
        if "_ids" not in s.meta:
            s.meta["_ids"] = (tk.encode(data.prompt_text(r, s)), tk.encode(s.completion + "<|im_end|>"))
        return s.meta["_ids"]

    def accept(s):
        p, c = encode(s)
        return used is None or (set(p) <= used["in"] and set(c) <= used["out"])

    items = [(s,) + encode(s) for s in data.eval_set(w, n_per_kind=n_per_kind, accept=accept)]
    return tk, items


PASSKEY_LENGTHS = (500, 1000, 2000, 4000)
PASSKEY_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def passkey_items(tk, r, seed=777):
    """Pass-key prompts as `mimo bench niah` sends them, one per (length, depth), thinking on and
    off alternately; keys from their own seed."""
    rng = __import__("random").Random(seed)
    items = []
    for n in PASSKEY_LENGTHS:
        for d in PASSKEY_DEPTHS:
            s = data.passkey_sample(rng, data.passkey_chars(n), len(items) % 2 == 0, depth=d)
            items.append((s, tk.encode(data.prompt_text(r, s)), None))
    return items


def shipped_heldout(n_per_kind):
    """The held-out samples with the shipped model's used-token filter (the prompts written for
    `mimo bench serve` and `mimo bench eval`)."""
    with open(os.path.join(REPO, "models", "mimo-v2-nano", "nano_used_tokens.json")) as f:
        u = json.load(f)
    _, items = build_eval(n_per_kind, {"in": set(u["input_ids"]), "out": set(u["output_ids"])})
    return [s for s, _, _ in items]


def evaluate(model_dir, n_per_kind=40, mtp_samples=40, log=print, passkey=True):
    torch.set_num_threads(1)
    model, cfg = nano_io.load_model(model_dir)
    used = None
    up = os.path.join(model_dir, "nano_used_tokens.json")
    if os.path.exists(up):
        with open(up) as f:
            u = json.load(f)
        used = {"in": set(u["input_ids"]), "out": set(u["output_ids"])}
    tk, items = build_eval(n_per_kind, used)
    if passkey:
        items += passkey_items(tk, data.Renderer())
    res = {}
    gen = []
    t0 = time.time()
    for s, p, c in items:
        out = greedy(model, p)
        text = tk.decode(out)
        ok = score(s, text)
        res.setdefault(s.kind, []).append(ok)
        gen.append((p, out))
        if not ok:
            log(f"MISS [{s.kind}] {s.messages[-1]['content'][:80]!r} -> {text[:160]!r}")
    steps = total = 0
    gen = gen[:len(gen) - len(res.get("passkey", []))]  # MTP acceptance on the chat tasks, as before
    for p, out in gen[:: max(1, len(gen) // max(1, mtp_samples))][:mtp_samples]:
        a, b = mtp_accept(model, p, out)
        steps += a
        total += b
    summary = {k: f"{sum(v)}/{len(v)} = {sum(v) / len(v):.3f}" for k, v in sorted(res.items())}
    af = res.get("arith", []) + res.get("fact", []) + res.get("context", [])
    summary["arith+fact+context accuracy"] = round(sum(af) / max(1, len(af)), 4)
    tc = res.get("tool_call", [])
    summary["tool_call parse+args accuracy"] = round(sum(tc) / max(1, len(tc)), 4)
    summary["mtp mean accept length (3 drafts)"] = round(total / max(1, steps), 3)
    summary["eval seconds"] = round(time.time() - t0, 1)
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models", "mimo-v2-nano"))
    ap.add_argument("--n-per-kind", type=int, default=40)
    ap.add_argument("--mtp-samples", type=int, default=40)
    ap.add_argument("--json", default=None)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every number equals the model's shipped nano_eval.json "
                         "(the README's; run when the model or scripts/nano change: ~2.5 min)")
    a = ap.parse_args()
    s = evaluate(a.model, a.n_per_kind, a.mtp_samples)
    for k, v in s.items():
        print(f"{k}: {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    if a.check:
        with open(os.path.join(a.model, "nano_eval.json")) as f:
            shipped = json.load(f)
        bad = [(k, s.get(k), v) for k, v in shipped.items() if k != "eval seconds" and s.get(k) != v]
        for k, got, want in bad:
            print(f"MISMATCH {k}: got {got}, shipped {want}")
        if bad:
            raise SystemExit(1)
        print("matches the shipped nano_eval.json")


if __name__ == "__main__":
    main()
