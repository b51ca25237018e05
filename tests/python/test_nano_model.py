"""The shipped mimo-v2-nano checkpoints (models/ after scripts/setup.sh): real MiMo-V2-Flash config
and tensor formats, the training module agrees with the independent float64 reference
(scripts/mimo_reference.py) on both variants, tokens the model was never trained to write can never
win the argmax or be sampled. The held-out evaluation's README numbers (nano_eval.json) are
checked outside the suite, by `scripts/nano/py.sh evaluate.py --check` (2.5 minutes here)."""
import json
import os
import re
import sys

import numpy as np
import pytest

from prereq import beside_checkout, require_module
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts", "nano"))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import data  # noqa: E402
import evaluate  # noqa: E402
import nano_io  # noqa: E402
import tok as toklib  # noqa: E402

VARIANTS = ["mimo-v2-nano", "mimo-v2-nano-fp8"]
SRC = os.path.join(REPO, "models-src", "mimo-v2-nano")
TRAIN_SEED = 20250101  # scripts/nano/train.py default


def model_path(name):
    d = os.path.join(REPO, "models", name)
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        pytest.fail(f"{d} is missing: run scripts/setup.sh (scripts/setup.d/20-nano-model.sh)")
    return d


_cache = {}


def loaded(name):
    if name not in _cache:
        torch.set_num_threads(1)
        _cache[name] = nano_io.load_model(model_path(name))
    return _cache[name]


def used(name):
    with open(os.path.join(model_path(name), "nano_used_tokens.json")) as f:
        u = json.load(f)
    return u["input_ids"], u["output_ids"]


def test_committed_archives_are_small():
    total = sum(os.path.getsize(os.path.join(SRC, f)) for f in os.listdir(SRC))
    assert total <= 25 * 1024 * 1024, total
    for v in VARIANTS:
        assert os.path.exists(os.path.join(SRC, v + ".tar.xz"))


@pytest.mark.parametrize("name", VARIANTS)
def test_config_and_tensor_formats(name):
    d = model_path(name)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    L = c["num_hidden_layers"]
    assert c["architectures"] == ["MiMoV2FlashForCausalLM"]
    assert c["hybrid_layer_pattern"] == [0 if i == 0 or (i + 1) % 6 == 0 else 1 for i in range(L)]
    assert 0 in c["hybrid_layer_pattern"][1:], "a full layer besides layer 0"
    assert c["head_dim"] == c["swa_head_dim"] == 192 and c["v_head_dim"] == c["swa_v_head_dim"] == 128
    assert int(c["head_dim"] * c["partial_rotary_factor"]) == 64
    assert c["rope_theta"] == 5e6 and c["swa_rope_theta"] == 1e4
    assert 32 <= c["sliding_window"] <= 64 and c["attention_value_scale"] == 0.707
    assert c["add_swa_attention_sink_bias"] and not c["add_full_attention_sink_bias"]
    assert c["num_key_value_heads"] != c["swa_num_key_value_heads"]
    assert c["moe_layer_freq"][0] == 0 and all(c["moe_layer_freq"][1:])
    assert c["scoring_func"] == "sigmoid" and c["topk_method"] == "noaux_tc"
    assert c["num_nextn_predict_layers"] == 3 and c["eos_token_id"] == 151645
    tk = toklib.Tokenizer(d)
    assert c["vocab_size"] > max(tk.id_to_token)
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        tc = json.load(f)
    assert tc["chat_template"] == data.load_template_text() and tc["eos_token"] == "<|im_end|>"
    raw = nano_io.read_safetensors(os.path.join(d, "model.safetensors"))
    fp8 = name.endswith("fp8")
    assert ("quantization_config" in c) == fp8
    for n, (tag, arr) in raw.items():
        if n.endswith("_scale_inv"):
            assert tag == "F32"
            w = raw[n[:-len("_scale_inv")]][1]
            assert arr.shape[1] == -(-w.shape[1] // 128)
        elif n.endswith(("mlp.gate.weight", "e_score_correction_bias")):
            assert tag == "F32", n
        elif fp8 and n.endswith("_proj.weight") and not n.endswith(("o_proj.weight", "eh_proj.weight")):
            assert tag == "F8_E4M3" and n + "_scale_inv" in raw, n
        else:
            assert tag == "BF16", (n, tag)
    for k in range(3):
        assert f"model.mtp.layers.{k}.eh_proj.weight" in raw
        assert f"model.mtp.layers.{k}.self_attn.attention_sink_bias" in raw
    if fp8:
        assert c["quantization_config"]["weight_block_size"] == [128, 128]
        assert "model.layers.0.self_attn.o_proj" in c["quantization_config"]["ignored_layers"]


def _prompts(n):
    tk, r, w = toklib.Tokenizer(), data.Renderer(), data.World()
    out = []
    for s in data.eval_set(w, n_per_kind=n):
        out.append(tk.encode(data.prompt_text(r, s) + s.completion))
    return out


@pytest.mark.parametrize("name", VARIANTS)
def test_training_module_matches_float64_reference(name):
    ref_mod = require_module("mimo_reference")
    m, _ = loaded(name)
    ref = ref_mod.load_reference(model_path(name))
    ids = _prompts(1)[0][:90]  # > window, crosses the SWA boundary
    with torch.no_grad():
        h = m.hidden(torch.tensor([ids]))
        mine = m.logits(h)[0].double()
    want = ref.forward(ids)
    in_ids, out_ids = used(name)
    o = torch.tensor(out_ids)
    scale = want[:, o].abs().max()
    assert (mine[:, o] - want[:, o]).abs().max() < 2e-3 * scale
    assert (mine.argmax(-1) == want.argmax(-1)).all()
    hr = ref.hidden_states(ids)
    for k in range(3):
        nxt = ids[k + 1:] + [ids[0]] * (k + 1)
        lg, _ = ref.mtp_forward(k, hr, nxt, list(range(len(ids))))
        with torch.no_grad():
            y = m.mtp_hidden(k, torch.tensor([nxt]), h)
            ml = m.lm_head(y)[0].double()
        assert (ml[:, o] - lg[:, o]).abs().max() < 2e-3 * lg[:, o].abs().max()


def test_sliding_window_blocks_match_the_reference_over_long_spans():
    """Training runs sliding-window attention in blocks of W queries over 2W keys once a span is
    longer than 2W (Attention.attend_local, what makes 4k-token pass-key training affordable); its
    logits over 300 positions of a pass-key prompt equal the float64 reference's (the window ring,
    sinks and both RoPE thetas included)."""
    ref_mod = require_module("mimo_reference")
    name = VARIANTS[0]
    m, _ = loaded(name)
    ref = ref_mod.load_reference(model_path(name))
    tk, r = toklib.Tokenizer(), data.Renderer()
    s = data.passkey_sample(__import__("random").Random(5), 900, False)
    ids = tk.encode(data.prompt_text(r, s))[:300]
    assert len(ids) == 300
    with torch.no_grad():
        mine = m.logits(m.hidden(torch.tensor([ids])))[0].double()
    want = ref.forward(ids)
    o = torch.tensor(used(name)[1])
    assert (mine[:, o] - want[:, o]).abs().max() < 2e-3 * want[:, o].abs().max()
    assert (mine[:, o].argmax(-1) == want[:, o].argmax(-1)).all()


@pytest.mark.parametrize("name", VARIANTS)
def test_unused_tokens_never_win_or_sample(name):
    m, cfg = loaded(name)
    in_ids, out_ids = used(name)
    unused = torch.ones(cfg["vocab_size"], dtype=torch.bool)
    unused[torch.tensor(out_ids)] = False
    # the list matches the corpus: assistant tokens of freshly generated training conversations
    tk, r, w = toklib.Tokenizer(), data.Renderer(), data.World()
    g = data.Generator(TRAIN_SEED, w)
    for _ in range(30):
        for ids, mask in data.encode_conversation(tk, r, g.conversation()):
            assert all(not unused[t] for t, mm in zip(ids, mask) if mm)
    rng = np.random.default_rng(0)
    seqs = [p[-160:] for p in _prompts(1)]
    seqs += [list(rng.integers(0, cfg["vocab_size"], int(rng.integers(3, 80)))) for _ in range(6)]
    seqs += [list(rng.choice(in_ids, int(rng.integers(3, 80)))) for _ in range(6)]
    n_pos = 0
    with torch.no_grad():
        for ids in seqs:
            x = torch.tensor([ids])
            h = m.hidden(x)
            heads = [m.logits(h)[0]]
            for k in range(3):
                nxt = torch.cat([x[:, k + 1:], x[:, :k + 1]], dim=1)
                heads.append(m.lm_head(m.mtp_hidden(k, nxt, h))[0])
            for lg in heads:
                assert not unused[lg.argmax(-1)].any()
                p = torch.softmax(lg.float(), dim=-1)        # temperature 1, float32
                assert float(p[:, unused].sum()) == 0.0
                n_pos += lg.shape[0]
    assert n_pos > 1500


def test_committed_template_is_the_shared_one():
    """models-src/mimo-v2-nano/chat_template.jinja (used where ../shared is absent) is the
    MiMo-V2.5 template of ../shared byte for byte."""
    shared, committed = data.TEMPLATE_CANDIDATES
    beside_checkout(shared, "../shared/data/chat_templates beside this checkout")
    with open(shared, "rb") as a, open(committed, "rb") as b:
        assert a.read() == b.read()


def test_tool_call_parser_reads_template_rendering():
    r = data.Renderer()
    args = {"to": "Ana", "text": "two  spaces\nand a line"}
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": "send_message", "arguments": args}}]}]
    text = r.render(msgs, add_generation_prompt=False)
    turn = text.split("<|im_start|>assistant\n")[1]
    assert evaluate.parse_tool_calls(turn) == [("send_message", args)]
    assert evaluate.parse_tool_calls(turn.replace("</function>", "</func>")) == []
    assert evaluate.parse_tool_calls("<tool_call>\n<function=f>\njunk</function>\n</tool_call>") == []


def test_scorer_accepts_expected_and_rejects_wrong_completions():
    """evaluate.score on the generator's own held-out completions (independent expectation: the
    template-rendered targets) must be 100%, and on completions with the value/argument swapped 0%."""
    assert evaluate.contains_value("In Xoton it is -3 degrees.", "-3")
    assert not evaluate.contains_value("In Xoton it is -3 degrees.", "3")
    assert not evaluate.contains_value("Kela lives in Galton.", "Gal")
    w = data.World()
    items = data.eval_set(w, n_per_kind=6)
    assert {s.kind for s in items} == {"arith", "fact", "context", "tool_call", "tool_answer"}
    for s in items:
        assert evaluate.score(s, s.completion + "<|im_end|>"), (s.kind, s.completion)
        if s.kind == "tool_call":
            k, v = next(iter(s.meta["args"].items()))
            bad = s.completion.replace(f"<parameter={k}>{v}<", f"<parameter={k}>{v}x<")
        elif s.kind == "tool_answer":
            bad = s.completion.replace(s.meta["facts"][0], "Nowhere0")
        else:
            ans = s.meta["answer"]
            bad = s.completion.split("</think>")[0] + "</think>" + \
                s.completion.split("</think>")[-1].replace(ans, ans + "1") if "</think>" in s.completion \
                else s.completion.replace(ans, ans + "1")
        assert not evaluate.score(s, bad), (s.kind, bad)


def test_arith_working_is_a_correct_column_derivation():
    """Every worked sum the model is trained on is a valid column computation (checked by evaluating
    each clause, not by re-running arith_working's formulas), ending in the right result."""
    add = re.compile(r"^(\d+) \+ (\d+)\. Ones: (\d) \+ (\d) = (\d+), write (\d), carry ([01])\. "
                     r"Tens: (\d) \+ (\d) \+ ([01]) = (\d)\.$")
    sub = re.compile(r"^(\d+) - (\d+)\. Ones: (\d+) - (\d) = (\d), borrow ([01])\. "
                     r"Tens: (\d) - (\d) - ([01]) = (\d)\.$")
    for a in range(41):
        for b in range(41):
            m = add.match(data.arith_working(a, "+", b))
            A, B, x0, y0, s0, w, c, x1, y1, c2, t = map(int, m.groups())
            assert (A, B) == (a, b) and x0 + 10 * x1 == a and y0 + 10 * y1 == b
            assert s0 == x0 + y0 and w == s0 % 10 and c == s0 // 10 == c2 and t == x1 + y1 + c
            assert 10 * t + w == a + b
            if b > a:
                continue
            m = sub.match(data.arith_working(a, "-", b))
            A, B, top, y0, d0, br, x1, y1, br2, t = map(int, m.groups())
            assert (A, B) == (a, b) and y0 + 10 * y1 == b and top % 10 == a % 10
            assert br == br2 == (top >= 10) and top - y0 == d0 and x1 == a // 10 and t == x1 - y1 - br
            assert 10 * t + d0 == a - b


def test_heldout_split_is_disjoint_from_training():
    """The evaluation's arithmetic pairs, names and cities never occur in training conversations,
    while every units-digit combination does (so held-out sums are new, not unlearnable)."""
    w, r = data.World(), data.Renderer()
    g = data.Generator(TRAIN_SEED, w)
    train_pairs, train_text = set(), []
    for _ in range(8000):  # a fifth of the training corpus
        for s in g.conversation():
            train_text.append(data.prompt_text(r, s) + s.completion)
            if s.kind == "arith":
                train_pairs.add((s.meta["a"], s.meta["b"]))
    assert {(a % 10, b % 10) for a, b in train_pairs} == {(i, j) for i in range(10) for j in range(10)}
    corpus = "\n".join(train_text)
    held = data.eval_set(w, n_per_kind=40)
    for s in held:
        if s.kind == "arith":
            a, b = s.meta["a"], s.meta["b"]
            assert (a, b) not in train_pairs and data.is_heldout_pair(a, b)
            assert f"{a} {s.meta['op']} {b} = {s.meta['answer']}." in s.completion
        for key in ("name", "to", "city"):
            v = s.meta.get("args", {}).get(key)
            if v:
                assert data.is_heldout_name(v) and not re.search(rf"\b{v}\b", corpus), v
        if s.kind == "context":
            v = s.meta["answer"]
            assert data.is_heldout_name(v) and not re.search(rf"\b{v}\b", corpus), v
