"""The fast tier stays fast: collecting the whole suite imports no training framework (a
module-level ``import tensorflow`` or ``pytest.importorskip`` costs every run 10-20 s), and
the tiers split where tests/conftest.py says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROBE, TESTS

pytestmark = pytest.mark.slow  # starts real processes


def test_collecting_the_suite_imports_no_framework(tmp_path: Path) -> None:
    probe = tmp_path / "loaded.json"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=TESTS.parent,
        env={**os.environ, PROBE: str(probe)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert json.loads(probe.read_text()) == []


def test_real_processes_are_slow_and_pure_tests_fast(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow"],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    fast = out.stdout
    assert "tests/core/test_scheduler.py::" in fast and "tests/service/test_runs.py::" in fast
    assert "tests/service/test_phantom.py::" not in fast  # starts real agents
    assert "tests/corpus/" not in fast and "tests/pytorch/" not in fast
