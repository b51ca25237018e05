"""Structured outputs end to end on a generated checkpoint with random weights (the hardest case:
the model has no idea what JSON is). Sampled completions per schema of tests/data/schemas
(through `mimo generate --requests` with a per-line json_schema) all parse, validate with the
independent python3-jsonschema validator, and end by themselves with finish_reason stop (the
grammar reaching its end ends the output, steered to close in time near max_tokens). Through the server, forced (required, named) and
strict tool calls on random weights (over the full vocabulary, so chat prompts fit) always parse with the mimo tool parser into a known function
whose arguments validate, streamed and not. The model's 512-row vocabulary is the first 512 ids
of the real Qwen tokenizer (single bytes and the first merges), so every grammar can finish."""
import glob
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import jsonschema
import pytest

from local_server import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMAS = sorted(glob.glob(os.path.join(REPO, "tests", "data", "schemas", "*.json")))
TOOLS = os.path.join(REPO, "tests", "data", "schemas", "tools", "tools.json")


@pytest.fixture(scope="module")
def random_model(checkpoint, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("random-model"))
    src = checkpoint("bf16")
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), d)
    nano = os.path.join(REPO, "models", "mimo-v2-nano")
    for f in ["tokenizer.json", "tokenizer_config.json"]:  # Qwen vocabulary + the chat template
        shutil.copy(os.path.join(nano, f), d)
    return d


@pytest.fixture(scope="module")
def full_vocab_model(checkpoint, tmp_path_factory):
    """Random weights over the whole 151680-token vocabulary (the e2e variant), so that chat
    prompts (special tokens included) fit; with the nano model's tokenizer and chat template."""
    d = str(tmp_path_factory.mktemp("full-vocab-model"))
    src = checkpoint("e2e")
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), d)
    nano = os.path.join(REPO, "models", "mimo-v2-nano")
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
        shutil.copy(os.path.join(nano, f), d)
    return d


def validator(schema):
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_schema_suite_is_large_enough():
    assert len(SCHEMAS) >= 20


# Samples per schema: 200 (about 80 s on 2 cores); MIMO_STRUCTURED_SAMPLES=N for a quicker run.
SAMPLES = int(os.environ.get("MIMO_STRUCTURED_SAMPLES", "200"))


def test_sampled_completions_per_schema_validate(mimo_bin, random_model, tmp_path):
    lines = []
    n = min(SAMPLES, 50)
    for si, path in enumerate(SCHEMAS):
        schema = json.load(open(path))
        for k in range(SAMPLES // n):
            lines.append({"id": f"{si}-{k}", "prompt_ids": [1, 2, 3 + si, 4 + k], "n": n,
                          "temperature": 1.0, "seed": 1000 * si + k, "max_tokens": 160,
                          "json_schema": schema})
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(l) + "\n" for l in lines))
    p = subprocess.run([mimo_bin, "generate", "--model", random_model, "--requests", str(src),
                        "--out", str(dst), "--threads", "2", "--max-num-seqs", "64",
                        "--grammar-max-string-length", "24"],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr
    outs = [json.loads(x) for x in dst.read_text().splitlines()]
    assert len(outs) == len(SCHEMAS) * (SAMPLES // n) * n
    bad = []
    for o in outs:
        schema = json.load(open(SCHEMAS[int(o["id"].split("-")[0])]))
        if o["finish_reason"] != "stop":
            bad.append((o["id"], o.get("index"), "finish " + o["finish_reason"], o["text"][:80]))
            continue
        try:
            validator(schema).validate(json.loads(o["text"]))
        except Exception as e:  # noqa: BLE001 - any parse or validation failure is reported
            bad.append((o["id"], o.get("index"), str(e)[:120], o["text"][:120]))
    assert not bad, bad[:10]


def _post(port, body, stream=False):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(dict(body, stream=stream)).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        if not stream:
            return json.loads(r.read())["choices"][0]
        calls, finish = {}, None
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for c in json.loads(line[6:])["choices"]:
                for d in c["delta"].get("tool_calls") or []:
                    call = calls.setdefault(d["index"], {"name": "", "arguments": ""})
                    if d.get("function", {}).get("name"):
                        call["name"] = d["function"]["name"]
                    call["arguments"] += d.get("function", {}).get("arguments", "")
                finish = c.get("finish_reason") or finish
        return {"message": {"tool_calls": [{"function": v} for _, v in sorted(calls.items())]},
                "finish_reason": finish}


def test_forced_and_strict_tool_calls_always_parse(mimo_bin, full_vocab_model):
    tools = json.load(open(TOOLS))
    # A tool without "parameters" (ping) takes no arguments: "{}".
    params = {t["function"]["name"]: t["function"].get("parameters", {"type": "object",
                                                                     "maxProperties": 0})
              for t in tools}
    strict_tools = [t for t in tools if t["function"].get("strict")]
    port = free_port()
    proc = subprocess.Popen([mimo_bin, "serve", "--model", full_vocab_model, "--port", str(port),
                             "--threads", "2", "--grammar-max-string-length", "24"],
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.2)
        cases = []
        for i in range(8):
            # Thinking off: with it on the call is constrained only after </think>, which random
            # weights never write.
            base = {"messages": [{"role": "user", "content": f"call something {i}"}],
                    "temperature": 1.0, "seed": i, "max_tokens": 600,
                    "chat_template_kwargs": {"enable_thinking": False}}
            cases.append((dict(base, tools=tools, tool_choice="required"), None, True))
            name = tools[i % len(tools)]["function"]["name"]
            cases.append((dict(base, tools=tools,
                               tool_choice={"type": "function", "function": {"name": name}}),
                          name, True))
            cases.append((dict(base, tools=strict_tools, tool_choice="auto"), None, False))
        called = 0
        for body, want_name, must_call in cases:
            for stream in (False, True):
                choice = _post(port, body, stream)
                calls = choice["message"].get("tool_calls") or []
                assert calls or not must_call, (body["tool_choice"], choice)
                for c in calls:
                    fn = c["function"]
                    assert fn["name"] in params, fn
                    if want_name:
                        assert fn["name"] == want_name
                    validator(params[fn["name"]]).validate(json.loads(fn["arguments"]))
                    called += 1
                if calls:
                    assert choice["finish_reason"] == "tool_calls"
        assert called >= 32
    finally:
        proc.terminate()
        proc.wait(timeout=60)
