"""Starts the Slurm executor has accepted but not submitted to Slurm yet.

- **Fenced.** A start whose predecessor's Slurm job may still run (its node stopped answering
  and the core gave the run up) waits until Slurm reports that job ended: it finished, or the
  executor cancelled it and saw it end, or the node is DOWN and Slurm requeued it. Meanwhile
  the job's fence file names the new restart, so a stale task still running on a node Slurm
  cannot reach stops its process (``task.fenced``); the checkpoint store refuses the stale
  run's writes too (its generation is older).
- **Retried.** A start that failed before its job ran (the batch step could not execute, exit
  126 or 127) is submitted again after a backoff, ``TRIES`` times in all; then the job fails
  with Slurm's own words. Never a loop.
- **Placed anew.** A start Slurm could not launch on its nodes (a prolog failed there: Slurm
  drains the node and requeues the job held) goes back to the core as never started there
  (``not_launched``): it is placed again while the drained node takes no new jobs, so it
  runs elsewhere; a bad prolog everywhere drains every node, and the job waits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.executors.slurm.ctl import Start, launch_failed
from coordinator.protocol import EXIT_NOT_STARTED, PartOutcome
from coordinator.service.executor import ExecutorEvent, Gang, PartExited, ProcessLaunch

log = logging.getLogger("tiresias.slurm")

#: Submissions of one start that fail before the job runs, before the job fails.
TRIES = 3
#: Seconds before the first retry; each next one waits twice as long.
BACKOFF = 1.0


@dataclass
class Waiting:
    gang: Gang
    attempt: int = 1  # which try its next submission is
    after: float = 0.0  # monotonic time before which it is not submitted


class Waits:
    """Job id → the one start of it waiting to be submitted."""

    def __init__(self) -> None:
        self.waiting: dict[str, Waiting] = {}

    def fence(self, gang: Gang) -> None:
        self.waiting[gang.job_id] = Waiting(gang)

    def retry(self, gang: Gang, attempt: int, mono: float) -> float:
        """Submit ``gang`` again as try ``attempt`` after the backoff; the backoff."""
        delay: float = BACKOFF * 2.0 ** (attempt - 2)
        self.waiting[gang.job_id] = Waiting(gang, attempt, mono + delay)
        return delay

    def due(self, mono: float, gone: Callable[[str], bool]) -> list[Waiting]:
        """The waiting starts to submit now: past their backoff, predecessor ``gone``."""
        ready = [w for j, w in self.waiting.items() if mono >= w.after and gone(j)]
        for w in ready:
            del self.waiting[w.gang.job_id]
        return ready

    def drop(self, job_id: str, restart: int | None = None) -> Gang | None:
        """Stop waiting for ``job_id``'s start (``restart``, or whichever); that gang."""
        w = self.waiting.get(job_id)
        if w is None or restart not in (None, w.gang.restart):
            return None
        del self.waiting[job_id]
        return w.gang


def failed_parts(
    job_id: str, restart: int, parts: Mapping[str, Sequence[ProcessLaunch]], code: int, why: str
) -> list[ExecutorEvent]:
    """A start that never ran, failed on each node with ``code`` and ``why`` for each of
    its planned processes (one chief where the plan is unknown)."""
    return [
        PartExited(job_id, restart, node, PartOutcome.FAILED,
                   [{"role": p.role, "task_index": p.task_index, "code": code, "log_tail": why}
                    for p in procs]
                   or [{"role": "chief", "task_index": 0, "code": code, "log_tail": why}])
        for node, procs in parts.items()
    ]  # fmt: skip


def not_launched(start: Start, job: Mapping[str, Any], why: str) -> list[ExecutorEvent]:
    """A start Slurm could not launch on its nodes (``ctl.launch_failed``): lost there as
    never started (exit ``EXIT_NOT_STARTED``), for the core to place again; [] for any other
    start failure."""
    if not launch_failed(job):
        return []
    log.warning("job %s restart %d (Slurm %s) could not be launched on %s: %s", start.job_id,
                start.restart, start.slurm_id, ",".join(start.nodes), why.strip())  # fmt: skip
    never = [{"role": "chief", "task_index": 0, "code": EXIT_NOT_STARTED, "log_tail": why}]
    return [PartExited(start.job_id, start.restart, n, PartOutcome.LOST, never)
            for n in start.nodes]  # fmt: skip
