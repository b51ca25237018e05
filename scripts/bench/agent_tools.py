#!/usr/bin/python3
"""Writes the tool sets of the recorded agent requests (tests/data/agents/*.json) as OpenAI chat
`tools` arrays, one file per recording that has tools, for `mimo bench grammar --tools`:

    /usr/bin/python3 scripts/bench/agent_tools.py OUTDIR [RECORDING.json ...]

The tools are converted as the server converts them before it builds the tool-call constraint:
Anthropic tools {name, description, input_schema} as functions; chat completions' functions as
they are; Responses' function tools as they are, a namespace's functions flattened, a custom
tool as a function of one free-form string `input`; the built-in tools the server leaves out
(web_search, tool_search) are left out here too. Prints one line per file written."""
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def function(name, description, parameters):
    fn = {"name": name, "parameters": parameters}
    if description is not None:
        fn["description"] = description
    return {"type": "function", "function": fn}


def responses_tool(t, out):
    kind = t.get("type")
    if kind == "function":
        out.append(function(t["name"], t.get("description"), t.get("parameters")))
    elif kind == "namespace":
        for inner in t["tools"]:
            responses_tool(inner, out)
    elif kind == "custom":
        out.append(function(t["name"], t.get("description", ""), {
            "type": "object",
            "properties": {"input": {"type": "string"}},
            "required": ["input"]}))


def chat_tools(path, body):
    out = []
    for t in body.get("tools") or []:
        if path.startswith("/v1/messages"):
            if t.get("type") in (None, "custom"):
                out.append(function(t["name"], t.get("description"),
                                    t.get("input_schema") or {"type": "object"}))
        elif path.startswith("/v1/responses"):
            responses_tool(t, out)
        elif t.get("type") == "function":
            out.append(t)
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    recordings = sys.argv[2:] or sorted(glob.glob(os.path.join(ROOT, "tests/data/agents/*.json")))
    os.makedirs(outdir, exist_ok=True)
    for rec in recordings:
        with open(rec) as f:
            r = json.load(f)
        tools = chat_tools(r["path"], r["body"])
        if not tools:
            continue
        dst = os.path.join(outdir, os.path.basename(rec))
        with open(dst, "w") as f:
            json.dump(tools, f)
        print(f"{dst}: {len(tools)} tools")


if __name__ == "__main__":
    main()
