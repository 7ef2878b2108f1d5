"""Helpers shared by test directories that run real services and jobs (``tests/service``,
``tests/e2e``): ``wait_until`` instead of sleeps, free ports, the repository's paths."""

from __future__ import annotations

import importlib
import importlib.util
import socket
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FAKE_JOB = REPO / "examples" / "fake_job.py"


class Lazy(types.ModuleType):
    """A module imported when a test first uses it, not when its test file is collected
    (``tf = Lazy("tensorflow")`` at the top of a test file)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("_", "pytest")):  # pytest's collection looks for its markers
            raise AttributeError(name)
        return getattr(importlib.import_module(self.__name__), name)


def needs(module: str, reason: str) -> pytest.MarkDecorator:
    """Skip unless ``module`` is installed, found without importing it: collecting the
    tests imports no framework, so the fast tier starts in seconds."""
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=reason)


#: No wait gives up sooner: a timeout only bounds how long a failing test takes, and a
#: loaded machine (four TensorFlow imports, another job beside the suite) is slow, not wrong.
MIN_WAIT = 60.0


def wait_until(
    pred: Callable[[], Any], timeout: float = 20.0, what: str = "condition", interval: float = 0.05
) -> Any:
    """Poll ``pred`` until it returns something truthy; fail with ``what`` once at least
    ``timeout`` (and MIN_WAIT) seconds have passed."""
    timeout = max(timeout, MIN_WAIT)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = pred()
        except Exception as e:  # e.g. the coordinator is restarting
            last_error = e
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}"
        + (f" (last error: {last_error})" if last_error else "")
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
