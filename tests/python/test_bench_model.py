"""`mimo bench model --json` on a tiny generated checkpoint: the object has every field, and the
fields agree with each other (achieved GB/s = bytes per token x tok/s, the ratios are the ratios
of the printed figures, the weight bytes of batch 1 are exactly `bench e2e`'s active-weight count,
since one token chooses exactly top-k experts per layer). Not a timed test: speed is whatever the
machine gives; only consistency is checked."""
import json
import re
import subprocess

import pytest

FIELDS = ["prefill_tok_s", "decode_tok_s", "active_bytes_per_token", "achieved_gbps",
          "measured_read_gbps", "roofline_fraction", "prefill_gflops", "peak_gflops", "isa",
          "weight_bytes_per_token", "kv_bytes_per_token", "peak_fraction", "roofline_tok_s",
          "regions_per_step", "empty_region_us", "sync_fraction"]


def run_json(mimo_bin, d, *extra, threads=2):
    p = subprocess.run([mimo_bin, "bench", "model", "--model", d, "--prompt-len", "24",
                        "--gen-len", "4", "--threads", str(threads), "--probe-mib", "64", "--json",
                        *extra], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    assert len(lines) == 1, p.stdout  # one object, nothing else on stdout
    assert "bench model:" in p.stderr  # the progress lines go to stderr
    return json.loads(lines[0])


def e2e_weight_bytes(mimo_bin, d):
    p = subprocess.run([mimo_bin, "bench", "e2e", "--model", d, "--tokens", "2", "--prompt", "2",
                        "--membw", "10", "--threads", "1"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return float(re.search(r"\((\d+) bytes\)", p.stdout).group(1))


def close(a, b, rel=2e-3):
    return abs(a - b) <= rel * max(abs(a), abs(b))


@pytest.mark.parametrize("batch", [1, 2])
def test_bench_model_json_is_consistent(mimo_bin, checkpoint, batch):
    d = checkpoint("fp8")
    r = run_json(mimo_bin, d, "--batch", str(batch), "--kv-cache-dtype", "bf16")
    for f in FIELDS:
        assert f in r, f
    assert r["isa"] in ("scalar", "avx2", "avx512")
    for f in FIELDS:
        if f != "isa":
            assert r[f] >= 0, (f, r[f])
    for f in ["prefill_tok_s", "decode_tok_s", "measured_read_gbps", "peak_gflops",
              "prefill_gflops", "weight_bytes_per_token", "kv_bytes_per_token"]:
        assert r[f] > 0, f
    assert r["batch"] == batch and r["prompt_len"] == 24 and r["kv_cache_dtype"] == "BF16"
    assert close(r["active_bytes_per_token"],
                 r["weight_bytes_per_token"] + r["kv_bytes_per_token"])
    assert close(r["achieved_gbps"], r["active_bytes_per_token"] * r["decode_tok_s"] / 1e9)
    assert close(r["roofline_fraction"], r["achieved_gbps"] / r["measured_read_gbps"])
    assert close(r["roofline_tok_s"], r["measured_read_gbps"] * 1e9 / r["active_bytes_per_token"])
    assert close(r["peak_fraction"], r["prefill_gflops"] / r["peak_gflops"])
    # Nothing beats the limits measured in the same run (a tiny model is overhead-bound).
    assert r["roofline_fraction"] <= 1.05
    assert r["peak_fraction"] <= 1.05
    # The synchronisation estimate: regions per step x an empty region's cost over a step's time.
    step_s = batch / r["decode_tok_s"]
    assert close(r["sync_fraction"], r["regions_per_step"] * r["empty_region_us"] * 1e-6 / step_s)
    e2e = e2e_weight_bytes(mimo_bin, d)
    if batch == 1:
        assert close(r["weight_bytes_per_token"], e2e, 1e-6)
    else:  # tokens of a step share the weights read once (each distinct expert once)
        assert r["weight_bytes_per_token"] < e2e


def test_regions_per_step_do_not_depend_on_threads(mimo_bin, checkpoint):
    """The many-core model in docs/PERFORMANCE.md multiplies the fork-join regions of a decode step
    counted at 1 or 2 threads by a region's cost at 32 or 128: the count must be the workload's, not
    the pool's. Every layer runs at least its projections in parallel, the lm_head one more."""
    d = checkpoint("fp8")
    one = run_json(mimo_bin, d, threads=1)
    two = run_json(mimo_bin, d, threads=2)
    assert one["regions_per_step"] == two["regions_per_step"]
    cfg = json.load(open(f"{d}/config.json"))
    assert one["regions_per_step"] >= cfg["num_hidden_layers"] + 1
    assert one["regions_per_step"] == int(one["regions_per_step"])  # every step runs the same regions


def test_bench_model_bf16_precision_states_its_limit(mimo_bin, checkpoint):
    """--precision bf16: the GEMMs run vdpbf16ps where the CPU has it, so the peak
    probed is that instruction's (twice the fp32 FMA's flops per instruction); exact otherwise."""
    d = checkpoint("fp8")
    exact = run_json(mimo_bin, d)
    assert exact["precision"] == "exact" and exact["peak_instruction"] == "FMA"
    bf16 = run_json(mimo_bin, d, "--precision", "bf16")
    if bf16["precision"] == "exact":  # no AVX512_BF16 here: nothing changes
        assert bf16["peak_instruction"] == "FMA"
        return
    assert bf16["peak_instruction"] == "vdpbf16ps" and bf16["isa"] == "avx512"
    assert close(bf16["peak_fraction"], bf16["prefill_gflops"] / bf16["peak_gflops"])


def test_bench_model_int8_precision_states_its_limit(mimo_bin, checkpoint):
    """--precision int8 with int8 weights interleaved for the mode: the GEMMs run vpdpbusd where
    the CPU has AVX512_VNNI, so the peak probed is that instruction's (64 multiply-adds each), and
    no prompt beats it; the FMA's elsewhere (AVX2 vpmaddubsw, NEON: no int8 probe)."""
    d = checkpoint("fp8")
    r = run_json(mimo_bin, d, "--experts", "int8", "--dense", "int8", "--lm-head", "int8",
                 "--precision", "int8")
    if r["precision"] == "exact":  # scalar kernels: the mode runs exact
        return
    assert r["precision"] == "int8"
    assert r["peak_instruction"] in ("vpdpbusd", "FMA")
    # The CPU report's "vnni" row: usable = CPUID claimed it and vpdpbusd ran.
    report = subprocess.run([mimo_bin, "bench", "kernels", "--rows", "16", "--cols", "16",
                             "--reps", "1", "--membw", "1", "--threads", "1"],
                            capture_output=True, text=True, timeout=120).stdout
    vnni = re.search(r"^vnni\s+\S+\s+\S+\s+\S+\s+(yes|no)", report, re.M)
    assert vnni, report
    assert (r["peak_instruction"] == "vpdpbusd") == (r["isa"] == "avx512" and
                                                     vnni.group(1) == "yes"), (r, report)
    assert close(r["peak_fraction"], r["prefill_gflops"] / r["peak_gflops"])
    assert r["peak_fraction"] <= 1.05


def test_bench_model_rejects_bad_arguments(mimo_bin, checkpoint):
    p = subprocess.run([mimo_bin, "bench", "model", "--model", checkpoint("fp8"), "--gen-len",
                        "1"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "gen-len" in p.stderr
