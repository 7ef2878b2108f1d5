"""Scheduling policies by name (``make_policy``): the paper's queue policies
(``coordinator.core.queued``), continuous LAS, the oracles SRTF and SRSF, YARN-CS, best
effort, smallest first and Gandiva. The interface they share and how orders are kept cheap
are in ``coordinator.core.policy_base``."""

from __future__ import annotations

import bisect
import math
from typing import Any

from coordinator.core.config import SchedulerConfig
from coordinator.core.model import CoreError, Job, JobState
from coordinator.core.policy_base import Key, Policy, Timed, executed_for_order, last_tick
from coordinator.core.queued import TiresiasG, TiresiasL

__all__ = ["POLICY_NAMES", "Key", "Policy", "make_policy"]


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
        if self._tick > 0 and (tick := last_tick(now, self._tick)) != self._keyed_tick:
            self._keyed_tick = tick
            for job in [self.job(k) for k in self._running]:
                self.changed(job, now)

    def key(self, job: Job, now: float) -> Key:
        s = job.spec
        if job.last_start is None:
            return (s.gpus * job.executed, s.arrival, s.job_id)
        return (
            s.gpus * (executed_for_order(job, now, self._tick) - self._lead),
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
            r = self._members[rk[-1]]
            if i == len(waiting) or r.awaiting:  # an awaited run's key does not move
                continue
            a_w, arr_w, id_w = waiting[i]
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


class Gandiva(Timed):
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
        if job.awaiting or now < job.last_start + self.quantum:  # as the timer's time is
            return (0, job.last_start, s.arrival, s.job_id)
        return (2, -job.last_start, s.arrival, s.job_id)

    def _next_change(self, job: Job) -> tuple[float, int] | None:
        """A running job filed inside its slice changes when the slice ends."""
        filed = self._filed.get(job.job_id)
        if (
            job.state is JobState.RUNNING
            and filed is not None
            and filed[0] == 0
            and not job.awaiting
        ):
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
