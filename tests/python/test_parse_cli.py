"""`mimo parse` against the real MiMo-V2.5 chat template rendered by Python's jinja2.

The template is how the model learned the tool-call format: an assistant turn with
reasoning_content, content and tool_calls is rendered by jinja2 (configured as Hugging Face
transformers does), the rendered turn is fed to `mimo parse` as if the model had generated it, and
the parsed reasoning, content and arguments must equal the message we started from (after the
schema's typing: the template writes non-string values with Python's str(), e.g. True / None).
Streaming with --stream-chunk N must print exactly the one-shot result.
"""
import json
import os
import subprocess

import jinja2
import pytest

from prereq import require

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE_CANDIDATES = [
    os.environ.get("MIMO_CHAT_TEMPLATE", ""),
    os.path.join(REPO, "tests", "data", "chat_templates", "mimo-v2.5.jinja"),
    os.path.join(REPO, "shared", "data", "chat_templates", "mimo-v2.5.jinja"),
    os.path.join(os.path.dirname(REPO), "shared", "data", "chat_templates", "mimo-v2.5.jinja"),
]
TEMPLATE = next((p for p in TEMPLATE_CANDIDATES if p and os.path.exists(p)), None)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
            "metric": {"type": "boolean"}, "options": {"type": "object"},
            "tags": {"type": "array"}, "limit": {"type": ["integer", "null"]}}}}},
    {"type": "function", "function": {
        "name": "write_file", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}}}}},
]

CALL_WEATHER = {"city": "San Francisco", "days": 3, "temp": 21.5, "metric": True,
                "options": {"units": "si", "nested": [1, 2.5, None], "s": "é <b>"},
                "tags": ["a", "b"], "limit": None}
CALL_FILE = {"path": " ./notes.md ",
             "content": "\n# Title\n\nif a < b && c > d:\n    return '&amp; &lt;'\n\t\n"}

CASES = [
    # (reasoning, content, [(name, arguments)])
    ("The user wants the weather. I'll call the tool.", "", [("get_weather", CALL_WEATHER)]),
    ("Two steps.\nFirst the file.", "Writing the file, then checking.\n",
     [("write_file", CALL_FILE), ("get_weather", {"city": "東京 🌸", "days": 1})]),
    ("", "Plain answer with <b>markup</b> &amp; entities, no tools.", []),
]


def render_assistant_turn(reasoning, content, calls):
    require(TEMPLATE is not None, "mimo-v2.5.jinja not found (set MIMO_CHAT_TEMPLATE)")
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    with open(TEMPLATE, encoding="utf-8") as f:
        template = env.from_string(f.read())
    message = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [{"type": "function", "function": {"name": n, "arguments": a}}
                                 for n, a in calls]
    text = template.render(messages=[{"role": "user", "content": "hi"}, message], tools=TOOLS)
    start = text.rindex("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")
    end = text.rindex("<|im_end|>")
    return text[start:end]


def run_parse(mimo_bin, tmp_path, text, extra=()):
    assert os.path.exists(mimo_bin), f"mimo binary not built: {mimo_bin} (set MIMO_BIN)"
    text_file = tmp_path / "out.txt"
    text_file.write_bytes(text.encode("utf-8"))
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS))
    cmd = [mimo_bin, "parse", "--model", str(tmp_path), "--tools", str(tools_file),
           "--text-file", str(text_file), "--kwargs", '{"enable_thinking": true}',
           "--id-seed", "5", *extra]
    res = subprocess.run(cmd, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode("utf-8")


def compact(text):
    """The V2.6 compact form: the same calls without the newlines between tags."""
    for a, b in [("<tool_call>\n<function=", "<tool_call><function="),
                 (">\n<parameter=", "><parameter="), ("</parameter>\n", "</parameter>"),
                 ("</function>\n</tool_call>", "</function></tool_call>")]:
        text = text.replace(a, b)
    return text


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("form", ["template", "compact"])
def test_parse_round_trips_the_template(mimo_bin, tmp_path, case, form):
    reasoning, content, calls = CASES[case]
    text = render_assistant_turn(reasoning, content, calls)
    if calls:
        assert "<tool_call>\n<function=" in text  # the template's own layout
    if form == "compact":
        text = compact(text)
        assert "\n<parameter=" not in text
    one_shot = run_parse(mimo_bin, tmp_path, text)
    got = json.loads(one_shot)
    assert got["reasoning_content"] == (reasoning or None)
    # vLLM/OpenAI convention: content is null when there are tool calls and no text.
    assert got["content"] == (None if calls and not content else content)
    assert [c["function"]["name"] for c in got["tool_calls"]] == [n for n, _ in calls]
    for call, (_, args) in zip(got["tool_calls"], calls):
        assert call["type"] == "function"
        assert call["id"].startswith("call_") and len(call["id"]) == 29
        parsed = json.loads(call["function"]["arguments"])
        assert parsed == args
        assert list(parsed) == list(args)  # emitted key order
    for n in (1, 2, 3, 7, 64):
        assert run_parse(mimo_bin, tmp_path, text, ["--stream-chunk", str(n)]) == one_shot, n


def test_parse_reports_bad_input(mimo_bin, tmp_path):
    assert os.path.exists(mimo_bin), f"mimo binary not built: {mimo_bin} (set MIMO_BIN)"
    (tmp_path / "t.txt").write_text("x")
    (tmp_path / "bad.json").write_text("{not json")
    res = subprocess.run([mimo_bin, "parse", "--text-file", str(tmp_path / "t.txt"), "--tools",
                          str(tmp_path / "bad.json")], capture_output=True, timeout=60)
    assert res.returncode != 0 and b"bad.json" in res.stderr
    res = subprocess.run([mimo_bin, "parse", "--text-file", str(tmp_path / "t.txt"), "--kwargs",
                          '{"enable_thinking": "yes"}'], capture_output=True, timeout=60)
    assert res.returncode != 0 and b"enable_thinking" in res.stderr
