"""`mimo chat` tool loop (tools/cli/chat.cc) on the shipped nano model, greedy: the model answers a
weather question with a `mimo` tool call, the CLI parses it, runs --tool-exec with the call's JSON
on stdin, feeds the executor's output back as a tool message, and the model answers from it.

The executor is this test's own fake (it logs what it was given and returns a result chosen here),
so the checks are independent of the engine: the call the executor receives, the parsed call in the
transcript, and a final answer that repeats the values only the fake tool knew; a second run with a
different tool result must change the answer accordingly (the result really reached the model).
"""
import json
import os
import subprocess
import sys

import pytest

from prereq import require_file

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NANO = os.path.join(REPO, "models", "mimo-v2-nano")
TOOLS = os.path.join(REPO, "scripts", "demo", "tools.json")

FAKE_TOOL = """
import json, sys
call = json.load(sys.stdin)
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(call) + "\\n")
print(json.dumps(json.loads(sys.argv[2])))
"""


def chat(mimo_bin, tmp_path, result, tag):
    require_file(NANO, "run scripts/setup.sh")
    require_file(mimo_bin, "build it or set MIMO_BIN")
    tool = tmp_path / "fake_tool.py"
    tool.write_text(FAKE_TOOL)
    log = tmp_path / f"calls-{tag}.jsonl"
    cmd = f"{sys.executable} {tool} {log} '{json.dumps(result)}'"
    p = subprocess.run([mimo_bin, "chat", "--model", NANO, "--threads", "2", "--tools", TOOLS,
                        "--tool-exec", cmd, "--message", "What is the weather in Fenwick?",
                        "--max-tokens", "96", "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    calls = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return json.loads(p.stdout), calls


@pytest.mark.parametrize("result", [
    {"city": "Fenwick", "temperature": 23, "condition": "foggy"},
    {"city": "Fenwick", "temperature": -4, "condition": "snowy"},
], ids=["foggy", "snowy"])
def test_tool_call_round_trip(mimo_bin, tmp_path, result):
    transcript, calls = chat(mimo_bin, tmp_path, result, result["condition"])
    # Turn 1: a parsed call, no leftover markup in the content.
    assert len(transcript) == 2, transcript
    first, second = transcript
    assert [c["function"]["name"] for c in first["tool_calls"]] == ["get_weather"], first
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"city": "Fenwick"}
    assert first["tool_calls"][0]["id"].startswith("call_")
    assert "<tool_call>" not in (first["content"] or "")
    # The executor got exactly that call once.
    assert calls == [{"name": "get_weather", "arguments": {"city": "Fenwick"}}]
    # Turn 2: a plain answer built from the tool's result.
    assert second["tool_calls"] == [] and second["content"], second
    answer = second["content"]
    assert str(result["temperature"]) in answer and result["condition"] in answer, answer
