"""Shared pytest fixtures for the Python suite (run with /usr/bin/python3 -m pytest tests/python).

* mimo_bin: the CLI under test, $MIMO_BIN or <repo>/build/bin/mimo.
* mimo_launcher: a command prefix for it, $MIMO_LAUNCHER split like a shell would (e.g.
  "qemu-aarch64 -L /usr/aarch64-linux-gnu" for the aarch64 build, scripts/test-aarch64.sh); [].
* checkpoint(variant): a generated tiny MiMo-V2 checkpoint dir (scripts/make_tiny_model.py),
  written once per session into a session tmp dir.
* reference(variant): the PyTorch reference (scripts/mimo_reference.py) for that checkpoint, cached.

Every test's body runs under a time limit, $MIMO_TEST_TIMEOUT seconds (default 240): a test that
hangs fails with its name and stack instead of running into CI's limit. A test whose work is
known to take longer says so with @pytest.mark.time_limit(seconds) (the larger of the two
applies). Session fixtures (checkpoint generation) are not counted.
"""
import os
import shlex
import signal
import sys
import traceback

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)

import make_tiny_model  # noqa: E402
import mimo_reference  # noqa: E402

VARIANTS = list(make_tiny_model.VARIANTS)


@pytest.fixture(scope="session")
def repo_root():
    return REPO


@pytest.fixture(scope="session")
def mimo_bin():
    return os.environ.get("MIMO_BIN", os.path.join(REPO, "build", "bin", "mimo"))


@pytest.fixture(scope="session")
def mimo_launcher():
    return shlex.split(os.environ.get("MIMO_LAUNCHER", ""))


@pytest.fixture(scope="session")
def checkpoints_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def checkpoint(checkpoints_dir):
    made = {}

    def get(variant: str) -> str:
        if variant not in made:
            d = str(checkpoints_dir / variant)
            make_tiny_model.write_checkpoint(d, variant, seed=0)
            made[variant] = d
        return made[variant]

    return get


@pytest.fixture(scope="session")
def reference(checkpoint):
    refs = {}

    def get(variant: str) -> "mimo_reference.Reference":
        if variant not in refs:
            refs[variant] = mimo_reference.load_reference(checkpoint(variant))
        return refs[variant]

    return get


TEST_TIMEOUT = int(os.environ.get("MIMO_TEST_TIMEOUT", "240"))


def pytest_configure(config):
    config.addinivalue_line("markers", "time_limit(seconds): this test's own time limit, when "
                                       "longer than $MIMO_TEST_TIMEOUT")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("time_limit")
    limit = max(TEST_TIMEOUT, int(marker.args[0])) if marker else TEST_TIMEOUT

    def expire(signum, frame):
        stack = "".join(traceback.format_stack(frame))
        raise TimeoutError(f"{item.nodeid} ran longer than {limit} s (MIMO_TEST_TIMEOUT or its "
                           f"time_limit mark); it was at:\n{stack}")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
