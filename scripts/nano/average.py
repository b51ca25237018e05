"""Average the weights of several checkpoints of one run (same config and vocabularies) into a
new run folder that export.py / probe.py read like any other:

  scripts/nano/py.sh average.py --run build-nano/run --out build-nano/run-avg build-nano/run/ckpt-{4350..4600..50}.pt

Every tensor of the model state (weights, and the routers' e_score_correction_bias buffers) is the
plain mean over the inputs; the optimizer state is dropped, so the result is for export, not for
resuming. corpus_vocab.json and train.log are copied from --run (the run the checkpoints are of:
train.py --keep-from keeps them as ckpt-STEP.pt)."""
import argparse
import os
import shutil

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", required=True, help="the run folder (corpus_vocab.json, train.log)")
    ap.add_argument("ckpts", nargs="+")
    a = ap.parse_args()
    states = [torch.load(p) for p in a.ckpts]
    cfg = states[0]["config"]
    for p, st in zip(a.ckpts, states):
        if st["config"] != cfg or st["model"].keys() != states[0]["model"].keys():
            raise SystemExit(f"{p}: not the same model as {a.ckpts[0]}")
    avg = {}
    for k, v in states[0]["model"].items():
        if v.is_floating_point():
            avg[k] = sum(st["model"][k].double() for st in states).div(len(states)).to(v.dtype)
        else:
            avg[k] = v.clone()
    os.makedirs(a.out, exist_ok=True)
    torch.save({"model": avg, "step": max(st["step"] for st in states), "config": cfg,
                "averaged": [os.path.basename(p) for p in a.ckpts]}, os.path.join(a.out, "ckpt.pt"))
    for f in ("corpus_vocab.json", "train.log"):
        shutil.copy(os.path.join(a.run, f), a.out)
    print(f"averaged {len(states)} checkpoints (steps {[st['step'] for st in states]}) into {a.out}")


if __name__ == "__main__":
    main()
