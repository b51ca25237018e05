"""Writes the default model's held-out arithmetic questions (evaluate.py's set: data.eval_set,
seed 777, the same filter on tokens the model has seen) in gsm8k's JSONL format, the built-in
dataset of `mimo bench eval`: {"question": ..., "answer": "<the model's answer sentence>\\n#### N"}.

  /usr/bin/python3 scripts/nano/eval_dataset.py [--n 100] > scripts/demo/nano_arith_eval.jsonl
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from evaluate import shipped_heldout  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100)
    a = ap.parse_args()
    for s in shipped_heldout(a.n):
        if s.kind != "arith" or len(s.messages) != 1 or s.messages[0]["role"] != "user":
            continue
        answer = s.completion.split("</think>")[-1].strip()
        print(json.dumps({"question": s.messages[0]["content"],
                          "answer": f"{answer}\n#### {s.meta['answer']}"}))


if __name__ == "__main__":
    main()
