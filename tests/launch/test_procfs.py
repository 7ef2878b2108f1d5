"""``/proc/<pid>/stat`` fields are found after the command name, whatever that name holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiresias_launch.procfs import parent_pid, start_ticks, stat_fields

RENAME = (
    "import ctypes, sys; ctypes.CDLL(None).prctl(15, b'x) 1 (y z', 0, 0, 0); "
    "print('renamed', flush=True); sys.stdin.read()"
)


@pytest.mark.slow  # starts a process
def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", RENAME], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"renamed\n"
        assert "(x) 1 (y z)" in Path(f"/proc/{child.pid}/stat").read_text()
        assert parent_pid(child.pid) == os.getpid()
        assert stat_fields(child.pid)[0] in "RSD"  # its state, the first field after the name
        assert start_ticks(child.pid) >= start_ticks()  # started after this process
    finally:
        child.kill()
        child.wait()
