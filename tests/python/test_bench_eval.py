"""`mimo bench eval` (issue 30, item 1): against a stand-in OpenAI-compatible server written here
(known replies, so extraction, accuracy, the Wilson interval, the paired difference and McNemar's
exact test are checked against numbers computed in this file), and through `mimo serve` on the
default model with the built-in dataset (scripts/demo/nano_arith_eval.jsonl)."""
import contextlib
import json
import math
import os
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NANO = os.path.join(REPO, "models", "mimo-v2-nano")
BUILTIN = os.path.join(REPO, "scripts", "demo", "nano_arith_eval.jsonl")


def send_json(handler, obj, status=200):
    """A stand-in server's JSON reply."""
    out = json.dumps(obj).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(out)))
    handler.end_headers()
    handler.wfile.write(out)


def serve_in_thread(handler_class):
    """(server, its base URL) on a free port, serving from a daemon thread."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


class StandIn:
    """An OpenAI-compatible server answering each question (the last user message, or the last
    "Question: " of a completions prompt) from `replies`; None answers HTTP 500. Keeps every
    request body."""

    def __init__(self, replies):
        self.replies, self.bodies = replies, []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append((self.path, body))
                if self.path == "/v1/chat/completions":
                    q = body["messages"][-1]["content"]
                else:
                    q = body["prompt"].rsplit("Question: ", 1)[-1].split("\nAnswer:")[0]
                reply = outer.replies.get(q)
                if reply is None:
                    send_json(self, {"error": {"message": "boom"}}, 500)
                    return
                choice = ({"message": {"role": "assistant", "content": reply}}
                          if self.path == "/v1/chat/completions" else {"text": reply})
                send_json(self, {"choices": [dict(choice, index=0, finish_reason="stop")],
                                 "usage": {"completion_tokens": 5}})

            def log_message(self, *a):
                pass

        self.httpd, self.url = serve_in_thread(H)

    def close(self):
        self.httpd.shutdown()


def wilson(k, n, z=1.959963984540054):
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


def mcnemar_exact(b, c):
    m = b + c
    return 1.0 if m == 0 else min(1.0, 2 * sum(math.comb(m, i) for i in range(min(b, c) + 1)) / 2 ** m)


def run_eval(mimo_bin, tmp_path, *args):
    res, items = tmp_path / "res.json", tmp_path / "items.jsonl"
    p = subprocess.run([mimo_bin, "bench", "eval", "--result-json", str(res), "--output",
                        str(items), *args], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(res.read_text()), [json.loads(l) for l in items.read_text().splitlines()], p


def write_dataset(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


# Twelve gsm8k-style items: reference after "####" (with a thousands comma once).
ITEMS = [{"question": f"q{i}", "answer": f"work for {i}\n#### {i * 7 if i != 3 else '1,001'}"}
         for i in range(12)]


def test_gsm8k_items_scored_and_compared(mimo_bin, tmp_path):
    # A: right with "####" (q0-q4, q3 as "1,001" -> 1001), right by the last number (q5, q6),
    # wrong (q7, q8), no number at all (q9: invalid), HTTP 500 (q10: failed), right (q11).
    a = {f"q{i}": f"so #### {i * 7}" for i in range(5)}
    a["q3"] = "the total is 1,001 dollars\n#### 1,001"
    a.update({"q5": "35, I think.", "q6": "It is 42.", "q7": "#### 50", "q8": "It is 57.",
              "q9": "I do not know", "q10": None, "q11": "#### 77"})
    # B differs on six: q0, q1 wrong (right in A only); q7, q8, q9, q10 right (in B only).
    b = dict(a, q0="#### 1", q1="#### 2", q7="#### 49", q8="#### 56", q9="63", q10="70")
    sa, sb = StandIn(a), StandIn(b)
    try:
        ds = write_dataset(tmp_path / "ds.jsonl", ITEMS)
        res, items, _ = run_eval(mimo_bin, tmp_path, "--base-url", sa.url + "/v1", "--model", "m",
                                 "--dataset", ds, "--concurrency", "3",
                                 "--compare-base-url", sb.url, "--compare-model", "m2")
    finally:
        sa.close()
        sb.close()
    A, B, P = res["A"], res["B"], res["paired"]
    assert (A["items"], A["correct"], A["invalid"], A["failed"]) == (12, 8, 1, 1)
    assert (B["correct"], B["invalid"], B["failed"]) == (10, 0, 0)
    assert A["ci95"] == pytest.approx(wilson(8, 12), abs=1e-12)
    assert B["ci95"] == pytest.approx(wilson(10, 12), abs=1e-12)
    assert (P["both"], P["only_a"], P["only_b"], P["neither"]) == (6, 2, 4, 0)
    assert P["difference_b_minus_a"] == pytest.approx(2 / 12)
    se = math.sqrt(2 + 4 - 4 / 12) / 12
    assert P["ci95"] == pytest.approx([2 / 12 - 1.959963984540054 * se,
                                       2 / 12 + 1.959963984540054 * se])
    assert P["mcnemar_p"] == pytest.approx(mcnemar_exact(2, 4))
    byq = {(x["run"], x["question"]): x for x in items}
    assert byq[("A", "q3")]["extracted"] == "1001" and byq[("A", "q3")]["correct"]
    assert byq[("A", "q9")]["extracted"] is None and not byq[("A", "q9")]["correct"]
    assert "error" in byq[("A", "q10")] and byq[("B", "q10")]["correct"]
    # Every request carried the model, temperature 0 and the question as the last user turn.
    assert all(body["model"] == "m" and body["temperature"] == 0 for _, body in sa.bodies)
    assert {body["model"] for _, body in sb.bodies} == {"m2"}


def test_fewshot_completions_and_other_extractors(mimo_bin, tmp_path):
    rows = [{"prompt": "p0", "answer": "A0"}, {"prompt": "p1", "answer": "A1"},
            {"prompt": "p2", "answer": 5}, {"prompt": "p3", "answer": "yes"}]
    replies = {"p2": 'reply {"answer": 5, "note": "x"} done', "p3": '{"answer": "no"}'}
    s = StandIn(replies)
    try:
        ds = write_dataset(tmp_path / "ds.jsonl", rows)
        res, _, _ = run_eval(mimo_bin, tmp_path, "--base-url", s.url, "--model", "m",
                             "--dataset", ds, "--endpoint", "completions", "--num-fewshot", "2",
                             "--extract", "json:answer", "--concurrency", "1")
        # The examples precede each question as "Question: ...\nAnswer: ...\n\n" blocks.
        assert [b["prompt"] for _, b in s.bodies] == [
            f"Question: p0\nAnswer: A0\n\nQuestion: p1\nAnswer: A1\n\nQuestion: {q}\nAnswer:"
            for q in ("p2", "p3")]
        assert (res["A"]["items"], res["A"]["correct"]) == (2, 1)
        s.replies.update({"p2": "the value: 5;", "p3": "value: yes;"})
        res, _, _ = run_eval(mimo_bin, tmp_path, "--base-url", s.url, "--model", "m",
                             "--dataset", ds, "--endpoint", "completions", "--num-fewshot", "2",
                             "--extract", "regex:value: (\\w+);")
        assert res["A"]["correct"] == 2
    finally:
        s.close()


def test_bad_arguments_and_datasets(mimo_bin, tmp_path):
    ds = write_dataset(tmp_path / "bad.jsonl", [{"question": "q"}])
    p = subprocess.run([mimo_bin, "bench", "eval", "--base-url", "http://127.0.0.1:9", "--model",
                        "m", "--dataset", ds], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and 'needs "answer"' in p.stderr, p.stderr
    ds = write_dataset(tmp_path / "ok.jsonl", [{"question": "q", "answer": "1"}])
    for extra, msg in [(["--extract", "regex:("], "--extract regex:("),
                       (["--extract", "fuzzy"], "--extract must be"),
                       (["--num-fewshot", "1"], "leaves none")]:
        p = subprocess.run([mimo_bin, "bench", "eval", "--base-url", "http://127.0.0.1:9",
                            "--model", "m", "--dataset", ds, *extra],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and msg in p.stderr, (extra, p.stderr)


BENCH_MODES = ["membw", "kernels", "model", "attention", "e2e", "pool", "batch", "spec", "grammar",
               "serve", "eval", "niah", "quality"]


def flags_in(text):
    """The --flags a usage text names."""
    import re
    return set(re.findall(r"--[a-z][a-z0-9-]*", text))


def test_every_bench_mode_has_its_own_help(mimo_bin):
    """`mimo bench MODE --help` (issue 47): that mode's usage on stdout, exit 0, not the general
    bench usage; for the modes that print a usage line on a bad flag, every flag it names is in
    the help too. `mimo bench --help` lists every mode."""
    for mode in BENCH_MODES:
        for h in ["--help", "-h"]:
            p = subprocess.run([mimo_bin, "bench", mode, h], capture_output=True, text=True,
                               timeout=30)
            assert p.returncode == 0, (mode, p.returncode, p.stderr)
            assert p.stdout.startswith(f"usage: mimo bench {mode} "), (mode, p.stdout)
            others = [m for m in BENCH_MODES if m != mode and f"mimo bench {m} " in p.stdout]
            assert others == [], (mode, p.stdout)
        # --help after other flags still answers with the help, before any work.
        p = subprocess.run([mimo_bin, "bench", mode, "--threads", "1", "--help"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and p.stdout.startswith(f"usage: mimo bench {mode} "), p.stdout
    for mode in ["serve", "eval", "niah", "quality"]:
        bad = subprocess.run([mimo_bin, "bench", mode, "--bogus", "1"], capture_output=True,
                             text=True, timeout=30)
        assert bad.returncode == 2 and "usage:" in bad.stderr, bad.stderr
        helped = subprocess.run([mimo_bin, "bench", mode, "--help"], capture_output=True,
                                text=True, timeout=30).stdout
        assert flags_in(bad.stderr) - {"--bogus"} <= flags_in(helped), (mode, bad.stderr, helped)
    p = subprocess.run([mimo_bin, "bench", "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    for mode in BENCH_MODES:
        assert f"mimo bench {mode} " in p.stdout, (mode, p.stdout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def nano_server(mimo_bin, model=NANO, threads=2):
    """`mimo serve` on the default model (or `model`); yields its base URL once /health
    answers."""
    assert os.path.isdir(model), f"{model} missing: run scripts/setup.sh"
    port = free_port()
    srv = subprocess.Popen([mimo_bin, "serve", "--model", model, "--port", str(port), "--threads",
                            str(threads), "--no-webui", "--served-model-name", "mimo-v2-nano"],
                           stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.terminate()
        srv.wait(timeout=60)


def test_default_model_through_serve(mimo_bin, tmp_path):
    """The built-in dataset on the default model through `mimo serve`: 40 held-out sums and
    differences (the model's 100-item score is in docs/PERFORMANCE.md)."""
    assert os.path.isfile(BUILTIN), "scripts/demo/nano_arith_eval.jsonl missing"
    with nano_server(mimo_bin) as url:
        res, items, _ = run_eval(mimo_bin, tmp_path, "--base-url", url, "--model", "mimo-v2-nano",
                                 "--dataset", BUILTIN, "--num-items", "40", "--concurrency", "4")
    A = res["A"]
    assert A["items"] == 40 and A["failed"] == 0 and A["invalid"] == 0, A
    assert A["accuracy"] >= 0.9, [x for x in items if not x["correct"]]
    assert A["output_tokens"] > 0 and len(items) == 40
