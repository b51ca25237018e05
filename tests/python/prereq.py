"""What a test needs from outside itself (a file, a binary, a module, a program on PATH).

Locally a missing prerequisite skips the test, with the reason. Under CI=true it fails the test
instead: a CI run must never go green by skipping what it was meant to check. .ci/run sets CI=true.
"""
import importlib
import os
import shutil

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require(ok: bool, why: str) -> None:
    """Skips (fails under CI=true) with `why` unless `ok`."""
    if ok:
        return
    if in_ci():
        pytest.fail(f"prerequisite missing under CI=true: {why}", pytrace=False)
    pytest.skip(why)


def require_file(path: str, hint: str = "") -> str:
    require(os.path.exists(path), f"{path} not found" + (f" ({hint})" if hint else ""))
    return path


def require_program(name: str) -> str:
    path = shutil.which(name)
    require(path is not None, f"{name} not on PATH")
    return path


def require_module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        require(False, f"python module {name} not importable: {e}")


def beside_checkout(path: str, what: str) -> str:
    """A file outside this repository (the ../shared folder beside a development checkout): a
    cross-check against it skips where it is absent, under CI too, since no script of the project
    can install it and a clean clone may stand alone. The project's own copy (e.g. the committed
    chat template) is what the other tests use."""
    if not os.path.exists(path):
        pytest.skip(f"{path} not found ({what}; not part of this repository)")
    return path
