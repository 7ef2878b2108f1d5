"""Scheduling policies: each orders the candidate jobs (waiting, plus running ones when it is
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
from collections.abc import Iterable
from typing import Any, ClassVar

from coordinator.core.config import SchedulerConfig
from coordinator.core.gittins import GITTINS_VARIANTS, ServiceDistribution
from coordinator.core.model import CoreError, Job, JobSpec, JobState

Key = tuple[Any, ...]


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
        self._running: list[Key] = []  # fixed keys of running jobs, sorted …
        self._running_gpus: list[int] = []  # … and their GPU counts, in the same order
        self._running_dyn: dict[str, Job] = {}  # running jobs whose key changes with time
        self._version = 0  # bumped on every change: running_order's cache key
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
        running = job.state is JobState.RUNNING
        if not (job.state is JobState.WAITING or (running and self.preemptive)):
            return
        job_id = job.job_id
        self._members[job_id] = job
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

    def remove(self, job: Job) -> None:
        self._version += 1
        job_id = job.job_id
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


def _fifo_by_start(job: Job) -> Key:
    """2D-LAS order inside a queue: jobs that have started, FIFO by first start time, then
    jobs that never started, FIFO by arrival (their start time is still in the future), so a
    newcomer never preempts a job of its own queue."""
    s = job.spec
    if job.first_start is None:
        return (1, s.arrival, s.arrival, s.job_id)
    return (0, job.first_start, s.arrival, s.job_id)


class _Timed(Policy):
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


def _last_tick(now: float, interval: float) -> float:
    """The latest k × interval ≤ now, computed as the scheduler computes its ticks (k ×
    interval), so the pass at a tick sees that tick even when now / interval rounds down."""
    k = math.floor(now / interval)
    return (k + 1) * interval if (k + 1) * interval <= now else k * interval


def _executed_for_order(job: Job, now: float, interval: float) -> float:
    """t_J as a service-ranked order sees it: as of ``now``, or with an interval as of the
    last tick, so a running job's rank moves only at ticks (see ``Las``). Spelled out rather
    than through ``Job.executed_at``: it runs for every running job at every pass."""
    if job.last_start is None:
        return job.executed
    if not interval:
        return job.executed + (now - job.last_start)
    return job.executed + max(0.0, _last_tick(now, interval) - job.last_start)


_DEMOTE, _PROMOTE = 0, 1

# Learned thresholds (SchedulerConfig.learn_thresholds, see ServiceDistribution.thresholds):
# first learned from 100 completed jobs, again each time the samples have grown by a quarter;
# at least 2,000 GPU-s and 4× apart, at most 6 queues. Chosen on Philly slices
# (docs/simulator.md).
LEARN_AFTER = 100
RELEARN_GROWTH = 1.25
LEARNED_FLOOR = 2000.0
LEARNED_SPACING = 4.0
LEARNED_MAX_QUEUES = 6


class _Queued(_Timed):
    """K queues on attained service W_J × t_J. A running job moves down at the exact time it
    reaches the next threshold. A waiting job with δ_J ≥ PROMOTEKNOB × t_J goes back to queue
    0 with t_J and δ_J reset.

    With ``SchedulerConfig.learn_thresholds`` the thresholds come from ``distribution``, the
    total GPU service of completed jobs (``ServiceDistribution.thresholds``), learned from
    ``LEARN_AFTER`` samples on and again whenever the samples have grown by
    ``RELEARN_GROWTH``; until then the configured thresholds apply. A new set applies to
    waiting jobs at once (their queue is recomputed from their service) and never reshuffles
    running ones: a running job keeps its queue and its next demotion time, and only then
    (or when it stops) takes the queue the new thresholds give its service."""

    def __init__(self, distribution: ServiceDistribution | None = None) -> None:
        self.distribution = distribution if distribution is not None else ServiceDistribution()

    def bind(self, config: SchedulerConfig) -> None:
        super().bind(config)
        self._running_first = config.queue_order == "running-first"
        self._cheap_victims = config.cheap_victims
        self._learn_thresholds = config.learn_thresholds
        self.thresholds = config.queue_thresholds
        # running job → service of its next demotion as planned before a re-learning
        self._pending: dict[str, float | None] = {}
        self._learned_at = 0  # samples when the thresholds were last learned
        self._relearn = self._learn_thresholds and len(self.distribution) >= LEARN_AFTER

    def _in_queue(self, job: Job) -> Key:
        """Order inside a FIFO queue (``SchedulerConfig.queue_order``): by first start, with
        running jobs first when "running-first" (a waiting job then never preempts a running
        job of its own queue). Running jobs that cannot be checkpointed come before all
        others of their queue in either order: when GPUs must be taken from a queue, they
        are taken from jobs that lose only the steps since their checkpoint first."""
        running = job.state is JobState.RUNNING
        protected = running and not job.checkpointable
        if self._running_first:
            rank = 0 if protected else 1 if running else 2
            if self._cheap_victims:  # the costliest to stop keep their GPUs first
                cost = job.checkpoint_cost + job.restore_cost if running else 0.0
                return (rank, -cost, *_fifo_by_start(job))
            return (rank, *_fifo_by_start(job))
        return (0 if protected else 1, *_fifo_by_start(job))

    def _target(self, job: Job) -> float | None:
        """Attained service at which running ``job`` is next demoted (None: not this run)."""
        if job.job_id in self._pending:
            return self._pending[job.job_id]
        level = max(bisect.bisect_right(self.thresholds, job.gpus * job.executed), job.queue)
        return self.thresholds[level] if level < len(self.thresholds) else None

    def changed(self, job: Job, now: float) -> None:
        if self._learn_thresholds and job.state is not JobState.RUNNING:
            self._pending.pop(job.job_id, None)
            if job.state is JobState.WAITING:
                job.queue = bisect.bisect_right(self.thresholds, job.gpus * job.executed)
        super().changed(job, now)

    def _next_change(self, job: Job) -> tuple[float, int] | None:
        if job.state is JobState.RUNNING:
            target = self._target(job)
            if target is None:
                return None
            assert job.last_start is not None
            return job.last_start + (target / job.gpus - job.executed), _DEMOTE
        if (
            job.state is JobState.WAITING
            and job.queue > 0
            and math.isfinite(self.config.promote_knob)
        ):
            assert job.wait_since is not None
            return job.wait_since + self.config.promote_knob * job.executed, _PROMOTE
        return None

    def _apply(self, job: Job, kind: int, t: float) -> None:
        if kind == _DEMOTE:
            target = self._target(job)
            assert target is not None
            self._pending.pop(job.job_id, None)
            job.queue = max(job.queue, bisect.bisect_right(self.thresholds, target))
        else:
            job.queue = 0
            job.executed = 0.0
            job.wait_since = t
            job.promotions += 1

    def refresh(self, now: float) -> None:
        if self._relearn:
            self._relearn = False
            self._learned_at = len(self.distribution)
            new = self.distribution.thresholds(
                floor=LEARNED_FLOOR, spacing=LEARNED_SPACING, max_queues=LEARNED_MAX_QUEUES
            )
            if new != self.thresholds:
                for job in self._members.values():
                    if job.state is JobState.RUNNING:
                        self._pending[job.job_id] = self._target(job)
                self.thresholds = new
                for job in list(self._members.values()):
                    self.changed(job, now)
        super().refresh(now)

    def finished(self, job: Job) -> None:
        if self._learns() and job.state is JobState.COMPLETED:
            self.distribution.add(job.gpus * job.total_executed)
            n = len(self.distribution)
            if self._learn_thresholds and n >= max(LEARN_AFTER, RELEARN_GROWTH * self._learned_at):
                self._relearn = True  # at the next refresh, which has a clock

    def _learns(self) -> bool:
        return self._learn_thresholds

    def export_state(self) -> dict[str, Any]:
        return {
            "distribution": self.distribution.export_state(),
            "thresholds": list(self.thresholds),
            "learned_at": self._learned_at,
            "pending": dict(self._pending),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.distribution = ServiceDistribution.from_state(state["distribution"])
        if "thresholds" in state:  # states from before learned thresholds have none
            self.thresholds = tuple(state["thresholds"])
            self._learned_at = int(state["learned_at"])
            self._pending = {
                k: None if v is None else float(v) for k, v in state["pending"].items()
            }
            self._relearn = False


class TiresiasL(_Queued):
    """Discretized 2D-LAS: queue, then the queue order (``_Queued._in_queue``)."""

    name = "tiresias-l"

    def fixed_while_running(self, job: Job) -> bool:
        return True

    def key(self, job: Job, now: float) -> Key:
        return (job.queue, *self._in_queue(job))


class TiresiasG(_Queued):
    """Discretized 2D-Gittins: queues 1..K-1 ordered by the Gittins index of the attained
    service with Δ = the queue's upper threshold (higher first), the last queue FIFO by first
    start like 2D-LAS. The distribution learns the total GPU service of every completed job
    when ``learn``. ``variant``: "as-written" (default) or "authors" (see
    coordinator.core.gittins). Orders are re-evaluated at events, demotions, promotions and
    interval ticks; a running job whose index drops below a waiting one's between those waits
    for the next (the index is not monotone, so there is no cheap exact crossing time). With
    ``SchedulerConfig.interval``, a running job's index is that of its service at the last
    tick, as for ``Las``: the interval bounds that delay, and jobs of close indices take turns
    at most once per tick instead of at every arrival or completion anywhere."""

    name = "tiresias-g"

    def __init__(
        self,
        distribution: ServiceDistribution | None = None,
        *,
        learn: bool = True,
        variant: str = "as-written",
    ) -> None:
        if variant not in GITTINS_VARIANTS:
            raise CoreError(f"unknown Gittins variant {variant!r}; valid: {GITTINS_VARIANTS}")
        super().__init__(distribution)
        self.learn = learn
        self.variant = variant
        self._authors = variant == "authors"

    def bind(self, config: SchedulerConfig) -> None:
        super().bind(config)
        self._indexed_version = self.distribution.version

    def fixed_while_running(self, job: Job) -> bool:
        return job.queue >= len(self.thresholds)

    def refresh(self, now: float) -> None:
        super().refresh(now)
        if self._indexed_version != self.distribution.version:  # waiting keys are stale
            self._indexed_version = self.distribution.version
            last = len(self.thresholds)
            for job in [
                j for j in self._members.values() if j.state is JobState.WAITING and j.queue < last
            ]:
                self.changed(job, now)

    def key(self, job: Job, now: float) -> Key:
        q = job.queue
        if q >= len(self.thresholds):
            return (q, 0.0, *self._in_queue(job))
        a = job.spec.gpus * _executed_for_order(job, now, self.config.interval)
        g = self.distribution.index(a, self.thresholds[q], self._authors)
        return (q, -g, *_fifo_by_start(job))  # an index tie: the earlier start

    def _running_keys(self, now: float) -> Iterable[Key]:
        """Running jobs in queues above every waiting job all keep their GPUs whatever their
        order among themselves, so their index (the costly part) is skipped: the pass only
        compares them with waiting jobs, which all sort after them by queue."""
        top = self._waiting[0][0] if self._waiting else math.inf
        for j in self._running_dyn.values():
            yield self.key(j, now) if j.queue >= top else (j.queue, 0.0, *_fifo_by_start(j))

    def _learns(self) -> bool:
        return self.learn

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self._indexed_version = self.distribution.version


class Las(Policy):
    """Continuous 2D-LAS: least attained GPU service first, preemptive.

    Event-driven (``SchedulerConfig.interval`` = 0): exact wakeups at the moment a running
    job's service passes a waiting job's, and a running job keeps a lead of ``quantum``
    seconds of its own service (its key is its attained service minus W_J × quantum).
    Without that hysteresis, jobs of equal service would swap at every rounding step
    (processor sharing has no all-or-nothing analogue); with it, every turn lasts at least
    ``quantum``. With an interval, priorities are re-evaluated every interval, by attained
    service alone: the paper's Figure 7 model ("priorities re-evaluated every time unit"). A
    running job's priority is its service at the last tick (a multiple of the interval), so
    between ticks an arrival or a completion starts or preempts jobs against those frozen
    priorities, and the interval bounds the turns: without the freeze, jobs of equal service
    would swap at every event (millions of hand-offs a week on a loaded cluster). Frozen keys
    also keep running jobs in the sorted list between ticks. ``crossings`` forces one mode or
    the other (None: event-driven exactly when there is no interval). Ties go to the earlier
    (arrival, id)."""

    name = "las"

    def __init__(self, quantum: float = 60.0, *, crossings: bool | None = None) -> None:
        if not quantum > 0:
            raise CoreError(f"las quantum must be > 0, got {quantum}")
        self.quantum = quantum
        self.crossings = crossings

    def bind(self, config: SchedulerConfig) -> None:
        super().bind(config)
        exact = config.interval == 0 if self.crossings is None else self.crossings
        self._lead = self.quantum if exact else 0.0
        self._tick = 0.0 if exact else config.interval  # 0: keys follow the clock
        self._keyed_tick = -math.inf  # the tick running jobs' keys were last filed at

    def fixed_while_running(self, job: Job) -> bool:
        return self._tick > 0

    def refresh(self, now: float) -> None:
        """Re-file running jobs once per tick, at the first pass at or after it."""
        if self._tick > 0 and (tick := _last_tick(now, self._tick)) != self._keyed_tick:
            self._keyed_tick = tick
            for job in [self.job(k) for k in self._running]:
                self.changed(job, now)

    def key(self, job: Job, now: float) -> Key:
        s = job.spec
        if job.last_start is None:
            return (s.gpus * job.executed, s.arrival, s.job_id)
        return (
            s.gpus * (_executed_for_order(job, now, self._tick) - self._lead),
            s.arrival,
            s.job_id,
        )

    def next_wakeup(self, now: float) -> float | None:
        """For each running job, the time its key passes the next waiting key (the smallest
        waiting service above it comes first)."""
        waiting = self._waiting
        if not (self._lead and waiting):
            return None
        best = math.inf
        keys, gpus = self.running_order(now)
        for rk, g in zip(keys, gpus, strict=True):
            i = bisect.bisect_right(waiting, rk)
            if i == len(waiting):
                continue
            a_w, arr_w, id_w = waiting[i]
            r = self._members[rk[-1]]
            assert r.last_start is not None
            t = r.last_start + (a_w / g + self._lead - r.executed)  # from fixed fields
            if (arr_w, id_w) > rk[1:] or t <= now:
                # the waiting job needs a strict lead, or rounding left the crossing behind:
                # a few ulps later the keys compare as they should
                t = max(t, now) + 4 * (math.ulp(a_w) / g + math.ulp(now))
            best = min(best, t)
        return None if math.isinf(best) else best


class Srtf(Policy):
    """Preemptive shortest remaining time first, using true durations (an oracle baseline).
    Running jobs only get closer to completion, so no wakeups are needed."""

    name = "srtf"
    needs_duration = True

    def key(self, job: Job, now: float) -> Key:
        assert job.spec.duration is not None
        return (job.spec.duration - job.total_executed_at(now), job.spec.arrival, job.job_id)


class Srsf(Srtf):
    """Preemptive shortest remaining service (remaining time × GPUs) first; oracle."""

    name = "srsf"

    def key(self, job: Job, now: float) -> Key:
        rem, arrival, job_id = super().key(job, now)
        return (rem * job.gpus, arrival, job_id)


class YarnCS(Policy):
    """FIFO, non-preemptive, head-of-line blocking (pair with ``make_placement("yarn")``)."""

    name = "yarn-cs"
    preemptive = False
    blocking = True

    def key(self, job: Job, now: float) -> Key:
        return (job.spec.arrival, job.job_id)


class BestEffort(YarnCS):
    """YARN-CS where later jobs that fit start ahead of a head job that does not."""

    name = "best-effort"
    blocking = False


class SmallestFirst(Policy):
    """Smallest GPU count first, non-preemptive, skipping jobs that do not fit."""

    name = "sf"
    preemptive = False

    def key(self, job: Job, now: float) -> Key:
        return (job.gpus, job.spec.arrival, job.job_id)


class Gandiva(_Timed):
    """Gandiva-style time sharing. A running job keeps its GPUs for at least ``quantum``
    seconds per turn; after that, when jobs wait, it yields to them. Order: running jobs still
    inside their slice, then waiting jobs least recently served first (longest wait), then
    running jobs past their slice (most recently started first keeps its GPUs). Without
    waiting jobs nobody is preempted. A running job's key changes once, when its slice ends
    (a timer re-files it), so running jobs stay in the sorted list. Gandiva's
    packing/migration is not modelled."""

    name = "gandiva"

    def __init__(self, quantum: float = 600.0) -> None:
        if not quantum > 0:
            raise CoreError(f"gandiva quantum must be > 0, got {quantum}")
        self.quantum = quantum

    def fixed_while_running(self, job: Job) -> bool:
        return True

    def key(self, job: Job, now: float) -> Key:
        s = job.spec
        if job.last_start is None:  # not running
            wait = s.arrival if job.wait_since is None else job.wait_since
            return (1, wait, s.arrival, s.job_id)
        if now < job.last_start + self.quantum:  # computed as the timer's time is
            return (0, job.last_start, s.arrival, s.job_id)
        return (2, -job.last_start, s.arrival, s.job_id)

    def _next_change(self, job: Job) -> tuple[float, int] | None:
        """A running job filed inside its slice changes when the slice ends."""
        filed = self._filed.get(job.job_id)
        if job.state is JobState.RUNNING and filed is not None and filed[0] == 0:
            assert job.last_start is not None
            return job.last_start + self.quantum, 0
        return None

    def next_wakeup(self, now: float) -> float | None:
        return super().next_wakeup(now) if self._waiting else None


_POLICIES: dict[str, type[Policy]] = {
    p.name: p
    for p in (TiresiasL, TiresiasG, Las, YarnCS, BestEffort, SmallestFirst, Srtf, Srsf, Gandiva)
}
POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)


def make_policy(name: str, **params: Any) -> Policy:
    """Policy by name. Parameters: tiresias-g (distribution, learn, variant), las (quantum,
    crossings), gandiva (quantum); the others take none (queues and PROMOTEKNOB live in
    SchedulerConfig)."""
    cls = _POLICIES.get(name)
    if cls is None:
        raise CoreError(f"unknown policy {name!r}; valid: {', '.join(POLICY_NAMES)}")
    try:
        return cls(**params)
    except TypeError as e:
        raise CoreError(f"bad parameters for policy {name!r}: {e}") from None
