"""Run the models/ training scripts as subprocesses, the way users and the launcher do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models"


def script_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Quiet TensorFlow; ``models`` importable from the checkout whatever the cwd."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONWARNINGS": "ignore",
        **(extra or {}),
    }


def run(
    argv: Sequence[str], cwd: Path, extra: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=script_env(extra), capture_output=True, text=True, timeout=timeout
    )


def python(script: str, *args: str) -> list[str]:
    return [sys.executable, str(MODELS / script), *args]


def launched(script: str, *args: str) -> list[str]:
    """How the launcher starts every script (``python -m tiresias_launch.exec``)."""
    return [sys.executable, "-m", "tiresias_launch.exec", str(MODELS / script), *args]


def wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in (log.read_text(errors="replace") if log.exists() else ""):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"never printed {text!r}:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)


def first_logged_step(log: Path) -> int:
    line = next(ln for ln in log.read_text().splitlines() if ln.startswith("step "))
    return int(line.split()[1])
