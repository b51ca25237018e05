"""Reference chat-template renderer: Python jinja2 configured exactly like Hugging Face transformers.

transformers (utils/chat_template_utils.py, _compile_jinja_template / render_jinja_template):
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, jinja2.ext.loopcontrols])
  filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
                                 sort_keys=sort_keys)
  globals["raise_exception"] raises TemplateError; globals["strftime_now"]
  template.render(messages=..., tools=... or None, documents=None,
                  add_generation_prompt=..., **special_tokens_map, **kwargs)

Two request-level conveniences mimo's renderer also applies (see src/chat/chat_template.h):
  * parse_tool_call_arguments: OpenAI string arguments -> JSON, as vLLM does before rendering;
  * thinking alias: `thinking` <-> `enable_thinking` when the template reads only the other name.

Usable as a module or a CLI:
  python3 render_reference.py --template T.jinja --messages M.json [--kwargs JSON] [--no-generation-prompt]
"""
import argparse
import functools
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKEN_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                      "cls_token", "mask_token", "additional_special_tokens"]


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@functools.lru_cache(maxsize=None)
def compile_template(text):
    return make_env().from_string(text)


@functools.lru_cache(maxsize=None)
def referenced_names(text):
    """Every variable name the template loads."""
    ast = make_env().parse(text)
    return frozenset(n.name for n in ast.find_all(nodes.Name) if n.ctx == "load")


def special_tokens_from_config(config):
    """transformers' special_tokens_map: the special-token attributes that are set (truthy)."""
    out = {}
    for key in SPECIAL_TOKEN_KEYS:
        v = config.get(key)
        if isinstance(v, list):
            v = [t["content"] if isinstance(t, dict) else t for t in v]
        elif isinstance(v, dict):
            v = v.get("content")
        if v:
            out[key] = v
    return out


def template_from_config(config):
    ct = config["chat_template"]
    if isinstance(ct, list):
        ct = {t["name"]: t["template"] for t in ct}["default"]
    return ct


def parse_tool_call_arguments(messages):
    """vLLM's pre-render step: tool-call arguments given as JSON strings become objects."""
    messages = json.loads(json.dumps(messages))
    for m in messages:
        for call in (m.get("tool_calls") or []) if isinstance(m, dict) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.loads(fn["arguments"])
    return messages


def render(template_text, messages, tools=None, add_generation_prompt=True, kwargs=None,
           special_tokens=None, parse_arguments=True):
    kwargs = dict(kwargs or {})
    names = referenced_names(template_text)
    if "thinking" in kwargs and "enable_thinking" not in kwargs and \
            "enable_thinking" in names and "thinking" not in names:
        kwargs["enable_thinking"] = kwargs["thinking"]
    elif "enable_thinking" in kwargs and "thinking" not in kwargs and \
            "thinking" in names and "enable_thinking" not in names:
        kwargs["thinking"] = kwargs["enable_thinking"]
    if parse_arguments:
        messages = parse_tool_call_arguments(messages)
    context = dict(special_tokens or {})
    context.update(kwargs)
    return compile_template(template_text).render(
        messages=messages, tools=tools, documents=None,
        add_generation_prompt=add_generation_prompt, **context)


def render_continuing(template_text, messages, tools=None, kwargs=None, special_tokens=None):
    """transformers' apply_chat_template(continue_final_message=True): render without a generation
    prompt, then cut right after the last occurrence of the final message's (stripped) text, or
    after its unstripped length when the template kept the message's trailing spacing."""
    final = messages[-1]["content"]
    if isinstance(final, list):
        final = next(b["text"] for b in reversed(final) if "text" in b)
    text = render(template_text, messages, tools, False, kwargs, special_tokens)
    if final.strip() not in text:
        raise ValueError("the final message does not appear in the rendered chat")
    at = text.rindex(final.strip())
    if text[at:at + len(final.lstrip())] == final:
        return text[:at + len(final.lstrip())]
    return text[:at + len(final.strip())]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", help="a .jinja file")
    ap.add_argument("--config", help="a tokenizer_config.json (template + special tokens)")
    ap.add_argument("--messages", required=True)
    ap.add_argument("--tools")
    ap.add_argument("--kwargs", default="{}")
    ap.add_argument("--no-generation-prompt", action="store_true")
    ap.add_argument("--raw-tool-arguments", action="store_true")
    a = ap.parse_args()
    special = {}
    if a.config:
        with open(a.config, encoding="utf-8") as f:
            config = json.load(f)
        special = special_tokens_from_config(config)
        text = template_from_config(config)
    if a.template:
        with open(a.template, encoding="utf-8") as f:
            text = f.read()
    with open(a.messages, encoding="utf-8") as f:
        messages = json.load(f)
    tools = None
    if isinstance(messages, dict):
        tools = messages.get("tools")
        messages = messages["messages"]
    if a.tools:
        with open(a.tools, encoding="utf-8") as f:
            tools = json.load(f)
    sys.stdout.write(render(text, messages, tools, not a.no_generation_prompt,
                            json.loads(a.kwargs), special, not a.raw_tool_arguments))


if __name__ == "__main__":
    main()
