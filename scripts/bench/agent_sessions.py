#!/usr/bin/python3
"""Multi-turn agent sessions for `mimo bench serve --sessions`, built from the recorded requests.

Each session starts from an agent's recorded first request (its real system prompt and tools,
tests/data/agents/) and adds turns the way the agent's log grows: the assistant calls the agent's
file-reading tool, the tool result (200-3000 tokens of this repository's sources, numbered the way
the agent shows them) comes back, and the next request is the previous one plus those two items.
The turns are fixed text, so every server sees the same requests whatever its model answers.

Output, one file per agent under OUTDIR (default tests/data/agents/sessions):
  {"agent", "source", "path", "headers", "key": "messages" | "input", "body": the last turn's
   request, "turns": [number of items of body[key] each turn sends, ...]}

Usage: /usr/bin/python3 scripts/bench/agent_sessions.py [OUTDIR]
"""
import json
import os
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENTS = os.path.join(ROOT, "tests", "data", "agents")

# Tool-result sizes in tokens (~3.6 characters each for this source text), turn by turn.
SIZES = [200, 3000, 800, 1500, 400, 2500, 1000, 600, 2000]
FILES = ["src/kv/block_pool.cc", "src/kv/kv_cache_manager.cc", "src/kv/single_type_kv_manager.h",
         "src/engine/scheduler.cc", "src/kv/kv_memory_plan.h", "src/kv/paged_kv_attention.cc",
         "src/kv/kv_storage.cc", "src/kv/feature_cache.h", "src/engine/engine.h"]
CHARS_PER_TOKEN = 3.6


def excerpt(path, tokens):
    """The first lines of a file, about `tokens` tokens long, as (first line, last line, text)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    out, n = [], 0
    for line in lines:
        if n + len(line) + 1 > tokens * CHARS_PER_TOKEN and out:
            break
        out.append(line)
        n += len(line) + 1
    return out


def claude_code():
    rec = json.load(open(os.path.join(AGENTS, "claude-code-01-first.json")))
    body = rec["body"]
    msgs = body["messages"]
    turns = [len(msgs)]
    for i, (size, path) in enumerate(zip(SIZES, FILES)):
        lines = excerpt(path, size)
        call = f"toolu_{i:02d}{zlib.crc32(path.encode()) % 10**16:016d}"[:26]
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": f"I'll read {path} to see how it works."},
            {"type": "tool_use", "id": call, "name": "Read",
             "input": {"file_path": f"/work/repo/{path}"}}]})
        numbered = "\n".join(f"{n + 1:6d}\t{t}" for n, t in enumerate(lines))
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call, "content": numbered}]})
        turns.append(len(msgs))
    return rec, "messages", turns


def codex():
    rec = json.load(open(os.path.join(AGENTS, "codex-01-first.json")))
    items = rec["body"]["input"]
    turns = [len(items)]
    for i, (size, path) in enumerate(zip(SIZES, FILES)):
        lines = excerpt(path, size)
        call = f"call_{i:02d}{zlib.crc32(path.encode()) % 10**20:020d}"[:29]
        cmd = f"sed -n '1,{len(lines)}p' {path}"
        items.append({"type": "function_call", "name": "exec_command",
                      "arguments": json.dumps({"cmd": cmd}), "call_id": call})
        text = "\n".join(lines)
        items.append({"type": "function_call_output", "call_id": call,
                      "output": f"Chunk ID: {i:06x}\nWall time: 0.0100 seconds\nProcess exited "
                                f"with code 0\nOriginal token count: {size}\nOutput:\n{text}\n"})
        turns.append(len(items))
    return rec, "input", turns


def opencode():
    rec = json.load(open(os.path.join(AGENTS, "opencode-02-tool-result.json")))
    msgs = rec["body"]["messages"]
    turns = [len(msgs)]
    for i, (size, path) in enumerate(zip(SIZES, FILES)):
        lines = excerpt(path, size)
        call = f"call_{i:02d}{zlib.crc32(path.encode()) % 10**22:022d}"[:29]
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": "read",
                          "arguments": json.dumps({"filePath": f"/work/repo/{path}"})}}]})
        numbered = "\n".join(f"{n + 1:05d}| {t}" for n, t in enumerate(lines))
        msgs.append({"role": "tool", "tool_call_id": call,
                     "content": f"<file>\n{numbered}\n</file>"})
        turns.append(len(msgs))
    return rec, "messages", turns


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(AGENTS, "sessions")
    os.makedirs(outdir, exist_ok=True)
    for name, build in [("claude-code", claude_code), ("codex", codex), ("opencode", opencode)]:
        rec, key, turns = build()
        path, _, _ = rec["path"].partition("?")
        body = rec["body"]
        body.pop("stream", None)
        body.pop("stream_options", None)
        out = {"agent": name, "source": build.__name__, "path": path,
               "headers": {k: v for k, v in rec["headers"].items()
                           if k.startswith("anthropic-") or k == "openai-beta"},
               "key": key, "body": body, "turns": turns}
        with open(os.path.join(outdir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=0)
            f.write("\n")
        print(f"{name}: {len(turns)} turns, {len(json.dumps(body)) // 1024} KiB")


if __name__ == "__main__":
    main()
