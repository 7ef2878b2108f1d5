"""What both executors' node sides share: running a job's processes as their owner, private
log files, reading log tails and chunks, and the exit statuses that mean a process never
started or was stopped by the preemption signal."""

from __future__ import annotations

import os
import pwd
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.service.identity import user_name

LOG_TAIL_BYTES = 2048


@dataclass(frozen=True)
class RunAs:
    """The OS user a job's processes become (``Popen`` sets groups, gid, then uid)."""

    name: str
    uid: int
    gid: int
    groups: list[int]
    home: str
    shell: str = "/bin/sh"


def run_as(owner: str) -> RunAs | None:
    """Credentials for ``owner``'s processes; None when that is the agent's own user.
    Raises ValueError when this agent cannot run them as their owner."""
    me = os.geteuid()
    if owner == user_name(me):
        return None
    try:
        pw = pwd.getpwnam(owner)
    except KeyError:
        raise ValueError(f"user {owner!r} does not exist on this node") from None
    if pw.pw_uid == me:
        return None
    if me != 0:
        raise ValueError(
            f"this agent runs as {user_name(me)!r} and cannot run jobs of {owner!r} as their "
            f"owner (run the agent as root)"
        )
    return RunAs(owner, pw.pw_uid, pw.pw_gid, os.getgrouplist(owner, pw.pw_gid), pw.pw_dir,
                 pw.pw_shell or "/bin/sh")  # fmt: skip


def private_file(path: Path) -> int:
    """An append-only descriptor of ``path``, created 0600 (logs hold what jobs print)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def read_logs(logdir: Path, offsets: Mapping[str, int], limit: int) -> dict[str, dict[str, Any]]:
    """Each ``*.log`` of a job's part after its ``offsets`` entry (from the start when that
    is past its end), ``limit`` bytes for all of them together: name → offset, size, data.
    An unreadable file is left out."""
    files: dict[str, dict[str, Any]] = {}
    paths = sorted(logdir.glob("*.log")) if logdir.is_dir() else []
    per_file = limit // max(1, len(paths))
    for path in paths:
        start = offsets.get(path.name, 0)
        try:
            with path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                if not 0 <= start <= size:
                    start = 0
                f.seek(start)
                data = f.read(max(0, per_file))
        except OSError:
            continue
        files[path.name] = {"offset": start + len(data), "size": size,
                            "data": data.decode(errors="replace")}  # fmt: skip
    return files


#: Exit statuses of a process the preemption signal killed with its default action (a script
#: with nothing checkpointable): preempted without a checkpoint, not failed.
PREEMPTION_DEATHS = frozenset(-s for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2))
