"""`mimo chat --messages` with an image or audio content part: the engine runs the language model
alone (omni checkpoints' vision/audio towers are skipped), so the request fails with one error
line naming the part instead of the part being dropped or rendered as an unfillable placeholder.
Text parts of the same shape still run."""
import json
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "models", "mimo-v2-nano")


def chat(mimo_bin, tmp_path, content):
    f = tmp_path / "messages.json"
    f.write_text(json.dumps([{"role": "user", "content": content}]))
    return subprocess.run([mimo_bin, "chat", "--model", MODEL, "--messages", str(f),
                           "--max-tokens", "2", "--threads", "1"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, MIMO_LOG_LEVEL="error"))


@pytest.mark.parametrize("part,kind", [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
     "image_url"),
    ({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}, "input_audio"),
])
def test_media_part_is_a_named_error(mimo_bin, tmp_path, part, kind):
    assert os.path.isdir(MODEL), f"{MODEL} missing: run scripts/setup.sh"
    p = chat(mimo_bin, tmp_path, [{"type": "text", "text": "What is this?"}, part])
    assert p.returncode == 1, p.stdout + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, p.stderr
    assert "messages[0].content[1]" in lines[0] and f"'{kind}'" in lines[0], lines[0]


def test_text_parts_still_run(mimo_bin, tmp_path):
    p = chat(mimo_bin, tmp_path, [{"type": "text", "text": "What is 2 + 3?"}])
    assert p.returncode == 0, p.stderr
