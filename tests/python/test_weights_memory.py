"""Weights larger than memory (issue 28): `--weights-memory auto|copy|mmap`.

The `weights-mmap` checkpoint (make_tiny_model.py, 404 MB, written in seconds) runs under a
memory cgroup whose limit is 200 MB below its size. There `auto` must serve the weights from the
page cache (the mapped file's pages are charged to the cgroup and reclaimed under its limit), say
so on stderr naming the shortfall, and produce exactly the greedy tokens of an unlimited run;
an explicit `--weights-memory copy` must be refused with a clear error before anything is copied,
not killed by the OOM killer half way. Without a writable memory cgroup (cgroup v1 or v2 as
root, or `systemd-run --scope -p MemoryMax=`), the test skips."""
import json
import os
import shutil
import subprocess
import uuid

import pytest

import make_tiny_model as M

IDS = "1,17,300,4000,5,62,777,1024"
TOKENS = 12
BELOW = 200 * 1000 * 1000  # the limit: this many bytes below the checkpoint's size


def mounts():
    """(cgroup v1 memory mount, cgroup v2 mount) from /proc/self/mountinfo, None where absent."""
    v1 = v2 = None
    try:
        lines = open("/proc/self/mountinfo").read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        pre, _, post = line.partition(" - ")
        f, tail = pre.split(), post.split()
        if len(f) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup" and "memory" in tail[2].split(",") and v1 is None:
            v1 = f[4]
        elif tail[0] == "cgroup2" and v2 is None:
            v2 = f[4]
    return v1, v2


class Limited:
    """Runs commands under a memory limit: a fresh cgroup (v1 memory.limit_in_bytes or v2
    memory.max) the child joins before exec'ing, or a systemd scope with MemoryMax."""

    def __init__(self, limit):
        self.limit, self.dir, self.systemd = limit, None, False
        v1, v2 = mounts()
        name = "mimo-test-" + uuid.uuid4().hex[:8]
        for root, limit_file in ((v1, "memory.limit_in_bytes"), (v2, "memory.max")):
            if root is None:
                continue
            d = os.path.join(root, name)
            try:
                os.mkdir(d)
            except OSError:
                continue
            try:
                with open(os.path.join(d, limit_file), "w") as f:
                    f.write(str(limit))
                if limit_file == "memory.limit_in_bytes":  # no swap to escape into
                    try:
                        with open(os.path.join(d, "memory.memsw.limit_in_bytes"), "w") as f:
                            f.write(str(limit))
                    except OSError:
                        pass
                self.dir = d
                return
            except OSError:
                os.rmdir(d)
        if shutil.which("systemd-run") and os.path.isdir("/run/systemd/system"):
            probe = subprocess.run(["systemd-run", "--scope", "--quiet", "-p", "MemoryMax=1G",
                                    "true"], capture_output=True, timeout=30)
            self.systemd = probe.returncode == 0

    def ok(self):
        return self.dir is not None or self.systemd

    def argv(self, cmd):
        if self.dir:
            procs = os.path.join(self.dir, "cgroup.procs")
            return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"] + cmd
        return ["systemd-run", "--scope", "--quiet", "-p", f"MemoryMax={self.limit}",
                "-p", "MemorySwapMax=0"] + cmd

    def peak(self):
        """The cgroup's largest charge so far (v1 max_usage_in_bytes, v2 memory.peak), or None."""
        for name in ("memory.max_usage_in_bytes", "memory.peak"):
            try:
                return int(open(os.path.join(self.dir or "", name)).read())
            except (OSError, ValueError):
                continue
        return None

    def close(self):
        if self.dir:
            os.rmdir(self.dir)


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("weights-mmap"))
    M.write_checkpoint(d, "weights-mmap")
    return d


def evict(d):
    """Drops the checkpoint's pages from the page cache. cgroup v1 charges a page to the cgroup
    that first brought it in: pages left cached by this process or an earlier run would be read
    by the limited child without counting against its limit, and nothing would be tested."""
    fd = os.open(os.path.join(d, "model.safetensors"), os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def generate(mimo_bin, d, *extra, wrap=None):
    if wrap is not None:
        evict(d)
    else:
        wrap = lambda c: c  # noqa: E731
    cmd = [mimo_bin, "generate", "--model", d, "--ids", IDS, "--max-tokens", str(TOKENS),
           "--ignore-eos", "--max-model-len", "256", "--json", *extra]
    return subprocess.run(wrap(cmd), capture_output=True, text=True, timeout=120)


def test_weights_larger_than_the_memory_limit(mimo_bin, big_checkpoint):
    size = os.path.getsize(os.path.join(big_checkpoint, "model.safetensors"))
    assert 350e6 < size < 450e6, size
    limit = size - BELOW
    lim = Limited(limit)
    if not lim.ok():
        pytest.skip("no writable memory cgroup (v1 or v2) and no systemd-run scope here")
    try:
        # Unlimited: auto finds room and copies, silently.
        free = generate(mimo_bin, big_checkpoint)
        assert free.returncode == 0, free.stderr
        assert "page cache" not in free.stderr, free.stderr
        want = json.loads(free.stdout)["output_ids"]
        assert len(want) == TOKENS

        # Limited, auto: from the page cache, with the shortfall named, the same tokens.
        auto = generate(mimo_bin, big_checkpoint, wrap=lim.argv)
        assert auto.returncode == 0, (auto.returncode, auto.stderr)
        err = auto.stderr
        assert "mimo generate: warning: weights 0.40 GB + KV cache" in err, err
        assert "(cgroup memory limit" in err and "serving the weights from the page cache " \
            "(--weights-memory mmap), expect slower decode" in err, err
        assert json.loads(auto.stdout)["output_ids"] == want
        peak = lim.peak()  # the limit did bind: the mapped pages were charged up to it
        assert peak is None or peak > 0.8 * limit, (peak, limit)

        # Limited, explicit copy: refused before copying, exit 1 (not an OOM kill: -9 / 137).
        copy = generate(mimo_bin, big_checkpoint, "--weights-memory", "copy", wrap=lim.argv)
        assert copy.returncode == 1, (copy.returncode, copy.stderr)
        assert "error: --weights-memory copy: weights 0.40 GB + KV cache" in copy.stderr
        assert "the copy cannot fit; use --weights-memory mmap" in copy.stderr, copy.stderr

        # Limited, explicit mmap: silent, same tokens.
        mmap = generate(mimo_bin, big_checkpoint, "--weights-memory", "mmap", wrap=lim.argv)
        assert mmap.returncode == 0, (mmap.returncode, mmap.stderr)
        assert "warning" not in mmap.stderr, mmap.stderr
        assert json.loads(mmap.stdout)["output_ids"] == want
    finally:
        lim.close()


def test_bad_weights_memory_value_is_refused(mimo_bin, checkpoint):
    p = subprocess.run([mimo_bin, "generate", "--model", checkpoint("bf16"), "--ids", "1,2",
                        "--weights-memory", "swap"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "--weights-memory must be copy, mmap or auto" in p.stderr, p.stderr
