"""`mimo bench niah` (issue 30, item 2): against a stand-in server written here that measures where
the needle sits and finds it only in the first 60% of the haystack (so the grid it must report is
known), with the server's token counts at 4 characters a token; the JSON, the table and the SVG
heatmap checked cell by cell. Then through `mimo serve` on the default model: the requests reach
the asked lengths by the server's own count and the model, trained to retrieve, finds every key
(docs/PERFORMANCE.md shows its heatmap)."""
import json
import os
import re
import sys
import subprocess
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler

import pytest

from test_bench_eval import nano_server, send_json, serve_in_thread

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "nano"))
import data  # noqa: E402



class NeedleFinder:
    """Answers with the pass key when the needle starts in the first 60% of the filler; reports
    prompt_tokens = characters / 4; records each needle's depth in its haystack."""

    def __init__(self):
        self.depths = []
        self.prompts = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][-1]["content"]
                outer.prompts.append(prompt)
                hay = prompt.split("I will quiz you about it.\n\n", 1)[1].rsplit("\n\nWhat is", 1)[0]
                m = re.search(r"The pass key is (\d+)\. Remember it\. \1 is the pass key\. ", hay)
                answer = "I do not know."
                if m:
                    rest = len(hay) - len(m.group(0))
                    depth = m.start() / rest if rest else 0.0
                    outer.depths.append(depth)
                    if depth < 0.6:
                        answer = f" {m.group(1)}."
                send_json(self, {"choices": [{"index": 0, "message": {"role": "assistant",
                                                                       "content": answer}}],
                                 "usage": {"prompt_tokens": len(prompt) // 4,
                                           "completion_tokens": 3}})

            def log_message(self, *a):
                pass

        self.httpd, self.url = serve_in_thread(H)


def run_niah(mimo_bin, tmp_path, *args):
    res, svg = tmp_path / "niah.json", tmp_path / "niah.svg"
    p = subprocess.run([mimo_bin, "bench", "niah", "--output", str(res), "--svg", str(svg), *args],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(res.read_text()), ET.parse(svg).getroot(), p.stdout


def test_grid_against_a_server_that_finds_shallow_needles(mimo_bin, tmp_path):
    s = NeedleFinder()
    try:
        res, svg, table = run_niah(mimo_bin, tmp_path, "--base-url", s.url, "--model", "m",
                                   "--lengths", "1000,3000", "--depths", "0,0.25,0.5,0.75,1",
                                   "--trials", "2")
    finally:
        s.httpd.shutdown()
    assert res["lengths"] == [1000, 3000] and res["depths"] == [0, 0.25, 0.5, 0.75, 1]
    want = {0: 1.0, 0.25: 1.0, 0.5: 1.0, 0.75: 0.0, 1: 0.0}
    for c in res["cells"]:
        assert c["accuracy"] == want[c["depth"]], c
        for t in c["trials"]:
            # The asked length by the server's count (task and question included).
            assert abs(t["prompt_tokens"] - c["length"]) <= 0.01 * c["length"] + 8, (c, t)
    assert res["mean_accuracy"] == pytest.approx(0.6) and res["failed"] == 0
    # The needle sits at the asked depth (to the sentence: the filler's are ~20 characters).
    asked = [d for _ in (1000, 3000) for d in want for _ in range(2)]
    assert len(s.depths) == len(asked)
    assert all(abs(got - d) < 0.02 for got, d in zip(s.depths, asked)), list(zip(s.depths, asked))
    # The default model's pass-key training data (scripts/nano/data.py) is this very prompt.
    sent = [p for p in s.prompts if "The pass key is " in p.split("quiz you about it.", 1)[1]]
    trials = [(c["depth"], t["key"]) for c in res["cells"] for t in c["trials"]]
    assert len(sent) == len(trials) == 20
    for prompt, (depth, key) in zip(sent, trials):
        needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
        chars = len(prompt) - len(data.PASSKEY_TASK) - len(needle) - len(data.PASSKEY_QUESTION)
        assert prompt == data.passkey_prompt(chars, depth, key), (depth, key)
    # Table rows: depth, then one accuracy per length.
    assert re.search(r"^0\.75\s+0\.00\s+0\.00$", table, re.M), table
    # The heatmap: one cell per (depth, length) with the JSON's accuracy.
    ns = {"s": "http://www.w3.org/2000/svg"}
    cells = svg.findall(".//s:rect[@class='cell']", ns)
    assert len(cells) == 10
    for r in cells:
        c = next(c for c in res["cells"] if c["depth"] == float(r.get("data-depth"))
                 and c["length"] == int(r.get("data-length")))
        assert float(r.get("data-accuracy")) == c["accuracy"]
        assert r.get("fill") == ("#28c83c" if c["accuracy"] == 1 else "#dc3c3c")


def test_bad_grids_refused(mimo_bin):
    for extra in (["--lengths", "10"], ["--depths", "1.5"], ["--lengths", "abc"], ["--trials", "0"]):
        p = subprocess.run([mimo_bin, "bench", "niah", "--base-url", "http://127.0.0.1:9",
                            "--model", "m", *extra], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "--lengths" in p.stderr, (extra, p.stderr)


def test_default_model_through_serve(mimo_bin, tmp_path):
    """The default model was trained to retrieve a pass key (its README, phase 5): through the
    server it finds every needle, at the first and last sentence and half way, 256 and 3000
    tokens back (the sliding-window layers see 64: the full-attention layers fetch it)."""
    with nano_server(mimo_bin) as url:
        res, svg, _ = run_niah(mimo_bin, tmp_path, "--base-url", url + "/v1",
                               "--model", "mimo-v2-nano", "--lengths", "256,3000",
                               "--depths", "0,0.5,1", "--trials", "1", "--seed", "7")
    assert res["failed"] == 0 and len(res["cells"]) == 6
    for c in res["cells"]:
        t = c["trials"][0]
        assert abs(t["prompt_tokens"] - c["length"]) <= 0.05 * c["length"] + 8, c
        assert re.fullmatch(r"\d{5}", t["key"]), t
        assert c["accuracy"] == 1.0 and t["key"] in t["answer"], c
