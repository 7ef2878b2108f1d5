"""The processes of one node's part of a job run, as the agent keeps them: how they are
started (their own session, dying with the agent), and how their exits add up to the
part's outcome."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.executors.node import log_tail
from coordinator.protocol import PartOutcome, Stopping
from coordinator.service.profiler import Tapped
from tiresias_launch.contract import EXIT_CHECKPOINTED

PR_SET_PDEATHSIG = 1

_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before any fork


def die_with_agent() -> None:
    """Child side of fork (no locks, no imports): own session, and SIGKILL when the agent
    dies, since a restarted agent cannot adopt it and the coordinator resumes it elsewhere."""
    os.setsid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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
    #: Why we are stopping it, once we are (``stop``: a peer process failed or ended).
    stopping: Stopping | None = None
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
        if self.stopping == Stopping.PREEMPT:
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
