"""tiresias-l and tiresias-g under the rules of the authors' public simulator (their
``dlas-gpu`` and ``dlas-gpu-gittins``), opt-in with ``Settings.rules = "authors"``, so that
what differs between their numbers and ours can be named rule by rule (docs/simulator.md).

Their rules, as measured against their simulator:

- **Queue order** (``order="list"``): each queue is a list. A job enters at the end (an
  arrival in queue 0, a demoted job in its new queue); after every pass the waiting jobs of a
  queue move behind its running ones, keeping their order. A pass walks the queues in
  order and gives GPUs to every job that fits. ``order="ours"`` uses our running-first
  order instead (running jobs first, each group FIFO by first start).
- **Demotion at events** (``demotion="events"``): attained service is checked only at events
  (arrivals, completions, wakeups), each check moving a job down at most one queue. A
  running job's wakeup is ``(threshold - t_J) / W_J`` seconds after the pass (whole seconds,
  rounded down), which mixes GPU-seconds and seconds: a multi-GPU job is demoted at the
  next other event, or later than the paper's rule. ``demotion="exact"`` wakes at the time
  W_J × t_J reaches the threshold.
- **Gittins re-sort** (tiresias-g): every queue, the last one and running jobs included, is
  re-sorted at every event by a rank that is a step function of attained GPU service: the
  rank of service ``a`` is that of (the smallest sample above ``a``) - 1, 0 past the
  largest sample, with Δ = the first threshold for every queue, the expectation summing
  the samples themselves (not ``S - a``), P rounded to 5 decimals, E to whole GPU-seconds
  (rounded down) and the rank ``10^6 P / E`` to 4 decimals, ties to the earlier
  submission, then the list order. The samples are fixed (no learning).
- **Placement**: theirs counts free GPUs only; every placement of ours that spreads a job
  over nodes when it must (``consolidate``, ``skew``) places any job whose GPU count is
  free, so the two agree on the traces (no packing slowdown is modelled in either).
"""

from __future__ import annotations

import bisect
import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, ClassVar

from coordinator.core.config import SchedulerConfig
from coordinator.core.gittins import ServiceDistribution
from coordinator.core.model import CoreError, Job, JobState
from coordinator.core.policy_base import Key, Policy, fifo_by_start

#: ``Settings.rules``: our queue rules, or those of the authors' simulator.
RULES: tuple[str, ...] = ("ours", "authors", "authors-our-order", "authors-exact-demotion")
ORDERS: tuple[str, ...] = ("list", "ours")
DEMOTIONS: tuple[str, ...] = ("events", "exact")


def _round_half_up(x: float, places: int) -> float:
    """``x`` to ``places`` decimals, halves away from zero (as Python 2.7's ``round``)."""
    return float(Decimal(x).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


class StepRanks:
    """The authors' Gittins rank as a step function of attained GPU service (see the module
    docstring), computed once per sample from whole-GPU-second samples."""

    def __init__(self, samples: list[float], delta: float) -> None:
        s = sorted(int(x) for x in samples)
        if not s:
            raise CoreError("the authors' Gittins ranks need service samples (--gittins-samples)")
        self._samples = s
        prefix = [0]
        for x in s:
            prefix.append(prefix[-1] + x)
        n, d = len(s), int(delta)
        self._ranks = []
        for x in s:
            a = x - 1
            i = bisect.bisect_right(s, a)
            j = n - 1 if a + d > s[-1] - 1 else bisect.bisect_right(s, a + d)
            p = _round_half_up((j - i) / (n - i), 5)
            e = float((prefix[j] - prefix[i] + d * (n - j)) // (n - i))
            self._ranks.append(_round_half_up(p * 1_000_000 / e, 4))

    def rank(self, service: int) -> float:
        s = self._samples
        if service >= s[-1]:  # past the largest sample
            return 0.0
        return self._ranks[bisect.bisect_right(s, service)]


class AuthorsQueued(Policy):
    """K queues on attained GPU service under the authors' rules (module docstring);
    ``order`` and ``demotion`` switch one rule back to ours. Promotion (PROMOTEKNOB) is not
    part of their dlas-gpu and is not applied."""

    gittins: ClassVar[bool] = False

    def __init__(
        self,
        distribution: ServiceDistribution | None = None,
        *,
        order: str = "list",
        demotion: str = "events",
    ) -> None:
        if order not in ORDERS or demotion not in DEMOTIONS:
            raise CoreError(
                f"authors' rules: order is one of {', '.join(ORDERS)}, demotion one of "
                f"{', '.join(DEMOTIONS)}; got {order!r}, {demotion!r}"
            )
        self.distribution = distribution
        self.order = order
        self.demotion = demotion

    def bind(self, config: SchedulerConfig) -> None:
        super().bind(config)
        self.thresholds = config.queue_thresholds
        self._pos: dict[str, int] = {}  # job → its place in its queue's list
        self._rank: dict[str, float] = {}  # job → its Gittins rank (tiresias-g)
        self._next_pos = 0  # the end of every queue's list …
        self._front = 0  # … and its front
        self._event = -math.inf  # time of the last event whose updates were applied
        self._ranks: StepRanks | None = None
        if self.gittins:
            samples = self.distribution.samples if self.distribution is not None else []
            self._ranks = StepRanks(samples, self.thresholds[0])

    def fixed_while_running(self, job: Job) -> bool:
        return True  # keys change only at events, where refresh re-files them

    def changed(self, job: Job, now: float) -> None:
        if job.job_id not in self._pos:  # a new job enters queue 0 at the end
            job.queue = 0
            self._append(job)
        if self._ranks is not None:
            self._rank[job.job_id] = self._ranks.rank(int(job.attained(now)))
        super().changed(job, now)

    def _append(self, job: Job) -> None:
        self._pos[job.job_id] = self._next_pos
        self._next_pos += 1

    def key(self, job: Job, now: float) -> Key:
        if self.order == "list":
            inside: tuple[Any, ...] = (self._pos[job.job_id], job.job_id)
        else:
            inside = (0 if job.state is JobState.RUNNING else 1, *fifo_by_start(job))
        if self._ranks is None:
            return (job.queue, *inside)
        return (job.queue, -self._rank[job.job_id], job.spec.arrival, *inside)

    def refresh(self, now: float) -> None:
        """The updates of an event, once per instant: the last pass's waiting jobs move
        behind the running ones, then running jobs are demoted (at most one queue each, in
        arrival order) and re-ranked."""
        if now <= self._event:
            return
        self._event = now
        running = [j for j in self._members.values() if j.state is JobState.RUNNING]
        # the running jobs move in front of every waiting one, in their order: the same
        # list as the waiting ones moving behind them, at the cost of the running jobs only
        running.sort(key=self._at)
        self._front -= len(running)
        for i, job in enumerate(running):
            self._pos[job.job_id] = self._front + i
        last = len(self.thresholds)
        for job in sorted(running, key=_arrival):
            if job.queue < last and self._attained(job, now) >= self.thresholds[job.queue]:
                job.queue += 1
                self._append(job)
            self.changed(job, now)

    def _at(self, job: Job) -> int:
        return self._pos[job.job_id]

    def _attained(self, job: Job, now: float) -> float:
        """W_J × t_J as the demotion check sees it (whole GPU-seconds at events)."""
        service = job.attained(now)
        return math.floor(service) if self.demotion == "events" else service

    def next_wakeup(self, now: float) -> float | None:
        """The earliest demotion wakeup among running jobs, computed as their simulator
        computes it (``demotion="events"``) or at the exact crossing."""
        best = math.inf
        last = len(self.thresholds)
        for job in self._members.values():
            if job.state is not JobState.RUNNING or job.queue >= last:
                continue
            limit, executed = self.thresholds[job.queue], job.executed_at(now)
            if self.demotion == "events":
                t = now + math.floor((limit - math.floor(executed)) / job.gpus)
            else:
                t = now + limit / job.gpus - executed
            best = min(best, max(t, now))
        return None if math.isinf(best) else best

    def finished(self, job: Job) -> None:
        self._pos.pop(job.job_id, None)
        self._rank.pop(job.job_id, None)


def _arrival(job: Job) -> tuple[float, str]:
    return job.spec.arrival, job.job_id


class AuthorsL(AuthorsQueued):
    """tiresias-l under the authors' rules: their ``dlas-gpu``."""

    name = "tiresias-l"


class AuthorsG(AuthorsQueued):
    """tiresias-g under the authors' rules: their ``dlas-gpu-gittins``."""

    name = "tiresias-g"
    gittins = True
