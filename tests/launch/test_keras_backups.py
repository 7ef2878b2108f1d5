"""A Keras ``fit`` that backs itself up (``BackupAndRestore``) under the real launcher: a
preemption signal that arrives while the callback writes its backup stops the process
once the backup is whole, so the next run resumes from it, never from a torn file."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from coordinator.gang import GangRequest

from .gangs import SCRIPTS, start

pytestmark = pytest.mark.tf
TIMEOUT = 180
SCRIPT = str(SCRIPTS / "fit_backup_signalled_mid_write.py")


def test_a_signal_during_a_backup_stops_fit_once_the_backup_is_whole(tmp_path: Path) -> None:
    backup = str(tmp_path / "backup")
    first = start(GangRequest((SCRIPT, backup, "1000", "2")), tmp_path)
    assert first.wait(TIMEOUT) == [-signal.SIGTERM], first.tails()
    log = first.logs[0].read_text()
    assert "SIGTERM while backing up epoch 2" in log and "Epoch 3/" not in log, log

    second = start(GangRequest((SCRIPT, backup, "4", "0")), tmp_path, restart=1)
    assert second.wait(TIMEOUT) == [0], second.tails()
    resumed = second.logs[0].read_text()
    assert re.findall(r"^Epoch (\d+)/4$", resumed, flags=re.M) == ["3", "4"], resumed
    assert "done, optimizer at 256 iterations" in resumed  # 4 epochs of 64 batches
