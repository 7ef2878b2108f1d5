"""A minimal virtual-clock driver: runs jobs with known durations to completion through a
Scheduler. For worked examples, tests and quick experiments; the real simulator (traces,
checkpoint costs, reports) is coordinator.sim. Preempted jobs exit at once, jobs run exactly
their ``duration`` of service, and every event time gets a pass."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from coordinator.core.model import CoreError, ExitOutcome, Job, JobSpec, JobState, Preempt, Start
from coordinator.core.scheduler import Scheduler


def run_to_completion(sched: Scheduler, specs: Iterable[JobSpec],
                      max_passes: int = 1_000_000) -> dict[str, float]:
    """Submit ``specs`` at their arrival times and run until every job has finished; returns
    job id → finish time. Raises CoreError if the jobs cannot all finish (e.g. a stuck
    workload) within ``max_passes`` passes."""
    arrivals = sorted(specs, key=lambda s: (s.arrival, s.job_id))
    for s in arrivals:
        if s.duration is None:
            raise CoreError(f"job {s.job_id} needs a duration to be replayed")
    finish: dict[str, float] = {}
    ends: list[tuple[float, str]] = []  # (completion time, job id) of runs; stale ones skipped
    now = arrivals[0].arrival if arrivals else 0.0
    i = 0
    for _ in range(max_passes):
        while ends and ends[0][0] <= now:
            _, job_id = heapq.heappop(ends)
            job = sched.job(job_id)
            if job.state is JobState.RUNNING and _end(job) <= now:
                sched.exited(job_id, now, ExitOutcome.COMPLETED)
                finish[job_id] = now
        while i < len(arrivals) and arrivals[i].arrival <= now:
            sched.submit(arrivals[i], now)
            i += 1
        while decisions := sched.schedule(now):
            for d in decisions:
                if isinstance(d, Preempt):
                    sched.exited(d.job_id, now, ExitOutcome.CHECKPOINTED)
                elif isinstance(d, Start):
                    heapq.heappush(ends, (_end(sched.job(d.job_id)), d.job_id))
        pending = [t for t in (sched.next_wakeup(now),) if t is not None]
        if i < len(arrivals):
            pending.append(arrivals[i].arrival)
        while ends and sched.job(ends[0][1]).state is not JobState.RUNNING:
            heapq.heappop(ends)
        if ends:
            pending.append(ends[0][0])
        if not pending:
            if len(finish) < len(arrivals):
                raise CoreError(f"stuck at {now}: {len(arrivals) - len(finish)} jobs cannot run")
            return finish
        now = max(now, min(pending))
    raise CoreError(f"no completion within {max_passes} passes")


def _end(job: Job) -> float:
    assert job.spec.duration is not None and job.last_start is not None
    return job.last_start + job.spec.duration - job.total_executed
