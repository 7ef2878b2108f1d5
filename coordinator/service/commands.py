"""What the run book asks of the executor, as values: kept until the journal transaction
that decided them commits, then handed over (``send``)."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.service.executor import Executor, Gang


@dataclass(frozen=True)
class LaunchGang:
    """Start every part of one planned gang."""

    gang: Gang


@dataclass(frozen=True)
class Signal:
    """Preempt: the signal to the parts on ``nodes``, SIGKILL after ``grace`` seconds."""

    job_id: str
    restart: int
    nodes: tuple[str, ...]
    signal: str
    grace: float


@dataclass(frozen=True)
class KillParts:
    """Stop the parts on ``nodes`` (after ``grace`` seconds to finish on their own)."""

    job_id: str
    restart: int
    nodes: tuple[str, ...]
    grace: float = 0.0


@dataclass(frozen=True)
class Forget:
    """The job is finished for good (``found``: the executor's id of a job it found)."""

    job_id: str
    found: str | None = None


Command = LaunchGang | Signal | KillParts | Forget


def send(commands: list[Command], executor: Executor) -> None:
    """Hand commands to the executor (after the transaction that decided them)."""
    for cmd in commands:
        if isinstance(cmd, LaunchGang):
            executor.launch(cmd.gang)
        elif isinstance(cmd, Signal):
            executor.signal(cmd.job_id, cmd.restart, cmd.nodes, cmd.signal, cmd.grace)
        elif isinstance(cmd, KillParts):
            executor.kill(cmd.job_id, cmd.restart, cmd.nodes, cmd.grace)
        else:
            executor.forget(cmd.job_id, cmd.found)
