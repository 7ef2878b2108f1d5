"""``tiresias-coordinator --executor slurm`` refuses to start, in one line with exit code 2
and nothing left behind, when it cannot reach Slurm (here: its configuration is missing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_no_slurm_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "missing.conf")}
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.service.cli", "--executor", "slurm",
         "--bind", f"ipc://{tmp_path}/c.sock", "--state", str(state)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    conf = tmp_path / "missing.conf"
    assert line == f"tiresias-coordinator: --executor slurm: SLURM_CONF={conf} is not a file"
    assert not state.exists()
