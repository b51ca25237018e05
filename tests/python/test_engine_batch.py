"""The serving engine through `mimo generate --requests` on generated checkpoints (random
weights, so near-ties are common and any numerical change shows): 16 requests of mixed lengths
(past the chunk size and the 8-key sliding window, some sharing a prefix) give the same tokens
and bit-identical logprobs as each request run alone, with and without chunked prefill, with f32
and bf16 KV; a KV budget too small for all of them preempts and still gives the same outputs;
malformed lines are reported by line number while the rest run."""
import json
import os
import re
import subprocess

import numpy as np
import pytest

VARIANTS = ["bf16", "fp8", "v2.6-flash"]  # v2.6-flash: MXFP4 experts, fused qkv, bf16 router


def requests(vocab):
    rng = np.random.default_rng(7)
    shared = rng.integers(0, vocab, 40).tolist()
    out = []
    for i in range(16):
        n = [3, 9, 17, 30, 45, 70][i % 6]
        ids = rng.integers(0, vocab, n).tolist()
        if i % 4 == 0:
            ids = shared + ids  # shares a 40-token prefix (2+ blocks of 16)
        out.append({"id": f"r{i}", "prompt_ids": ids, "max_tokens": 6 + i % 5, "logprobs": 0,
                    "ignore_eos": True})
    return out


def run(mimo_bin, model, reqs, tmp_path, name, *flags):
    src, dst = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    p = subprocess.run([mimo_bin, "generate", "--model", model, "--requests", str(src), "--out",
                        str(dst), "--threads", "2", *flags],
                       capture_output=True, text=True, timeout=600)
    lines = [json.loads(x) for x in dst.read_text().splitlines()] if dst.exists() else []
    return p, lines


def outputs(lines):
    return {l["id"]: (l["output_ids"], [t["logprob"] for t in l["logprobs"]]) for l in lines}


@pytest.mark.parametrize("variant", VARIANTS)
def test_batch_invariance_and_preemption(mimo_bin, checkpoint, tmp_path, variant):
    model = checkpoint(variant)
    vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
    reqs = requests(vocab)
    for kv in ["f32", "bf16"]:
        alone = {}
        for r in reqs:
            p, lines = run(mimo_bin, model, [r], tmp_path, f"alone-{kv}-{r['id']}",
                           "--kv-cache-dtype", kv, "--max-num-seqs", "1")
            assert p.returncode == 0, p.stderr
            alone.update(outputs(lines))
        for budget in ["16", "4096"]:
            p, lines = run(mimo_bin, model, reqs, tmp_path, f"batch-{kv}-{budget}",
                           "--kv-cache-dtype", kv, "--max-num-batched-tokens", budget)
            assert p.returncode == 0, p.stderr
            got = outputs(lines)
            for r in reqs:  # exact: tokens and float32 logprobs
                assert got[r["id"]] == alone[r["id"]], (kv, budget, r["id"])
            if budget == "16":  # requests admitted over several steps reuse the shared prefix
                hits = int(re.search(r"(\d+) of \d+ prompt tokens from the prefix cache",
                                     p.stderr).group(1))
                assert hits >= 3 * 32, p.stderr
        # 12 full-attention blocks of 16 tokens: the longest request (120 tokens) fits alone,
        # the ~690 tokens of all of them by far not.
        p, lines = run(mimo_bin, model, reqs, tmp_path, f"small-{kv}", "--kv-cache-dtype", kv,
                       "--max-num-batched-tokens", "16", "--num-kv-blocks", "12")
        assert p.returncode == 0, p.stderr
        preemptions = int(re.search(r"(\d+) preemptions", p.stderr).group(1))
        assert preemptions > 0, p.stderr
        got = outputs(lines)
        for r in reqs:
            assert got[r["id"]] == alone[r["id"]], ("preemption", kv, r["id"])


def test_malformed_lines_are_reported_and_the_rest_run(mimo_bin, checkpoint, tmp_path):
    model = checkpoint("bf16")
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "ok1", "prompt_ids": [1, 2, 3], "max_tokens": 2}\n'
                   'this is not json\n'
                   '{"id": "bad", "prompt_ids": [1, 2], "temperature": "hot"}\n'
                   '{"id": "big", "prompt_ids": [1, 99999]}\n'
                   '\n'
                   '{"id": "ok2", "prompt_ids": [4, 5], "max_tokens": 3, "n": 2, "seed": 1,'
                   ' "temperature": 1.0}\n')
    p = subprocess.run([mimo_bin, "generate", "--model", model, "--requests", str(src), "--out",
                        str(dst)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1  # some lines failed
    assert "line 2: not valid JSON" in p.stderr
    assert "line 3: field 'temperature' must be a number" in p.stderr
    assert "line 4: prompt token 99999 (at position 1) is outside the vocabulary" in p.stderr
    lines = [json.loads(x) for x in dst.read_text().splitlines()]
    by_id = {}
    for l in lines:
        by_id.setdefault(l["id"], []).append(l)
    assert len(by_id["ok1"][0]["output_ids"]) == 2
    assert by_id["ok1"][0]["finish_reason"] == "length"
    assert [l["index"] for l in by_id["ok2"]] == [0, 1]
    assert all(len(l["output_ids"]) == 3 for l in by_id["ok2"])
    assert by_id["bad"][0]["line"] == 3 and "temperature" in by_id["bad"][0]["error"]
    assert by_id[2][0]["error"] == "not valid JSON"  # no id: the line number stands in
