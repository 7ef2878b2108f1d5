"""Running jobs inside their minimum run time (``SchedulerConfig.min_run`` and
``min_run_restores``): job id → the end of its guard, with a heap of ends so that the next
one is found without a scan."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from coordinator.core.config import SchedulerConfig
from coordinator.core.model import Job


class Guards:
    def __init__(self) -> None:
        self.until: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []  # (end, job id); stale entries skipped

    def __bool__(self) -> bool:
        return bool(self.until)

    def set(self, job_id: str, until: float) -> None:
        self.until[job_id] = until
        heapq.heappush(self._heap, (until, job_id))

    def guard(self, job: Job, start: float, now: float, config: SchedulerConfig) -> None:
        """Guard ``job``, which started its run at ``start``, until the end of its minimum
        run time when that is after ``now``."""
        until = start + max(config.min_run, config.min_run_restores * job.restore_cost)
        if job.restarts:
            # a resumed job works at least as long as its restore took before it may be
            # preempted again: else preemptions as often as restores (a tick every <=
            # restore seconds) make every run restore and nothing more, forever
            until = max(until, start + 2 * job.restore_cost)
        if until > now:
            self.set(job.job_id, until)

    def drop(self, job_id: str) -> None:
        self.until.pop(job_id, None)

    def expire(self, now: float) -> None:
        """Drop the guards that have ended by ``now``."""
        heap, until = self._heap, self.until
        while heap and heap[0][0] <= now:
            end, job_id = heapq.heappop(heap)
            if until.get(job_id) == end:
                del until[job_id]

    def indices(self, keys: Iterable[tuple[Any, ...]], now: float) -> list[int]:
        """Sorted indices of the keys (ending with a job id) of jobs guarded after ``now``."""
        until = self.until
        if not until:
            return []
        end = self.next_end()
        if end is not None and end <= now:  # ended, not dropped yet (asked between passes)
            return [t for t, k in enumerate(keys) if until.get(k[-1], now) > now]
        return [t for t, k in enumerate(keys) if k[-1] in until]

    def next_end(self) -> float | None:
        heap = self._heap
        while heap and self.until.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None
