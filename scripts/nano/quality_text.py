#!/usr/bin/env python3
"""The default model's quality sets (`mimo bench quality`, issue 28): each held-out chat of
scripts/demo/nano_heldout.jsonl rendered with the model's chat template, followed by the BF16
model's own greedy answer and <|im_end|>. Written twice: as {"prompt", "completion"} lines
(scripts/demo/nano_quality.jsonl, for --dataset: only the answers are scored) and as one text, the
chats one after another (scripts/demo/nano_quality.txt, for --text and llama-perplexity). A
quantized model is then scored on the conversations its reference really holds (its demo
abilities), not on text it never saw.

usage: /usr/bin/python3 scripts/nano/quality_text.py [--mimo build/bin/mimo]
"""
import argparse
import json
import os
import subprocess
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mimo", default=os.path.join(REPO, "build", "bin", "mimo"))
    ap.add_argument("--model", default=os.path.join(REPO, "models", "mimo-v2-nano"))
    ap.add_argument("--dataset", default=os.path.join(REPO, "scripts", "demo", "nano_heldout.jsonl"))
    ap.add_argument("--out", default=os.path.join(REPO, "scripts", "demo", "nano_quality"))
    ap.add_argument("--max-tokens", type=int, default=200)
    args = ap.parse_args()
    items = [json.loads(l) for l in open(args.dataset) if l.strip()]
    with tempfile.TemporaryDirectory() as td:
        prompts = []
        for i, it in enumerate(items):
            m = os.path.join(td, f"m{i}.json")
            json.dump(it["messages"], open(m, "w"))
            cmd = [args.mimo, "render", "--model", args.model, "--messages", m]
            if it.get("tools"):
                t = os.path.join(td, f"t{i}.json")
                json.dump(it["tools"], open(t, "w"))
                cmd += ["--tools", t]
            cmd += ["--kwargs", json.dumps(it.get("chat_template_kwargs", {}))]
            prompts.append(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        req = os.path.join(td, "req.jsonl")
        with open(req, "w") as f:
            for p in prompts:
                f.write(json.dumps({"prompt": p, "max_tokens": args.max_tokens}) + "\n")
        out = os.path.join(td, "out.jsonl")
        subprocess.run([args.mimo, "generate", "--model", args.model, "--requests", req, "--out",
                        out, "--threads", "2"], check=True, capture_output=True)
        answers = [json.loads(l)["text"] for l in open(out) if l.strip()]
    with open(args.out + ".txt", "w") as f:
        for p, a in zip(prompts, answers):
            f.write(p + a + "<|im_end|>\n")
    with open(args.out + ".jsonl", "w") as f:
        for p, a in zip(prompts, answers):
            f.write(json.dumps({"prompt": p, "completion": a + "<|im_end|>"}) + "\n")
    print(f"wrote {args.out}.txt and .jsonl: {len(prompts)} chats")


if __name__ == "__main__":
    main()
