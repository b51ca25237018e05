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
from nano_chat import nano_chat_ids

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


def generate(mimo_bin, model, reqs, tmp_path, name, *flags, stderr=None):
    src, dst = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.out"
    src.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    p = subprocess.run([mimo_bin, "generate", "--model", model, "--requests", str(src), "--out",
                        str(dst), "--threads", "2", *flags], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    if stderr is not None:
        stderr.append(p.stderr)
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


def test_trained_dflash_batched_greedy_equals_plain(mimo_bin, tmp_path):
    """The default model with its trained drafter (drafts accepted, so bursts of up to 8 tokens
    are committed, rolled back and appended to the draft context), 6 chat prompts batched, some
    sharing a prefix (a prefix-cache hit rebuilds the draft context from recomputed features):
    the same tokens and logprobs as plain decoding, and the drafts accepted; then under
    preemption."""
    assert os.path.isdir(os.path.join(NANO, "dflash")), "the nano drafter: run scripts/setup.sh"
    qs = ["What is 27 + 15?", "Where does Venlo live?", "What is 31 - 17?", "Spell the word garden.",
          "What is Pelden's job?", "What is 27 + 15?"]
    reqs = [{"id": i, "prompt_ids": nano_chat_ids(mimo_bin, tmp_path, q, i % 2 == 0),
             "max_tokens": 80, "logprobs": 0} for i, q in enumerate(qs)]
    plain = generate(mimo_bin, NANO, reqs, tmp_path, "nano-plain", "--max-num-seqs", "6")
    log = []
    spec = generate(mimo_bin, NANO, reqs, tmp_path, "nano-dflash", "--max-num-seqs", "6",
                    "--speculative", "dflash", "--speculative-draft-vocab",
                    os.path.join(NANO, "nano_used_tokens.json"), stderr=log)
    assert spec == plain
    assert all(len(plain[i][0]) > 8 for i in plain)
    m = re.search(r"speculative: (\d+) verify steps with drafts, (\d+) of (\d+) draft tokens",
                  log[0])
    assert m, log[0]
    steps, accepted = int(m.group(1)), int(m.group(2))
    assert 1 + accepted / steps >= 4.5, log[0]  # 6.4 measured: bursts, not one token per step
    # Chunked prefill and a KV budget of 8 blocks of 16 (the ~400 tokens do not fit): sequences
    # are preempted and recomputed, their draft context rebuilt, with the same result.
    log = []
    small = generate(mimo_bin, NANO, reqs, tmp_path, "nano-dflash-small", "--max-num-seqs", "6",
                     "--max-num-batched-tokens", "16", "--num-kv-blocks", "8",
                     "--speculative", "dflash", "--speculative-draft-vocab",
                     os.path.join(NANO, "nano_used_tokens.json"), stderr=log)
    assert int(re.search(r"(\d+) preemptions", log[0]).group(1)) > 0, log[0]
    assert small == plain


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
        """(content, reasoning, tool calls [(name, arguments JSON)], chunks) of a streamed chat."""
        req = urllib.request.Request(self.url("/v1/chat/completions"),
                                     data=json.dumps(dict(body, stream=True)).encode(),
                                     headers={"Content-Type": "application/json"})
        content, reasoning, chunks, calls = "", "", 0, {}
        with urllib.request.urlopen(req, timeout=300) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for c in json.loads(line[6:])["choices"]:
                    content += c["delta"].get("content") or ""
                    reasoning += c["delta"].get("reasoning_content") or ""
                    for t in c["delta"].get("tool_calls") or []:
                        call = calls.setdefault(t["index"], ["", ""])
                        call[0] += t.get("function", {}).get("name") or ""
                        call[1] += t.get("function", {}).get("arguments") or ""
                chunks += 1
        tool_calls = [(n, json.loads(a)) for n, a in (calls[i] for i in sorted(calls))]
        return content, reasoning, tool_calls, chunks

    def metrics(self):
        with urllib.request.urlopen(self.url("/metrics"), timeout=10) as r:
            return r.read().decode()

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


TOOLS = json.load(open(os.path.join(REPO, "scripts", "demo", "tools.json")))
BODIES = [{"messages": [{"role": "user", "content": q}], "temperature": 0, "max_tokens": 120,
           "chat_template_kwargs": {"enable_thinking": think}}
          for q, think in [("What is 27 + 15?", True), ("Where does Venlo live?", False),
                           ("What is Pelden's job?", True), ("What is 38 - 19?", False)]] + [
    {"messages": [{"role": "user", "content": "Spell the word garden."}], "temperature": 0,
     "max_tokens": 60, "frequency_penalty": 1.5, "presence_penalty": 1.0, "stop": ["zz"],
     "chat_template_kwargs": {"enable_thinking": False}},
    # Tool calls: the tool parser meets whole verified bursts (tags, names, values in one delta).
    {"messages": [{"role": "user", "content": "What is the weather in Fenwick?"}], "tools": TOOLS,
     "temperature": 0, "max_tokens": 96},
    {"messages": [{"role": "user", "content": "Send a message to Oriel saying see you soon."}],
     "tools": TOOLS, "temperature": 0, "max_tokens": 96,
     "chat_template_kwargs": {"enable_thinking": True}},
    # Structured output: the grammar is fed each verified burst token by token.
    {"messages": [{"role": "user", "content": "What is 12 + 9?"}], "temperature": 0,
     "max_tokens": 80, "response_format": {"type": "json_schema", "json_schema": {
         "name": "sum", "schema": {"type": "object", "properties": {"answer": {"type": "integer"}},
                                   "required": ["answer"]}}}},
]


@pytest.fixture(scope="module")
def plain_answers(mimo_bin):
    assert os.path.isdir(NANO), "models/mimo-v2-nano missing: run scripts/setup.sh"
    plain = Server(mimo_bin)
    try:
        want = [plain.stream_chat(b)[:3] for b in BODIES]
    finally:
        plain.close()
    assert all(w[0] or w[2] for w in want)  # every request answered (text or a tool call)
    assert any(w[2] for w in want)          # and at least one tool call among them
    return want


def spec_counters(m):
    """(drafts, accepted tokens, accepted per draft position) from /metrics."""
    def one(name):
        return float(re.search(rf"^{name}\{{[^}}]*\}} (\S+)", m, re.M).group(1))
    per_pos = {int(p): float(v) for p, v in re.findall(
        r'^mimo:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"[^}]*\} (\S+)',
        m, re.M)}
    return (one("mimo:spec_decode_num_drafts_total"),
            one("mimo:spec_decode_num_accepted_tokens_total"),
            [per_pos[i] for i in sorted(per_pos)])


def metric(m, name):
    return float(re.search(rf"^{name}\{{[^}}]*\}} (\S+)", m, re.M).group(1))


def serve_bodies(mimo_bin, *flags):
    """BODIES streamed one after the other by a server started with flags (drafting over the nano
    model's used vocabulary): the answers and the server's /metrics after them."""
    spec = Server(mimo_bin, *flags,
                  "--speculative-draft-vocab", os.path.join(NANO, "nano_used_tokens.json"))
    try:
        got = [spec.stream_chat(b) for b in BODIES]
        return got, spec.metrics()
    finally:
        spec.close()


def test_streamed_chat_with_mtp_equals_without(mimo_bin, plain_answers):
    got, m = serve_bodies(mimo_bin, "--speculative", "mtp", "--num-speculative-tokens", "3")
    assert [g[:3] for g in got] == plain_answers
    drafts, accepted, _ = spec_counters(m)
    assert drafts > 0 and accepted / drafts > 1.0, m  # > 2 tokens per verify step on average
    # The drafter's per-request state lives in the KV cache and goes with the finished requests.
    assert metric(m, "mimo:spec_decode_draft_state_bytes") == 0, m


MIN_MAL = 3.5  # 4.12 measured (73 verify steps); see the test below


def test_streamed_chat_with_trained_dflash_equals_without_and_accepts(mimo_bin, plain_answers):
    """The default model's trained DFlash drafter (models/mimo-v2-nano/dflash): the same streamed
    answers, tool calls and structured outputs as without drafting, and real acceptance - a
    silent collapse to one token per step (a wrong RoPE base, the vocabulary row used as the mask
    embedding, features of the wrong layer or position) fails here, not only in a benchmark."""
    assert os.path.isdir(os.path.join(NANO, "dflash")), "the nano drafter: run scripts/setup.sh"
    got, m = serve_bodies(mimo_bin, "--speculative", "dflash")
    assert [g[:3] for g in got] == plain_answers
    drafts, accepted, per_pos = spec_counters(m)
    assert len(per_pos) == 7 and sum(per_pos) == accepted, m
    # Mean tokens per verify step (accepted drafts + the bonus): 4.12 on these bodies (penalties,
    # tools and a schema among them pull it below the 5.46 of the held-out chats in
    # docs/PERFORMANCE.md); greedy and one request at a time, so deterministic on one ISA; the
    # bound leaves room for another ISA's rounding. A collapsed drafter gives ~1.
    assert 1 + accepted / drafts >= MIN_MAL, (accepted / drafts, per_pos)
    assert per_pos[0] / drafts >= 0.5 and per_pos == sorted(per_pos, reverse=True), per_pos
    # DFlash's draft contexts went with their requests; its prompt features stay in the KV cache's
    # bounded feature cache for later prefix hits.
    assert metric(m, "mimo:spec_decode_draft_state_bytes") == 0, m
    cached = metric(m, "mimo:spec_decode_feature_cache_bytes")
    assert 0 < cached <= metric(m, "mimo:spec_decode_feature_cache_capacity_bytes"), m


def _prefix_counters(m):
    def one(name):
        return float(re.search(rf"^{name}\{{[^}}]*\}} (\S+)", m, re.M).group(1))
    return one("mimo:prefix_cache_hits_total"), one("mimo:prefix_cache_queries_total")


@pytest.mark.parametrize("cache_mb", ["256", "0"])
def test_dflash_prefix_hits_restore_the_draft_context(mimo_bin, plain_answers, cache_mb):
    """The same chats twice: the second round hits the prefix cache. With the drafter's context
    cache the hits cover the prompts (not only what lies before the drafter's 1024-position
    window, which the nano prompts never reach) and the restored draft context is the one the
    first round computed: the same answers, and the same drafts accepted, step for step counted.
    Without it (0 MB) the hits stop short of the window and the drafts are recomputed."""
    spec = Server(mimo_bin, "--speculative", "dflash", "--dflash-context-cache-mb", cache_mb,
                  "--speculative-draft-vocab", os.path.join(NANO, "nano_used_tokens.json"))
    try:
        rounds = []
        for _ in range(2):
            m0 = spec.metrics()
            got = [spec.stream_chat(b)[:3] for b in BODIES]
            m1 = spec.metrics()
            d0, a0, p0 = spec_counters(m0)
            d1, a1, p1 = spec_counters(m1)
            h0, q0 = _prefix_counters(m0)
            h1, q1 = _prefix_counters(m1)
            rounds.append((got, d1 - d0, a1 - a0, [y - x for x, y in zip(p0, p1)], h1 - h0, q1 - q0))
    finally:
        spec.close()
    (got1, drafts1, acc1, pos1, _, _), (got2, drafts2, acc2, pos2, hits2, queries2) = rounds
    assert got1 == plain_answers and got2 == plain_answers
    assert (drafts2, acc2, pos2) == (drafts1, acc1, pos1)
    if cache_mb == "0":
        assert hits2 == 0, (hits2, queries2)
    else:
        # Every prompt's full 16-token blocks but the last token's.
        assert hits2 >= queries2 - 16 * len(BODIES), (hits2, queries2)
