#!/usr/bin/env python3
"""Convert a MiMo-V2 checkpoint to GGUF with llama.cpp's converter, keeping its REAL vocabulary.

usage: gguf_real_vocab.py LLAMA_CPP_DIR MODEL_DIR [convert_hf_to_gguf.py args...]
   e.g. /usr/bin/python3 scripts/bench/gguf_real_vocab.py /tmp/anchors/llama.cpp \
            models/mimo-v2-nano --outtype bf16 --outfile /tmp/anchors/nano-bf16.gguf

Works where `transformers` is absent and torch is old (Debian's torch 1.13), like the anchor
shim ../shared/anchors/llamacpp.sh writes, but instead of a synthetic vocab, set_vocab reads
MODEL_DIR/tokenizer.json directly (no `transformers`/`tokenizers` needed):

- tokens in id order: model.vocab (byte-level BPE strings) + added_tokens, ids without a token
  padded with "[PADn]" (type UNUSED) up to config.vocab_size;
- added tokens with "special": true -> CONTROL, the others (<think>, <tool_call>, ...) ->
  USER_DEFINED (llama.cpp matches these even when special-token parsing is off, as HF does);
- merges from model.merges (either ["a", "b"] pairs or "a b" strings);
- tokenizer model "gpt2", pre-tokenizer "qwen2" (the Qwen2 split regex);
- eos = <|im_end|> (else config.eos_token_id), pad = config.pad_token_id, no BOS added,
  chat template from tokenizer_config.json when present.
"""
import json
import os
import runpy
import sys
import types

import torch

# torch < 2.1 lacks the float8 dtypes the converter names at import time.
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if not hasattr(torch, _name):
        setattr(torch, _name, torch.uint8)


def _install_stubs():
    try:
        import transformers  # noqa: F401
    except ImportError:
        mod = types.ModuleType("transformers")

        class _NoHF:
            @classmethod
            def from_pretrained(cls, *a, **k):
                raise OSError("transformers is not installed (stub)")

        mod.AutoConfig = type("AutoConfig", (_NoHF,), {})
        mod.AutoTokenizer = type("AutoTokenizer", (_NoHF,), {})
        sys.modules["transformers"] = mod
    try:
        import tqdm  # noqa: F401
    except ImportError:
        mod = types.ModuleType("tqdm")

        class _Bar:
            def __init__(self, *a, **k):
                pass

            def __getattr__(self, _name):
                return lambda *a, **k: None

            def __enter__(self):
                return self

            def __exit__(self, *a):
                return False

        mod.tqdm = _Bar
        sys.modules["tqdm"] = mod


def read_vocab(model_dir, vocab_size):
    """Returns (tokens, types, merges, specials) from model_dir/tokenizer.json.

    types are strings: NORMAL / CONTROL / USER_DEFINED / UNUSED."""
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        raise SystemExit(f"tokenizer.json model type {model.get('type')!r}: only BPE is handled")
    by_id = {}
    kinds = {}
    for tok, i in model["vocab"].items():
        by_id[int(i)] = tok
        kinds[int(i)] = "NORMAL"
    specials = {}
    for a in tj.get("added_tokens", []):
        i = int(a["id"])
        by_id[i] = a["content"]
        kinds[i] = "CONTROL" if a.get("special") else "USER_DEFINED"
        specials[a["content"]] = i
    top = max(by_id)
    if vocab_size is None:
        vocab_size = top + 1
    if top >= vocab_size:
        raise SystemExit(f"tokenizer has id {top} >= vocab_size {vocab_size}")
    tokens, types_ = [], []
    for i in range(vocab_size):
        if i in by_id:
            tokens.append(by_id[i])
            types_.append(kinds[i])
        else:
            tokens.append(f"[PAD{i}]")
            types_.append("UNUSED")
    seen = {}
    for i, t in enumerate(tokens):
        if t in seen:
            raise SystemExit(f"duplicate token text {t!r} at ids {seen[t]} and {i}")
        seen[t] = i
    merges = []
    for m in model.get("merges", []):
        if isinstance(m, str):
            merges.append(m)
        else:
            a, b = m
            if " " in a or " " in b:
                raise SystemExit(f"merge part contains a space: {m!r}")
            merges.append(f"{a} {b}")
    return tokens, types_, merges, specials


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    llama_dir = os.path.abspath(sys.argv[1])
    _install_stubs()
    sys.path.insert(0, llama_dir)
    sys.path.insert(1, os.path.join(llama_dir, "gguf-py"))
    import gguf
    from conversion import mimo

    def set_vocab(self):
        hp = self.hparams
        model_dir = str(self.dir_model)
        tokens, kinds, merges, specials = read_vocab(model_dir, int(hp["vocab_size"]))
        tt = gguf.TokenType
        type_map = {"NORMAL": tt.NORMAL, "CONTROL": tt.CONTROL,
                    "USER_DEFINED": tt.USER_DEFINED, "UNUSED": tt.UNUSED}
        w = self.gguf_writer
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types([type_map[k] for k in kinds])
        w.add_token_merges(merges)
        eos = specials.get("<|im_end|>")
        if eos is None:
            eos = hp.get("eos_token_id")
            if isinstance(eos, list):
                eos = eos[0]
        if eos is not None:
            w.add_eos_token_id(int(eos))
        pad = hp.get("pad_token_id")
        if pad is None:
            pad = specials.get("<|endoftext|>")
        if pad is not None:
            w.add_pad_token_id(int(pad))
        w.add_add_bos_token(False)
        w.add_add_eos_token(False)
        tc_path = os.path.join(model_dir, "tokenizer_config.json")
        if os.path.exists(tc_path):
            with open(tc_path, encoding="utf-8") as f:
                tmpl = json.load(f).get("chat_template")
            if isinstance(tmpl, str) and tmpl:
                w.add_chat_template(tmpl)
        n_ctrl = sum(k == "CONTROL" for k in kinds)
        n_user = sum(k == "USER_DEFINED" for k in kinds)
        n_pad = sum(k == "UNUSED" for k in kinds)
        print(f"[gguf_real_vocab] {len(tokens)} tokens ({n_ctrl} control, {n_user} user-defined, "
              f"{n_pad} padding), {len(merges)} merges, eos={eos}, pad={pad}", file=sys.stderr)

    mimo.MimoV2Model.set_vocab = set_vocab
    script = os.path.join(llama_dir, "convert_hf_to_gguf.py")
    sys.argv = [script] + sys.argv[2:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
