"""How a run's parts' ends settle it, purely: why one part's end stops its run (its
history's ``Stop``), and what the core is told once every part has ended (``run_outcome``);
the run book (``runs.py``) applies them."""

from __future__ import annotations

from collections.abc import Mapping
from signal import SIGKILL, SIGTERM
from typing import Any

from coordinator.core.model import ExitOutcome, Stop, StopReason
from coordinator.protocol import EXIT_NOT_STARTED, PartOutcome, Stopping
from coordinator.service.records import Run
from tiresias_launch.contract import EXIT_CHECKPOINTED

#: Part outcomes that settle a run unless a failure did.
SETTLING = (
    PartOutcome.COMPLETED,
    PartOutcome.CHECKPOINTED,
    PartOutcome.PREEMPTED,
    PartOutcome.LOST,
)


def part_stop(
    outcome: PartOutcome,
    node: str,
    processes: list[Mapping[str, Any]],
    stopping: Stopping | None,
) -> Stop | None:
    """Why one part's end stops its run, when the coordinator did not stop it itself: a
    failure (its own exit status first: it may have made the agent stop its peers), a
    process that could not start, a SIGKILL or signal from outside Tiresias, a node lost.
    None: it completed, or the coordinator is stopping it."""
    codes = [p["code"] for p in processes if p["code"] not in (0, None)]
    if outcome == PartOutcome.FAILED:
        own = [c for c in codes if c > 0 and c != EXIT_CHECKPOINTED]
        if EXIT_NOT_STARTED in own:
            return Stop(StopReason.NOT_STARTED, EXIT_NOT_STARTED, node)
        killed = [c for c in codes if c < 0 and c != -SIGTERM]  # SIGTERM: the agent's, to peers
        code = (own or killed or codes or [None])[0]
        return Stop(StopReason.KILLED if code == -SIGKILL else StopReason.FAILED, code, node)
    if stopping is not None:
        return None
    if outcome == PartOutcome.LOST:  # an executor's: it never started there
        not_started = EXIT_NOT_STARTED in codes
        return Stop(StopReason.NOT_STARTED if not_started else StopReason.NODE_LOST, node=node)
    if outcome in (PartOutcome.CHECKPOINTED, PartOutcome.PREEMPTED):  # SIGTERM from outside
        return Stop(StopReason.SIGNALLED, (codes or [None])[0], node)
    if outcome == PartOutcome.KILLED:
        return Stop(StopReason.KILLED, (codes or [None])[0], node)
    return None


def run_outcome(run: Run) -> ExitOutcome:
    """What the core is told when every part of ``run`` has ended."""
    decided = run.decided
    if decided in (PartOutcome.FAILED, PartOutcome.COMPLETED):
        return ExitOutcome(decided)
    if decided == PartOutcome.LOST:
        return ExitOutcome.LOST
    stopped = run.stopping in (Stopping.PREEMPT, Stopping.KILL)
    if decided in (PartOutcome.CHECKPOINTED, PartOutcome.PREEMPTED) or stopped:
        return ExitOutcome.CHECKPOINTED  # resumed from its last checkpoint, if any
    return ExitOutcome.LOST
