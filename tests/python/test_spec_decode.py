"""MTP speculative decoding end to end: on generated checkpoints (random weights, full draft
vocabulary) greedy outputs and their logprobs are identical with and without drafting, for every
draft depth, alone and in a batch, with block sizes that put block boundaries and the 8-key
window edge inside the drafts, over penalised, logit-biased, min_tokens and stop-token requests;
and through the server, streamed chats on the default model (one penalised) are the same with
MTP on and off while /metrics counts the drafts."""
import json
import os
import re
import subprocess
import time
import urllib.request

import numpy as np
import pytest
from local_server import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NANO = os.path.join(REPO, "models", "mimo-v2-nano")


def requests(vocab, n=12):
    """Greedy requests; three in four carry an option every verify row must apply as plain
    decoding does: penalties (counting the drafts accepted before the row), a logit bias,
    min_tokens with stop token ids (which then cut inside verified runs)."""
    rng = np.random.default_rng(11)
    shared = rng.integers(0, vocab, 24).tolist()
    out = []
    for i in range(n):
        ids = rng.integers(0, vocab, [3, 9, 20, 45, 70][i % 5]).tolist()
        if i % 3 == 0:
            ids = shared + ids
        r = {"id": i, "prompt_ids": ids, "max_tokens": 10 + 2 * i, "logprobs": 0,
             "ignore_eos": True}
        if i % 4 == 1:
            r.update(frequency_penalty=1.5, presence_penalty=0.5)
        elif i % 4 == 2:
            r.update(repetition_penalty=1.8)
        elif i % 4 == 3:
            picks = rng.integers(0, vocab, 3).tolist()
            r.update(logit_bias={str(picks[0]): 2.0, str(picks[1]): -100.0}, min_tokens=4,
                     stop_token_ids=[picks[2]], frequency_penalty=0.8)
        out.append(r)
    return out


def generate(mimo_bin, model, reqs, tmp_path, name, *flags):
    src, dst = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.out"
    src.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    p = subprocess.run([mimo_bin, "generate", "--model", model, "--requests", str(src), "--out",
                        str(dst), "--threads", "2", *flags], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return {l["id"]: (l["output_ids"], [t["logprob"] for t in l["logprobs"]])
            for l in map(json.loads, dst.read_text().splitlines())}


@pytest.mark.parametrize("variant", ["bf16", "fp8", "fp8-fused", "f32"])
def test_greedy_outputs_identical_with_mtp(mimo_bin, checkpoint, tmp_path, variant):
    model = checkpoint(variant)
    cfg = json.load(open(os.path.join(model, "config.json")))
    mtp_layers = len({n.split(".")[3] for n in _tensor_names(model) if n.startswith("model.mtp.")})
    assert mtp_layers >= 1
    reqs = requests(cfg["vocab_size"])
    for block in ["16", "4"]:
        plain = generate(mimo_bin, model, reqs, tmp_path, f"plain{block}", "--block-size", block)
        for k in sorted({1, mtp_layers}):
            got = generate(mimo_bin, model, reqs, tmp_path, f"mtp{block}-{k}", "--block-size", block,
                           "--speculative", "mtp", "--num-speculative-tokens", str(k))
            assert got == plain, (variant, block, k)
    # One request alone with the deepest drafting equals its batched output (same block size: it
    # sets where the attention's online softmax rescales).
    alone = generate(mimo_bin, model, reqs[4:5], tmp_path, "alone", "--block-size", "4",
                     "--speculative", "mtp", "--num-speculative-tokens", str(mtp_layers))
    assert alone[4] == plain[4]


@pytest.mark.parametrize("variant", ["bf16", "fp8", "v2.5-pro"])
def test_greedy_outputs_identical_with_dflash(mimo_bin, checkpoint, tmp_path, variant):
    """DFlash (random drafter: its drafts are rejected, so this checks the rollback, the
    one-token-per-step path and the feature bookkeeping, not acceptance): the same requests,
    batched (a shared prefix served from the prefix cache), at 7 and 2 drafts, and one alone."""
    model = checkpoint(variant)
    cfg = json.load(open(os.path.join(model, "config.json")))
    reqs = requests(cfg["vocab_size"])
    plain = generate(mimo_bin, model, reqs, tmp_path, "plain", "--block-size", "4")
    for k in ["7", "2"]:
        got = generate(mimo_bin, model, reqs, tmp_path, f"dflash{k}", "--block-size", "4",
                       "--speculative", "dflash", "--num-speculative-tokens", k)
        assert got == plain, (variant, k)
    alone = generate(mimo_bin, model, reqs[4:5], tmp_path, "alone", "--block-size", "4",
                     "--speculative", "dflash")
    assert alone[4] == plain[4]


def test_prompts_shorter_than_the_draft_depth(mimo_bin, tmp_path):
    """1- and 2-token prompts with 3 MTP layers (the deepest layer has no position of its own
    yet; it used to rewind its cache to position -1 and abort the process)."""
    reqs = [{"id": n, "prompt_ids": list(range(100, 100 + n)), "max_tokens": 12, "logprobs": 0,
             "ignore_eos": True} for n in (1, 2, 3)]
    plain = generate(mimo_bin, NANO, reqs, tmp_path, "short-plain")
    spec = generate(mimo_bin, NANO, reqs, tmp_path, "short-mtp", "--speculative", "mtp",
                    "--num-speculative-tokens", "3")
    assert spec == plain


def _tensor_names(model):
    names = []
    for f in os.listdir(model):
        if f.endswith(".safetensors"):
            with open(os.path.join(model, f), "rb") as fh:
                n = int.from_bytes(fh.read(8), "little")
                names += [k for k in json.loads(fh.read(n)) if k != "__metadata__"]
    return names


class Server:
    def __init__(self, mimo_bin, *flags):
        self.port = free_port()
        self.proc = subprocess.Popen([mimo_bin, "serve", "--model", NANO, "--port", str(self.port),
                                      "--threads", "2", *flags], stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                time.sleep(0.2)
        self.close()
        raise RuntimeError("server did not become healthy")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def stream_chat(self, body):
        req = urllib.request.Request(self.url("/v1/chat/completions"),
                                     data=json.dumps(dict(body, stream=True)).encode(),
                                     headers={"Content-Type": "application/json"})
        content, reasoning, chunks = "", "", 0
        with urllib.request.urlopen(req, timeout=300) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for c in json.loads(line[6:])["choices"]:
                    content += c["delta"].get("content") or ""
                    reasoning += c["delta"].get("reasoning_content") or ""
                chunks += 1
        return content, reasoning, chunks

    def metrics(self):
        with urllib.request.urlopen(self.url("/metrics"), timeout=10) as r:
            return r.read().decode()

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def test_streamed_chat_with_mtp_equals_without(mimo_bin):
    assert os.path.isdir(NANO), "models/mimo-v2-nano missing: run scripts/setup.sh"
    bodies = [{"messages": [{"role": "user", "content": q}], "temperature": 0, "max_tokens": 120,
               "chat_template_kwargs": {"enable_thinking": think}}
              for q, think in [("What is 27 + 15?", True), ("Where does Venlo live?", False),
                               ("What is Pelden's job?", True)]]
    bodies.append({"messages": [{"role": "user", "content": "Spell the word garden."}],
                   "temperature": 0, "max_tokens": 60, "frequency_penalty": 1.5,
                   "presence_penalty": 1.0, "stop": ["zz"],
                   "chat_template_kwargs": {"enable_thinking": False}})
    plain = Server(mimo_bin)
    try:
        want = [plain.stream_chat(b)[:2] for b in bodies]
    finally:
        plain.close()
    spec = Server(mimo_bin, "--speculative", "mtp", "--num-speculative-tokens", "3",
                  "--speculative-draft-vocab", os.path.join(NANO, "nano_used_tokens.json"))
    try:
        got = [spec.stream_chat(b) for b in bodies]
        m = spec.metrics()
    finally:
        spec.close()
    assert [g[:2] for g in got] == want
    assert all(w[0] for w in want)  # non-empty answers
    drafts = float(re.search(r"^mimo:spec_decode_num_drafts_total\{[^}]*\} (\S+)", m, re.M).group(1))
    accepted = float(re.search(r"^mimo:spec_decode_num_accepted_tokens_total\{[^}]*\} (\S+)", m,
                               re.M).group(1))
    assert drafts > 0 and accepted / drafts > 1.0, m  # > 2 tokens per verify step on average
