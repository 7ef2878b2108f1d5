"""Running jobs inside their minimum run time (``SchedulerConfig.min_run`` and
``min_run_restores``): job id → the end of its guard, with a heap of ends so that the next
one is found without a scan. ``Scheduler`` decides the ends; this only keeps them."""

from __future__ import annotations

import heapq
from collections.abc import Iterable


class Guards:
    def __init__(self) -> None:
        self.until: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []  # (end, job id); stale entries skipped

    def __bool__(self) -> bool:
        return bool(self.until)

    def set(self, job_id: str, until: float) -> None:
        self.until[job_id] = until
        heapq.heappush(self._heap, (until, job_id))

    def drop(self, job_id: str) -> None:
        self.until.pop(job_id, None)

    def expire(self, now: float) -> None:
        """Drop the guards that have ended by ``now``."""
        heap, until = self._heap, self.until
        while heap and heap[0][0] <= now:
            end, job_id = heapq.heappop(heap)
            if until.get(job_id) == end:
                del until[job_id]

    def indices(self, keys: Iterable[tuple[object, ...]]) -> list[int]:
        """Sorted indices of the keys (ending with a job id) of guarded jobs."""
        until = self.until
        return [t for t, k in enumerate(keys) if k[-1] in until] if until else []

    def next_end(self) -> float | None:
        heap = self._heap
        while heap and self.until.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None
