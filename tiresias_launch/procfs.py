"""``/proc/<pid>/stat``, parsed in one place: the command name may hold spaces and
parentheses, so the fields are what follows its last ``)``."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int | str = "self") -> list[str]:
    """The fields after the command name (proc(5) field 3 is index 0). Raises OSError when
    the process is gone or not readable."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def parent_pid(pid: int | str = "self") -> int:
    return int(stat_fields(pid)[1])


def start_ticks(pid: int | str = "self") -> int:
    """When the process started, in clock ticks since boot: with the pid, it names one
    process (a pid is reused, its start time is not)."""
    return int(stat_fields(pid)[19])
