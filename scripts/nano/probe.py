"""Greedy held-out accuracy of a training run in progress, straight from its ckpt.pt (compact
vocabularies, no export), to watch a run without stopping it:

  OPENBLAS_NUM_THREADS=1 scripts/nano/py.sh probe.py build-nano/run [N_PER_KIND] [v]

Scores like evaluate.py (same scorer, held-out names and operand pairs) but on a validation draw
(seed VALIDATION_SEED, not evaluate.py's 777), so choosing a checkpoint or a phase change from the
probe does not select on the prompts the shipped numbers are measured on. Prompts with a token
outside the run's input vocabulary are skipped; 'v' prints the misses."""
import os
import shutil
import sys
import tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import data, evaluate, export, tok as toklib
torch.set_num_threads(1)
VALIDATION_SEED = 4242
run = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
tmp = tempfile.mkdtemp()
shutil.copy(os.path.join(run, "ckpt.pt"), os.path.join(tmp, "ckpt.pt"))
shutil.copy(os.path.join(run, "corpus_vocab.json"), tmp)
m, c, voc, step = export.load_run(tmp)
in_map = {t: i for i, t in enumerate(voc["in_ids"])}; out_ids = voc["out_ids"]
tk, r, w = toklib.Tokenizer(), data.Renderer(), data.World()
res = {}
for s in data.eval_set(w, seed=VALIDATION_SEED, n_per_kind=n):
    p = tk.encode(data.prompt_text(r, s))
    if any(t not in in_map for t in p):
        continue
    caches = [{} for _ in m.layers]
    with torch.no_grad():
        h = m.hidden(torch.tensor([[in_map[t] for t in p]]), caches=caches)
        out = []; pos = len(p)
        for _ in range(110):
            nxt = out_ids[int(m.logits(h[:, -1]).argmax(-1))]
            out.append(nxt)
            if nxt == 151645 or nxt not in in_map: break
            h = m.hidden(torch.tensor([[in_map[nxt]]]), caches=caches, pos0=pos); pos += 1
    text = tk.decode(out)
    ok = evaluate.score(s, text)
    res.setdefault(s.kind, []).append(ok)
    if not ok and len(sys.argv) > 3:
        print("MISS", s.kind, repr(s.messages[-1]["content"][-60:]), "->", repr(text[-120:]))
print("step", step, {k: f"{sum(v)}/{len(v)}" for k, v in res.items()}, flush=True)
