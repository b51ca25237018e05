"""`mimo bench attention --json`: the object's fields agree with each other and with the shape
asked for (K/V bytes counted from the geometry, GB/s and GFLOP/s from the best time, the ratios
from the probes of the same run), for every cache dtype and both backends; bad arguments are
named. Not a timed test: speed is whatever the machine gives."""
import json
import subprocess

import pytest

ELEM = {"f32": 4, "bf16": 2, "fp8": 1}


def run(mimo_bin, *args):
    return subprocess.run([mimo_bin, "bench", "attention", "--threads", "2", "--reps", "3",
                           "--probe-mib", "64", *args], capture_output=True, text=True,
                          timeout=120)


def close(a, b, rel=2e-3):
    return abs(a - b) <= rel * max(abs(a), abs(b))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "fp8"])
@pytest.mark.parametrize("backend,queries", [("cpu_paged", 1), ("cpu_paged", 3), ("reference", 1)])
def test_bench_attention_json_is_consistent(mimo_bin, dtype, backend, queries):
    ctx, kvh, heads, dk, dv = 2100, 2, 16, 192, 128
    p = run(mimo_bin, "--context", str(ctx), "--kv-heads", str(kvh), "--heads", str(heads),
            "--head-dim", str(dk), "--v-head-dim", str(dv), "--kv-cache-dtype", dtype,
            "--backend", backend, "--queries", str(queries), "--json")
    assert p.returncode == 0, p.stderr
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    assert len(lines) == 1, p.stdout
    r = json.loads(lines[0])
    assert r["backend"] == backend and r["kv_cache_dtype"] == dtype
    assert r["context"] == ctx and r["queries"] == queries and r["threads"] == 2
    assert r["kv_bytes"] == ctx * kvh * (dk + dv) * ELEM[dtype]
    assert 0 < r["best_ms"] <= r["median_ms"]
    assert close(r["achieved_gbps"], r["kv_bytes"] / (r["best_ms"] * 1e-3) / 1e9)
    flops = sum(2.0 * heads * (dk + dv) * (ctx - queries + 1 + i) for i in range(queries))
    assert close(r["gflops"], flops / (r["best_ms"] * 1e-3) / 1e9)
    assert close(r["bandwidth_fraction"], r["achieved_gbps"] / r["measured_read_gbps"])
    assert close(r["peak_fraction"], r["gflops"] / r["peak_gflops"])
    assert r["peak_fraction"] <= 1.05  # nothing beats the probe of the same run


@pytest.mark.parametrize("args,needle", [
    (["--heads", "5", "--kv-heads", "2"], "multiple of kv-heads"),
    (["--context", "2", "--queries", "3"], "context >= queries"),
    (["--kv-cache-dtype", "int4"], "int4"),
    (["--backend", "nope"], "unknown backend 'nope'"),
    (["--reps", "0"], "reps"),
])
def test_bench_attention_rejects_bad_arguments(mimo_bin, args, needle):
    p = run(mimo_bin, *args)
    assert p.returncode == 2 and needle in p.stderr, p.stderr
