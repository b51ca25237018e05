"""Tensor and expert parallelism over MPI (`mpirun -np N mimo ... --tensor-parallel-size N`)
against one process. Every split is by weight rows and every partial result is all-gathered (no
floating-point sum changes order), so the expectation is exact: logits bitwise equal to the
single-process run (which test_logits_vs_reference / test_mtp_logits hold to the float64
reference), greedy generation identical. Covers kv-head replication (N > a layer's kv heads),
fused qkv_proj at a TP other than the checkpoint's, the Flash FP8 K/V section grid, MXFP4 experts,
expert parallelism and MTP layers; a rank that cannot load stops the job with its rank and cause;
a hung rank trips the collective watchdog; a killed rank stops the job (mpirun names it); the server answers under mpirun and SIGTERM stops
every rank. Ranks run oversubscribed on loopback."""
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import numpy as np
import pytest
from local_server import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NANO = os.path.join(REPO, "models", "mimo-v2-nano")
MPIRUN = shutil.which("mpirun")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
IDS = "1,2,3,4,5,6,7,8,9,10,11;9,8,7,6,5;3,1,4,1,5,9,2,6,5,3,5,8,9,7"


def launcher(n):
    return [MPIRUN, "-np", str(n), "--oversubscribe", "--bind-to", "none"]


@pytest.fixture(scope="module")
def mpi(mimo_bin):
    if MPIRUN is None:
        pytest.fail("mpirun missing: scripts/setup-tests.sh installs openmpi-bin")
    p = subprocess.run([mimo_bin, "logits", "--model", "/nonexistent", "--ids", "1", "--out",
                        "/dev/null", "--tensor-parallel-size", "2"], capture_output=True,
                       text=True, env=ENV, timeout=60)
    if "built without MPI" in p.stderr:
        pytest.skip("this mimo was built with -DMIMO_MPI=OFF")
    return mimo_bin


def one_process(n, extra):
    """--expert-parallel only means something with N > 1 ranks (one process refuses it)."""
    return [e for e in extra if n > 1 or e != "--expert-parallel"]


def run_logits(mimo_bin, model, out, n=1, *extra, ids=IDS):
    cmd = [mimo_bin, "logits", "--model", model, "--ids", ids, "--out", str(out), "--threads", "1",
           *one_process(n, extra)]
    if n > 1:
        cmd = launcher(n) + cmd + ["--tensor-parallel-size", str(n)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr[-3000:]}"
    return np.fromfile(out, dtype="<f4")


# (variant, ranks, extra flags): what each case covers.
CASES = [
    ("fp8", 2, []),                    # Flash FP8: full-attention K/V section grid split 1 + 1
    ("fp8", 4, ["--mode", "decode"]),  # 2 full-attention kv heads on 4 ranks: replicated
    ("fp8", 2, ["--expert-parallel", "--kv-cache-dtype", "fp8"]),
    ("fp8-fused", 4, []),              # fused qkv_proj of TP 2 re-sectioned for 4 ranks
    ("fp8-fused", 2, ["--expert-parallel", "--chunk-size", "3"]),
    ("v2.6-flash", 2, ["--expert-parallel"]),  # MXFP4 experts, fused TP4 qkv at N = 2
    ("v2.6-flash", 4, ["--mode", "decode"]),   # MXFP4 experts split by rows
    ("tied", 2, ["--prefix-cache"]),   # tied lm_head (vocab rows of the embedding), sinks
    ("v2.5-pro", 4, ["--experts", "mxfp4"]),  # each rank quantizes its own expert slices at load
    ("fp8", 2, ["--expert-parallel", "--experts", "mxfp4"]),
    # --dense / --lm-head: each rank quantizes its own rows. MXFP4 blocks are 32 columns of one
    # row, so a rank's slice holds the same blocks as the whole weight; FP8's 128 x 128 blocks
    # match where a rank's rows start on a block, as here (a slice that does not would get other
    # blocks than one process, and so other logits).
    ("v2.5-pro", 2, ["--dense", "mxfp4", "--lm-head", "mxfp4"]),
    ("fp8", 2, ["--dense", "fp8", "--lm-head", "fp8"]),
    # int8 weights (32-column blocks of one row, as MXFP4) and the int8-activation mode: a rank's
    # rows reduce as in one process.
    ("fp8", 2, ["--experts", "int8", "--dense", "int8", "--lm-head", "int8", "--precision",
                "int8"]),
]


@pytest.mark.parametrize("variant,n,extra", CASES)
def test_logits_equal_one_process(mpi, checkpoint, tmp_path, variant, n, extra):
    model = checkpoint(variant)
    want = run_logits(mpi, model, tmp_path / "one.bin", 1, *extra)
    got = run_logits(mpi, model, tmp_path / "tp.bin", n, *extra)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("variant,layer,n,extra", [
    ("fp8", 0, 4, []), ("fp8-fused", 2, 4, ["--mode", "decode"]),
    ("fp8-fused", 1, 2, ["--expert-parallel"])])
def test_mtp_logits_equal_one_process(mpi, checkpoint, tmp_path, variant, layer, n, extra):
    model = checkpoint(variant)
    ids = ",".join(str(x) for x in np.random.default_rng(3).integers(0, 500, 17))
    args = ["--mtp-layer", str(layer), *extra]
    want = run_logits(mpi, model, tmp_path / "one.bin", 1, *args, ids=ids)
    got = run_logits(mpi, model, tmp_path / "tp.bin", n, *args, ids=ids)
    np.testing.assert_array_equal(got, want)


def generate(mimo_bin, model, n, *extra):
    cmd = [mimo_bin, "generate", "--model", model, "--ids", "5,17,33,2,9", "--max-tokens", "24",
           "--temperature", "0", "--threads", "1", "--json", *one_process(n, extra)]
    if n > 1:
        cmd = launcher(n) + cmd + ["--tensor-parallel-size", str(n)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr[-3000:]}"
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert len(lines) == 1, p.stdout  # only rank 0 writes results
    return json.loads(lines[0])["output_ids"]


@pytest.mark.parametrize("variant,n,extra", [("fp8", 2, []), ("fp8-fused", 4, ["--expert-parallel"])])
def test_greedy_generation_identical(mpi, checkpoint, variant, n, extra):
    model = checkpoint(variant)
    want = generate(mpi, model, 1, *extra)
    assert len(want) == 24
    assert generate(mpi, model, n, *extra) == want


def test_rank_that_cannot_load_stops_the_job_naming_it(mpi, checkpoint):
    # MPMD: rank 1 gets a directory that does not exist (as on a host without the checkpoint).
    common = ["logits", "--ids", "1,2,3", "--out", "/dev/null", "--tensor-parallel-size", "2"]
    cmd = [MPIRUN, "--oversubscribe", "-np", "1", mpi, *common, "--model", checkpoint("fp8"),
           ":", "-np", "1", mpi, *common, "--model", "/nonexistent/ckpt"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    assert p.returncode != 0
    assert "rank 1 of 2 could not load the model" in p.stderr, p.stderr[-2000:]
    assert "/nonexistent/ckpt" in p.stderr
    assert time.time() - t0 < 60


def test_world_size_must_match(mpi, checkpoint):
    cmd = launcher(2) + [mpi, "logits", "--model", checkpoint("fp8"), "--ids", "1,2", "--out",
                         "/dev/null", "--tensor-parallel-size", "4"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    assert p.returncode != 0 and "must equal the number of MPI ranks" in p.stderr


def _gone(pid, timeout=20):
    """True once pid has exited (or is a zombie), polling: a rank may still be dying when its
    launcher has already returned."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.2)
    return False


def _ranks(mpirun_pid):
    """pid of each mimo rank started by this mpirun, by OMPI_COMM_WORLD_RANK."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                ppid = int([l for l in f if l.startswith("PPid:")][0].split()[1])
            if ppid != mpirun_pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
        except (OSError, KeyError, IndexError, ValueError):
            continue
    return out


class MpiServer:
    def __init__(self, mimo_bin, n, *flags):
        self.port = free_port()
        self.proc = subprocess.Popen(
            launcher(n) + [mimo_bin, "serve", "--model", NANO, "--port", str(self.port),
                           "--threads", "1", "--tensor-parallel-size", str(n), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        deadline = time.time() + 180
        while time.time() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                time.sleep(0.3)
        self.proc.kill()
        raise RuntimeError("server did not become healthy: " + self.proc.communicate()[1][-3000:])

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def chat(self, content, max_tokens=24):
        body = {"messages": [{"role": "user", "content": content}], "temperature": 0,
                "max_tokens": max_tokens, "chat_template_kwargs": {"enable_thinking": False}}
        req = urllib.request.Request(self.url("/v1/chat/completions"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())


@pytest.fixture(scope="module")
def nano():
    assert os.path.isdir(NANO), "models/mimo-v2-nano missing: run scripts/setup.sh"
    return NANO


def test_server_under_mpirun_answers_and_sigterm_stops_every_rank(mpi, nano):
    one = MpiServer(mpi, 1)
    try:
        want = one.chat("What is 27 + 15?")
    finally:
        one.proc.terminate()
        one.proc.communicate(timeout=60)
    s = MpiServer(mpi, 2, "--expert-parallel")
    try:
        ranks = _ranks(s.proc.pid)
        assert sorted(ranks) == [0, 1]
        got = s.chat("What is 27 + 15?")
        assert got["choices"][0]["message"] == want["choices"][0]["message"]
        assert got["usage"] == want["usage"]
    finally:
        s.proc.send_signal(signal.SIGTERM)
        _, err = s.proc.communicate(timeout=60)
    assert "mimo serve: stopped" in err, err[-2000:]
    for pid in ranks.values():
        assert _gone(pid)


def test_hung_rank_trips_the_watchdog(mpi, nano):
    s = MpiServer(mpi, 2, "--collective-timeout", "3")
    try:
        ranks = _ranks(s.proc.pid)
        os.kill(ranks[1], signal.SIGSTOP)  # rank 1 hangs: it never joins the next collective
        t0 = time.time()
        with pytest.raises(Exception):
            s.chat("Hello", max_tokens=4)
        _, err = s.proc.communicate(timeout=60)
        assert time.time() - t0 < 60
        assert "rank 0 of 2" in err and "did not complete within 3 s" in err, err[-2000:]
    finally:
        for pid in ranks.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if s.proc.poll() is None:
            s.proc.kill()


def test_rank_that_dies_stops_the_job_naming_it(mpi, nano):
    s = MpiServer(mpi, 2)
    ranks = _ranks(s.proc.pid)
    assert sorted(ranks) == [0, 1], ranks
    try:
        os.kill(ranks[1], signal.SIGKILL)
        _, err = s.proc.communicate(timeout=60)  # mpirun stops rank 0 too: no hang
        assert s.proc.returncode != 0
        assert "rank 1" in err and "signal 9" in err, err[-2000:]
        assert _gone(ranks[0])
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
