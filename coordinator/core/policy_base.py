"""The policy interface: a policy orders the candidate jobs (waiting, plus running ones when it is
preemptive) by a sort key; the scheduler merges the two orders to select jobs.

Keys end with the job id, and every key breaks ties by arrival then job id, so orders are
deterministic. Waiting jobs' keys are fixed (their service does not change; a policy whose
keys depend on something else re-files them when it changes) and live in an incrementally
sorted list. Running jobs whose key stays fixed while they run, or changes only at known
times when a timer re-files it (2D-LAS queues, Gandiva slices, LAS with an interval), live in
another, with a parallel list of GPU counts so the scheduler can sum a run of them at C speed;
running jobs with keys that follow the clock (exact LAS, SRTF, Gittins queues) are sorted at
each pass, which costs O(running jobs), never O(all jobs ever seen).
"""

from __future__ import annotations

import bisect
import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from coordinator.core.config import SchedulerConfig
from coordinator.core.model import CoreError, Job, JobSpec, JobState

Key = tuple[Any, ...]


@runtime_checkable
class Queues(Protocol):
    """A policy's capability: priority queues, a job demoted at each threshold of attained
    GPU service (its keys lead with the queue)."""

    thresholds: tuple[float, ...]


def thresholds_of(policy: Policy) -> tuple[float, ...] | None:
    """The policy's queue thresholds, or None when it has no queues: ``isinstance(policy,
    Queues)`` by its one attribute (that Protocol check costs ~40 µs, and views made it for
    every job of a page)."""
    thresholds: tuple[float, ...] | None = getattr(policy, "thresholds", None)
    return thresholds


@dataclass(slots=True)
class Holding:
    """One queue's jobs that hold GPUs: how many, the GPUs they hold, and their
    ``submission_order`` keys, sorted (the job id is each key's last item)."""

    jobs: int = 0
    gpus: int = 0
    order: list[Key] = field(default_factory=list)


#: The states of a job that holds GPUs (a stopping job holds them until it exits).
HOLDING = frozenset({JobState.RUNNING, JobState.PREEMPTING})


def submission_order(job: Job) -> Key:
    """Arrival, then the id in natural order (``j9`` before ``j10``): the order jobs were
    submitted in, even when several share a clock reading."""
    return (job.spec.arrival, len(job.job_id), job.job_id)


class Policy(ABC):
    """Orders jobs. ``preemptive``: running jobs compete with waiting ones at every pass and
    may lose their GPUs. ``blocking``: the first waiting job that cannot start blocks all later
    ones (YARN-CS head-of-line blocking); otherwise jobs that do not fit are skipped."""

    name: ClassVar[str]
    preemptive: ClassVar[bool] = True
    blocking: ClassVar[bool] = False
    needs_duration: ClassVar[bool] = False

    def bind(self, config: SchedulerConfig) -> None:
        """Reset the ordering structures for a (new) scheduler; called by the Scheduler."""
        self.config = config
        self._members: dict[str, Job] = {}
        self._filed: dict[str, Key | None] = {}  # fixed key, or None when time-dependent
        self._waiting: list[Key] = []  # keys of waiting jobs, sorted
        self._by_smallest: dict[int, list[Key]] = {}  # the same, by the fewest GPUs they need
        self._queue_of: dict[str, tuple[int, int]] = {}  # waiting job → (queue, GPUs) filed
        self._per_queue: dict[int, list[int]] = {}  # queue → [waiting jobs, their GPUs]
        self._running: list[Key] = []  # fixed keys of running jobs, sorted …
        self._running_gpus: list[int] = []  # … and their GPU counts, in the same order
        self._running_dyn: dict[str, Job] = {}  # running jobs whose key changes with time
        #: queue → its jobs that hold GPUs, from the first ``index_holding`` on
        self._holding: dict[int, Holding] | None = None
        self._holds: dict[str, tuple[int, int, Key]] = {}  # such a job → (queue, GPUs, order)
        #: running elastic jobs below their ask (``coordinator.core.elastic``): read only
        self.below: dict[str, Job] = {}
        self._version = 0  # bumped on every change: running_order's cache key
        #: Jobs re-filed or removed since the shell last looked (``history.Timeline``), in
        #: first-touch order; None while nobody looks.
        self.touched: dict[str, None] | None = None
        self._cached: tuple[tuple[float, int], tuple[list[Key], list[int]]] | None = None

    @abstractmethod
    def key(self, job: Job, now: float) -> Key:
        """Priority key (smaller first), ending with the job id. Defined for every active job
        (shells may use it to rank jobs for display)."""

    def fixed_while_running(self, job: Job) -> bool:
        """Whether running ``job``'s key stays the same as time passes."""
        return False

    def validate(self, spec: JobSpec) -> None:
        if self.needs_duration and spec.duration is None:
            raise CoreError(f"policy {self.name} needs the true duration of job {spec.job_id}")

    def changed(self, job: Job, now: float) -> None:
        """Re-file ``job`` after any change of its state, queue or service."""
        self.remove(job)
        if self._holding is not None and job.state in HOLDING:
            self._hold(job, self._holding)
        running = job.state is JobState.RUNNING
        if not (job.state is JobState.WAITING or (running and self.preemptive)):
            return
        job_id = job.job_id
        self._members[job_id] = job
        if running and job.size:
            self.below[job_id] = job
        if running and not self.fixed_while_running(job):
            self._running_dyn[job_id] = job
            self._filed[job_id] = None
            return
        k = self.key(job, now)
        self._filed[job_id] = k
        if running:
            i = bisect.bisect(self._running, k)
            self._running.insert(i, k)
            self._running_gpus.insert(i, job.gpus)
        else:
            bisect.insort(self._waiting, k)
            bisect.insort(self._by_smallest.setdefault(job.spec.smallest, []), k)
            self._queue_of[job_id] = (job.queue, job.spec.smallest)  # elastic: its fewest
            counts = self._per_queue.setdefault(job.queue, [0, 0])
            counts[0] += 1
            counts[1] += job.spec.smallest

    def remove(self, job: Job) -> None:
        self._version += 1
        job_id = job.job_id
        if self.touched is not None:
            self.touched[job_id] = None
        self.below.pop(job_id, None)
        if self._holding is not None and job_id in self._holds:
            self._unhold(job_id, self._holding)
        if self._members.pop(job_id, None) is None:
            return
        k = self._filed.pop(job_id)
        if k is None:
            del self._running_dyn[job_id]
            return
        i = bisect.bisect_left(self._running, k)
        if i < len(self._running) and self._running[i] == k:
            del self._running[i]
            del self._running_gpus[i]
        else:
            del self._waiting[bisect.bisect_left(self._waiting, k)]
            same = self._by_smallest[job.spec.smallest]
            del same[bisect.bisect_left(same, k)]
            if not same:
                del self._by_smallest[job.spec.smallest]
            queue, gpus = self._queue_of.pop(job_id)
            counts = self._per_queue[queue]
            counts[0] -= 1
            counts[1] -= gpus
            if not counts[0]:
                del self._per_queue[queue]

    def _hold(self, job: Job, holding: dict[int, Holding]) -> None:
        order = submission_order(job)
        gpus = job.gpus if job.allocation is None else job.allocation.count  # a stopping
        self._holds[job.job_id] = (job.queue, gpus, order)  # elastic job is back at its ask
        held = holding.setdefault(job.queue, Holding())
        held.jobs += 1
        held.gpus += gpus
        bisect.insort(held.order, order)

    def _unhold(self, job_id: str, holding: dict[int, Holding]) -> None:
        queue, gpus, order = self._holds.pop(job_id)
        held = holding[queue]
        held.jobs -= 1
        held.gpus -= gpus
        del held.order[bisect.bisect_left(held.order, order)]
        if not held.jobs:
            del holding[queue]

    def job(self, key: Key) -> Job:
        return self._members[key[-1]]

    def running_order(self, now: float) -> tuple[list[Key], list[int]]:
        """Keys of the running candidates, highest priority first, and their GPU counts.
        The lists are the policy's own: read them, never modify them."""
        if not self._running_dyn:
            return self._running, self._running_gpus
        if self._cached is None or self._cached[0] != (now, self._version):
            keys = sorted([*self._running, *self._running_keys(now)])
            self._cached = ((now, self._version), (keys, [self._members[k[-1]].gpus for k in keys]))
        return self._cached[1]

    def _running_keys(self, now: float) -> Iterable[Key]:
        """Keys of the dynamic running jobs (a policy may cheapen those whose exact place
        cannot matter)."""
        return (self.key(j, now) for j in self._running_dyn.values())

    def waiting_key(self, job_id: str) -> Key | None:
        """The key ``job_id`` is filed under among the waiting jobs (None: it is not waiting)."""
        job = self._members.get(job_id)
        return self._filed[job_id] if job is not None and job.state is JobState.WAITING else None

    def waiting_by_smallest(self) -> Mapping[int, list[Key]]:
        """The waiting keys by the fewest GPUs each job can start on (``JobSpec.smallest``),
        each sorted (the policy's own lists: read them, never modify them)."""
        return self._by_smallest

    def waiting_per_queue(self) -> Mapping[int, list[int]]:
        """Queue → [waiting jobs, the GPUs they start on (an elastic job: its fewest, as its
        pending reason counts)], kept as jobs are filed (the policy's own: never modify it)."""
        return self._per_queue

    def index_holding(self, active: Iterable[Job]) -> Mapping[int, Holding]:
        """Queue → its jobs that hold GPUs (running or being stopped), for every policy: read
        from ``active`` at the first call, then kept as jobs are filed (the simulator never
        asks, so it pays nothing). The policy's own: never modify it."""
        if self._holding is None:
            self._holding = {}
            for job in active:
                if job.state in HOLDING:
                    self._hold(job, self._holding)
        return self._holding

    def waiting_order(self) -> list[Key]:
        """Keys of the waiting jobs, highest priority first (the policy's own list: read it,
        never modify it)."""
        return self._waiting

    def finished(self, job: Job) -> None:  # noqa: B027 (optional hook)
        """A job left the system (completed, failed or cancelled): learn from it."""

    def refresh(self, now: float) -> None:  # noqa: B027 (optional hook)
        """Apply time-driven changes (demotion, promotion) due at or before ``now``."""

    def next_wakeup(self, now: float) -> float | None:
        """Next time this policy's order may change without an outside event."""
        return None

    def export_state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional hook)
        """Restore what ``export_state`` saved (learned state only; jobs are re-filed)."""


def fifo_by_start(job: Job) -> Key:
    """2D-LAS order inside a queue: jobs that have started, FIFO by first start time, then
    jobs that never started, FIFO by arrival (their start time is still in the future), so a
    newcomer never preempts a job of its own queue."""
    s = job.spec
    if job.first_start is None:
        return (1, s.arrival, s.arrival, s.job_id)
    return (0, job.first_start, s.arrival, s.job_id)


class Timed(Policy):
    """A policy whose keys change only at times known from the job's fields: ``changed``
    files a timer for a job's next change, ``refresh`` applies the due ones. A timer is valid
    only while recomputing it from the job gives the same (time, kind), so stale ones are
    dropped lazily."""

    def bind(self, config: SchedulerConfig) -> None:
        super().bind(config)
        self._timers: list[tuple[float, str, int]] = []

    @abstractmethod
    def _next_change(self, job: Job) -> tuple[float, int] | None:
        """(time, kind) of ``job``'s next key change while it stays filed as it is."""

    def _apply(self, job: Job, kind: int, t: float) -> None:
        """Change ``job`` when its timer of ``kind``, due at ``t``, fires (it is re-filed
        after)."""

    def changed(self, job: Job, now: float) -> None:
        super().changed(job, now)
        if job.job_id in self._members and (nxt := self._next_change(job)) is not None:
            heapq.heappush(self._timers, (nxt[0], job.job_id, nxt[1]))

    def _due(self, t: float, job_id: str, kind: int) -> Job | None:
        job = self._members.get(job_id)
        return job if job is not None and self._next_change(job) == (t, kind) else None

    def refresh(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            t, job_id, kind = heapq.heappop(timers)
            job = self._due(t, job_id, kind)
            if job is not None:
                self._apply(job, kind, t)
                self.changed(job, now)

    def next_wakeup(self, now: float) -> float | None:
        timers = self._timers
        while timers and self._due(*timers[0]) is None:
            heapq.heappop(timers)
        return timers[0][0] if timers else None


def last_tick(now: float, interval: float) -> float:
    """The latest k × interval ≤ now, computed as the scheduler computes its ticks (k ×
    interval), so the pass at a tick sees that tick even when now / interval rounds down."""
    k = math.floor(now / interval)
    return (k + 1) * interval if (k + 1) * interval <= now else k * interval


def executed_for_order(job: Job, now: float, interval: float) -> float:
    """t_J as a service-ranked order sees it: as of ``now``, or with an interval as of the
    last tick, so a running job's rank moves only at ticks (see ``Las``). Spelled out rather
    than through ``Job.executed_at``: it runs for every running job at every pass."""
    if job.last_start is None or job.awaiting:
        return job.executed
    if not interval:
        return job.executed + (now - job.last_start)
    return job.executed + max(0.0, last_tick(now, interval) - job.last_start)
