#!/usr/bin/python3
"""Writes the reference logits of a checkpoint: float32 little-endian [n_ids, vocab_size].

    dump_reference_logits.py --model DIR --ids 1,2,3 --out FILE
    (--ids @FILE reads ids separated by commas / whitespace)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mimo_reference  # noqa: E402


def parse_ids(spec: str):
    text = open(spec[1:]).read() if spec.startswith("@") else spec
    return [int(t) for t in text.replace(",", " ").split()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    ids = parse_ids(a.ids)
    ref = mimo_reference.load_reference(a.model)
    bad = [i for i in ids if not 0 <= i < ref.cfg.vocab]
    if bad:
        ap.error(f"token ids out of range [0, {ref.cfg.vocab}): {bad[:5]}")
    logits = ref.forward(ids).numpy().astype("<f4")
    logits.tofile(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
