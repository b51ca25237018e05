"""`mimo bench quality` (issue 28): KL divergence, top-1 agreement and perplexity of a model
against its reference, checked against numpy on the logits `mimo logits` writes for the same token
sequences (the default model in BF16 as the reference, its FP8 form and its MXFP4-expert form from
`mimo quantize` as the models), in both the --dataset (answers scored) and --text
(llama-perplexity's chunks, second halves scored) protocols."""
import json
import os
import subprocess

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NANO = os.path.join(REPO, "models", "mimo-v2-nano")
NANO_FP8 = os.path.join(REPO, "models", "mimo-v2-nano-fp8")
DATASET = os.path.join(REPO, "scripts", "demo", "nano_quality.jsonl")
TEXT = os.path.join(REPO, "scripts", "demo", "nano_quality.txt")


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr[-3000:]}"
    return p.stdout


def tokenize(mimo_bin, text, special=True):
    cmd = [mimo_bin, "tokenize", "--model", NANO, "--text", text]
    return json.loads(run(cmd + ([] if special else ["--no-special"])))


def logits(mimo_bin, model, ids, tmp_path):
    out = tmp_path / "l.bin"
    run([mimo_bin, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", str(out),
         "--threads", "2"])
    return np.fromfile(out, dtype="<f4").reshape(len(ids), -1).astype(np.float64)


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))


def expected(mimo_bin, model, seqs, tmp_path):
    """seqs: [(ids, from, to)] -> the figures from numpy."""
    kld, same, nll_a, nll_b = [], 0, 0.0, 0.0
    for ids, lo, hi in seqs:
        la = log_softmax(logits(mimo_bin, model, ids, tmp_path)[lo:hi])
        lb = log_softmax(logits(mimo_bin, NANO, ids, tmp_path)[lo:hi])
        kld += list(np.maximum(0, (np.exp(lb) * (lb - la)).sum(-1)))
        same += int((la.argmax(-1) == lb.argmax(-1)).sum())
        nxt = np.array(ids[lo + 1:hi + 1])
        nll_a -= la[np.arange(hi - lo), nxt].sum()
        nll_b -= lb[np.arange(hi - lo), nxt].sum()
    n = len(kld)
    k = np.array(kld)
    return dict(positions=n, mean_kld=k.mean(), mean_kld_se=k.std(ddof=1) / np.sqrt(n),
                p99_kld=np.quantile(k, 0.99), max_kld=k.max(), same_top1=same / n,
                ppl_model=np.exp(nll_a / n), ppl_reference=np.exp(nll_b / n))


def bench(mimo_bin, model, tmp_path, *args):
    out = tmp_path / "q.json"
    run([mimo_bin, "bench", "quality", "--model", model, "--reference", NANO, "--threads", "2",
         "--json", str(out), *args], timeout=600)
    return json.load(open(out))


def compare(got, want):
    assert got["positions"] == want["positions"]
    for k in ("mean_kld", "mean_kld_se", "p99_kld", "max_kld", "ppl_model", "ppl_reference"):
        assert got[k] == pytest.approx(want[k], rel=2e-3, abs=1e-9), k
    assert round(got["same_top1"] * got["positions"]) == round(want["same_top1"] * want["positions"])


@pytest.fixture(scope="module")
def nano_mxfp4(mimo_bin, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("quality") / "nano-mxfp4")
    run([mimo_bin, "quantize", "--model", NANO, "--out", out, "--threads", "2"])
    return out


def test_dataset_protocol_scores_the_answers(mimo_bin, nano_mxfp4, tmp_path):
    items = [json.loads(l) for l in open(DATASET)][:4]
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps(it) + "\n" for it in items))
    seqs = []
    for it in items:
        p = tokenize(mimo_bin, it["prompt"])
        c = tokenize(mimo_bin, it["completion"])
        seqs.append((p + c, len(p) - 1, len(p) + len(c) - 1))
    for model in (nano_mxfp4, NANO_FP8):
        got = bench(mimo_bin, model, tmp_path, "--dataset", str(ds))
        want = expected(mimo_bin, model, seqs, tmp_path)
        compare(got, want)
        assert got["mean_kld"] > 0  # the experts did change
        # The bar for the quantized default model (all 50 chats in docs/PERFORMANCE.md).
        assert got["same_top1"] >= 0.98


def test_text_protocol_is_llama_perplexity_s(mimo_bin, nano_mxfp4, tmp_path):
    text = open(TEXT).read()[:3000]
    f = tmp_path / "t.txt"
    f.write_text(text)
    ctx = 128
    ids = tokenize(mimo_bin, text, special=False)  # special-token strings are text here
    chunks = [ids[i * ctx:(i + 1) * ctx] for i in range(len(ids) // ctx)][:2]
    assert len(chunks) == 2
    got = bench(mimo_bin, nano_mxfp4, tmp_path, "--text", str(f), "--ctx", str(ctx), "--chunks", "2")
    compare(got, expected(mimo_bin, nano_mxfp4, [(c, ctx // 2, ctx - 1) for c in chunks], tmp_path))


def test_a_model_against_itself_is_identical(mimo_bin, tmp_path):
    ds = tmp_path / "one.jsonl"
    ds.write_text(open(DATASET).readline())
    got = bench(mimo_bin, NANO, tmp_path, "--dataset", str(ds))
    assert got["mean_kld"] == 0 and got["max_kld"] == 0 and got["same_top1"] == 1
    assert got["ppl_model"] == got["ppl_reference"]


def test_bad_dataset_line_is_named(mimo_bin, tmp_path):
    ds = tmp_path / "bad.jsonl"
    ds.write_text('{"prompt": "x"}\n')
    p = subprocess.run([mimo_bin, "bench", "quality", "--model", NANO, "--reference", NANO,
                        "--dataset", str(ds)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "line 1" in p.stderr and "completion" in p.stderr
