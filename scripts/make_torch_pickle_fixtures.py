#!/usr/bin/python3
"""Writes the torch.save fixtures of tests/io/torch_pickle_test.cc (src/io/torch_pickle.h).

    /usr/bin/python3 scripts/make_torch_pickle_fixtures.py [--out tests/data/torch_pickle]

Needs torch (Debian's python3-torch 1.13 is what wrote the committed files). Every readable
fixture gets its expectation in expected.json, taken from torch itself (the tensor torch.load gives
back, as little-endian bytes in hex), so the test compares the C++ reader with torch, not with a
second copy of its own logic:

  dict_bf16.pt        {"mask_token_id": 151669, "embedding": bf16 [64]}: the shape MiMo ships
  bare_bf16.pt        a bare bf16 [64] tensor (no mask_token_id)
  dict_f32.pt         {"mask_token_id": 7, "embedding": f32 [64]}
  dict_offset.pt      the embedding is big[5:69] of a bf16 [100]: torch saves the whole storage,
                      the tensor has storage_offset 5
  dict_extra_keys.pt  f16 embedding plus unrelated keys (a str, another tensor sharing nothing,
                      a nested dict with a list, a float, None, a bool) that the reader ignores
  dict_parameter.pt   the embedding is an nn.Parameter (torch._utils._rebuild_parameter)
  dict_2d_bf16.pt     a contiguous bf16 [2, 32] embedding (shape is returned as saved)
  byteorder_little.pt dict_bf16.pt rewritten by zipfile (no ZIP64 records, no 64-byte padding)
                      plus the <archive>/byteorder record torch >= 2.1 writes ("little")

Files the reader must refuse (the test checks the error names the problem):

  compressed.pt       dict_bf16.pt rewritten by zipfile with ZIP_DEFLATED entries
  forbidden_global.pt a torch-shaped zip whose data.pkl calls os.system (GLOBAL posix.system)
  noncontiguous.pt    the embedding is t.t() of a bf16 [4, 16] tensor
  f64.pt              a float64 embedding (torch.DoubleStorage)
  legacy.pt           torch.save(..., _use_new_zipfile_serialization=False): not a zip archive
                      (its storage keys are object addresses: it differs on every run)
  byteorder_big.pt    dict_bf16.pt plus a byteorder record saying "big"
"""
import argparse
import json
import os
import pickle
import zipfile

import torch


class _System:
    """Pickles as os.system("echo pwned"): what a malicious .pt does."""

    def __reduce__(self):
        return (os.system, ("echo pwned",))


def raw_hex(t):
    """The tensor's elements, row-major, as little-endian bytes in hex (from torch, not numpy)."""
    t = t.detach().contiguous()
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    words = t.view(ints).flatten().tolist()
    n = t.element_size()
    return b"".join((w & ((1 << (8 * n)) - 1)).to_bytes(n, "little") for w in words).hex()


def expectation(obj):
    emb = obj["embedding"] if isinstance(obj, dict) else obj
    return {
        "mask_token_id": obj.get("mask_token_id") if isinstance(obj, dict) else None,
        "dtype": {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}[emb.dtype],
        "shape": list(emb.shape),
        "hex": raw_hex(emb),
        "values": emb.detach().float().flatten().tolist(),
    }


def rewrite_zip(src, dst, compression, replace=None, add=None):
    """Copies a zip entry by entry (zipfile's own writer), replacing the entries whose names end
    with a key of `replace`, then adding `add`'s entries under the archive's directory."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            for suffix, new in (replace or {}).items():
                if info.filename.endswith(suffix):
                    data = new
            zout.writestr(zipfile.ZipInfo(info.filename, info.date_time), data,
                          compress_type=compression)
        archive = zin.namelist()[0].split("/")[0]
        for name, data in (add or {}).items():
            zout.writestr(zipfile.ZipInfo(f"{archive}/{name}", info.date_time), data,
                          compress_type=compression)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "torch_pickle"))
    out = os.path.abspath(ap.parse_args().out)
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(29)

    def randn(*shape, dtype):
        return torch.randn(*shape, generator=g).to(dtype)

    big = randn(100, dtype=torch.bfloat16)
    fixtures = {
        "dict_bf16.pt": {"mask_token_id": 151669, "embedding": randn(64, dtype=torch.bfloat16)},
        "bare_bf16.pt": randn(64, dtype=torch.bfloat16),
        "dict_f32.pt": {"mask_token_id": 7, "embedding": randn(64, dtype=torch.float32)},
        "dict_offset.pt": {"mask_token_id": 505, "embedding": big[5:5 + 64]},
        "dict_extra_keys.pt": {
            "format": "mimo-dflash",
            "mask_token_id": 633,
            "embedding": randn(64, dtype=torch.float16),
            "other": randn(3, dtype=torch.float32),
            "config": {"block_size": 8, "layers": [1, 3, 5], "eps": 1e-6, "x": None, "on": True},
            "big_id": 1 << 40,
        },
        "dict_parameter.pt": {
            "mask_token_id": 42,
            "embedding": torch.nn.Parameter(randn(64, dtype=torch.bfloat16)),
        },
        "dict_2d_bf16.pt": {"mask_token_id": 3, "embedding": randn(2, 32, dtype=torch.bfloat16)},
    }
    expected = {}
    for name, obj in fixtures.items():
        path = os.path.join(out, name)
        torch.save(obj, path)
        # What torch.load gives back is the expectation (checks the save round-trips too).
        loaded = torch.load(path)
        expected[name] = expectation(loaded)
        assert expected[name] == expectation(obj), name
    assert fixtures["dict_offset.pt"]["embedding"].storage_offset() == 5
    rewrite_zip(os.path.join(out, "dict_bf16.pt"), os.path.join(out, "byteorder_little.pt"),
                zipfile.ZIP_STORED, add={"byteorder": b"little"})
    expected["byteorder_little.pt"] = expectation(
        torch.load(os.path.join(out, "byteorder_little.pt")))
    assert expected["byteorder_little.pt"] == expected["dict_bf16.pt"]

    # Files to refuse.
    rewrite_zip(os.path.join(out, "dict_bf16.pt"), os.path.join(out, "compressed.pt"),
                zipfile.ZIP_DEFLATED)
    evil = pickle.dumps({"mask_token_id": 1, "embedding": _System()}, protocol=2)
    assert b"system" in evil
    rewrite_zip(os.path.join(out, "dict_bf16.pt"), os.path.join(out, "forbidden_global.pt"),
                zipfile.ZIP_STORED, replace={"/data.pkl": evil})
    torch.save({"mask_token_id": 1, "embedding": randn(4, 16, dtype=torch.bfloat16).t()},
               os.path.join(out, "noncontiguous.pt"))
    torch.save({"mask_token_id": 1, "embedding": randn(64, dtype=torch.float64)},
               os.path.join(out, "f64.pt"))
    torch.save({"mask_token_id": 1, "embedding": randn(8, dtype=torch.bfloat16)},
               os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
    rewrite_zip(os.path.join(out, "dict_bf16.pt"), os.path.join(out, "byteorder_big.pt"),
                zipfile.ZIP_STORED, add={"byteorder": b"big"})

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"torch_version": torch.__version__, "fixtures": expected}, f, indent=1)
        f.write("\n")
    print(f"wrote {len(expected)} fixtures + 6 refusals to {out}")


if __name__ == "__main__":
    main()
