"""A minimal virtual-clock driver: runs jobs with known durations to completion through a
Scheduler. For worked examples, tests and quick experiments; the real simulator (traces,
checkpoint costs, reports) is coordinator.sim. Preempted jobs exit at once, a job completes
after exactly ``duration`` seconds of service, and every event time gets passes until the
scheduler has nothing more to decide."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from coordinator.core.model import (
    CoreError,
    Decision,
    ExitOutcome,
    Job,
    JobSpec,
    JobState,
    Preempt,
    Start,
)
from coordinator.core.scheduler import Scheduler


class Replay:
    """Step-wise driver. ``sched`` is public: a test may swap in a restored copy between
    steps (the driver keeps no job state of its own beyond completion times)."""

    def __init__(self, sched: Scheduler, specs: Iterable[JobSpec]) -> None:
        self.sched = sched
        self.arrivals = sorted(specs, key=lambda s: (s.arrival, s.job_id))
        for s in self.arrivals:
            if s.duration is None:
                raise CoreError(f"job {s.job_id} needs a duration to be replayed")
        self.finish: dict[str, float] = {}
        self.now = self.arrivals[0].arrival if self.arrivals else 0.0
        self._next = 0  # index of the next arrival
        self._ends: list[tuple[float, str]] = []  # (completion, job id); stale entries skipped

    @property
    def done(self) -> bool:
        return len(self.finish) == len(self.arrivals)

    def step(self) -> list[Decision]:
        """Process everything due at ``now`` (completions, arrivals, passes), return the
        decisions, then advance ``now`` to the next event. CoreError if jobs remain but
        nothing can ever happen again."""
        sched, now = self.sched, self.now
        while self._ends and self._ends[0][0] <= now:
            _, job_id = heapq.heappop(self._ends)
            job = sched.job(job_id)
            if job.state is JobState.RUNNING and _end(job) <= now:
                sched.exited(job_id, now, ExitOutcome.COMPLETED)
                self.finish[job_id] = now
        while self._next < len(self.arrivals) and self.arrivals[self._next].arrival <= now:
            sched.submit(self.arrivals[self._next], now)
            self._next += 1
        made: list[Decision] = []
        while decisions := sched.schedule(now):
            made += decisions
            for d in decisions:
                if isinstance(d, Preempt):
                    sched.exited(d.job_id, now, ExitOutcome.CHECKPOINTED)
                elif isinstance(d, Start):
                    heapq.heappush(self._ends, (_end(sched.job(d.job_id)), d.job_id))
        pending = [t for t in (sched.next_wakeup(now),) if t is not None]
        if self._next < len(self.arrivals):
            pending.append(self.arrivals[self._next].arrival)
        while self._ends and sched.job(self._ends[0][1]).state is not JobState.RUNNING:
            heapq.heappop(self._ends)
        if self._ends:
            pending.append(self._ends[0][0])
        if pending:
            self.now = max(now, min(pending))
        elif not self.done:
            raise CoreError(
                f"stuck at {now}: {len(self.arrivals) - len(self.finish)} jobs can never run"
            )
        return made


def run_to_completion(
    sched: Scheduler, specs: Iterable[JobSpec], max_steps: int = 1_000_000
) -> dict[str, float]:
    """Submit ``specs`` at their arrival times and run until every job has finished; returns
    job id → finish time. CoreError when the workload is stuck or takes over ``max_steps``."""
    replay = Replay(sched, specs)
    for _ in range(max_steps):
        if replay.done:
            return replay.finish
        replay.step()
    raise CoreError(f"not finished within {max_steps} steps")


def _end(job: Job) -> float:
    assert job.spec.duration is not None and job.last_start is not None
    return job.last_start + job.spec.duration - job.total_executed
