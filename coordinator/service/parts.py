"""The processes of one node's part of a job run, as the agent keeps them: how they are
started (their own session, as their owner, dying with the agent), and how their exits add
up to the part's outcome."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.protocol import PartOutcome
from coordinator.service.identity import user_name
from coordinator.service.profiler import Tapped
from tiresias_launch.contract import EXIT_CHECKPOINTED

LOG_TAIL_BYTES = 2048
PR_SET_PDEATHSIG = 1

_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before any fork


def die_with_agent() -> None:
    """Child side of fork (no locks, no imports): own session, and SIGKILL when the agent
    dies, since a restarted agent cannot adopt it and the coordinator resumes it elsewhere."""
    os.setsid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class RunAs:
    """The OS user a job's processes become (``Popen`` sets groups, gid, then uid)."""

    name: str
    uid: int
    gid: int
    groups: list[int]
    home: str


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
    return RunAs(owner, pw.pw_uid, pw.pw_gid, os.getgrouplist(owner, pw.pw_gid), pw.pw_dir)


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


#: Exit code reported for a process that could not be started (as a shell does).
EXIT_NOT_STARTED = 127


#: Exit statuses of a process the preemption signal killed with its default action (a script
#: with nothing checkpointable): preempted without a checkpoint, not failed.
PREEMPTION_DEATHS = frozenset(-s for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2))


@dataclass
class Proc:
    """One process of a part; ``popen`` is None when it could not be started, and then
    ``note`` says why."""

    role: str
    task_index: int
    popen: subprocess.Popen[bytes] | None
    log_path: Path
    code: int | None = None
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.role}-{self.task_index}"

    def signal(self, sig: signal.Signals) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def tail(self) -> str:
        return self.note or log_tail(self.log_path)


@dataclass
class Part:
    """This node's processes of one (re)start of a job."""

    job_id: str
    restart: int
    procs: list[Proc]
    #: Why we are stopping it, once we are: "preempt", "kill" or "stop" (peer failed/ended).
    stopping: str | None = None
    deadline: float | None = None
    failed: bool = False
    chief_done: bool = False
    unprompted_checkpoint: bool = False
    unprompted_preemption: bool = False  # a process died of a preemption signal we never sent
    reported: dict[str, Any] | None = None
    tapped: Tapped | None = None  # a PS job run under ibverbs-tap: its traffic is measured

    @property
    def alive(self) -> list[Proc]:
        return [p for p in self.procs if p.code is None]

    def outcome(self) -> PartOutcome:
        """Part outcome: failed beats everything; then a chief that finished before any
        preemption signal; then checkpoints. A part stopped by the preemption signal is
        ``checkpointed`` only when its chief exited 75; any other end (killed by the signal
        or at the deadline, or exit 0 from a framework that caught the signal and returned
        normally) is ``preempted``: stopped without a checkpoint, to be restarted."""
        if self.failed:
            return PartOutcome.FAILED
        codes = [p.code for p in self.procs]
        if self.chief_done:
            return PartOutcome.COMPLETED
        if self.stopping == "preempt":
            chief = [p.code for p in self.procs if p.role == "chief"] or codes
            return (
                PartOutcome.CHECKPOINTED if chief[0] == EXIT_CHECKPOINTED else PartOutcome.PREEMPTED
            )
        if all(c == 0 for c in codes):
            return PartOutcome.COMPLETED
        if self.unprompted_checkpoint:
            return PartOutcome.CHECKPOINTED
        if self.unprompted_preemption:
            return PartOutcome.PREEMPTED
        return PartOutcome.KILLED
