"""The default model's chat prompts for tests: its own template and tokenizer, through the CLI."""
import json
import os
import subprocess

NANO = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "models", "mimo-v2-nano")


def nano_chat_ids(mimo_bin, tmp_path, question, thinking):
    """The default model's chat prompt (its template, its tokenizer) for one user question."""
    m = tmp_path / "m.json"
    m.write_text(json.dumps([{"role": "user", "content": question}]))
    r = subprocess.run([mimo_bin, "render", "--model", NANO, "--messages", str(m), "--kwargs",
                        json.dumps({"enable_thinking": thinking})],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    t = subprocess.run([mimo_bin, "tokenize", "--model", NANO, "--text", r.stdout],
                       capture_output=True, text=True, timeout=60)
    assert t.returncode == 0, t.stderr
    return json.loads(t.stdout)
