"""Writes the default model's held-out prompts (evaluate.py's set: data.eval_set, seed 777, the
same filter on tokens the model has seen) as a `mimo bench serve --dataset` JSONL file: one chat
request per line, with its tools and its thinking switch, tool-call arguments as JSON strings as
the OpenAI API sends them.

  /usr/bin/python3 scripts/nano/heldout_prompts.py [--n-per-kind 10] > scripts/demo/nano_heldout.jsonl
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
    ap.add_argument("--n-per-kind", type=int, default=10)
    a = ap.parse_args()
    for s in shipped_heldout(a.n_per_kind):
        msgs, n = [], 0
        for m in s.messages:
            m = dict(m)
            if m.get("tool_calls"):
                calls = []
                for c in m["tool_calls"]:
                    n += 1
                    f = dict(c["function"], arguments=json.dumps(c["function"]["arguments"]))
                    calls.append({"id": f"call_{n}", "type": "function", "function": f})
                m["tool_calls"] = calls
            if m["role"] == "tool":
                m["tool_call_id"] = f"call_{n}"
            msgs.append(m)
        line = {"messages": msgs, "chat_template_kwargs": {"enable_thinking": s.thinking}}
        if s.tools:
            line["tools"] = s.tools
        print(json.dumps(line))


if __name__ == "__main__":
    main()
