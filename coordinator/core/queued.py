"""The queue policies of the paper: discretized 2D-LAS (``tiresias-l``) and 2D-Gittins
(``tiresias-g``), K queues on attained GPU service with starvation promotion and, optionally,
thresholds learned from completed jobs."""

from __future__ import annotations

import bisect
import math
from typing import Any

from coordinator.core.config import SchedulerConfig
from coordinator.core.gittins import (
    GITTINS_VARIANTS,
    WHOLE_JOB,
    ServiceDistribution,
    ServiceGroups,
)
from coordinator.core.model import CoreError, Job, JobState
from coordinator.core.policy_base import Key, Timed, executed_for_order, fifo_by_start

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


class Queued(Timed):
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
        groups = config.service_groups
        self._groups = ServiceGroups(groups) if groups else None
        # waiting job → (its groups, the group that ranked it, that distribution's version)
        self._ranked: dict[str, tuple[list[tuple[object, ...]], tuple[object, ...], int]] = {}
        self._by_group: dict[tuple[object, ...], set[str]] = {}  # group → its waiting jobs
        self._grown: set[tuple[object, ...]] = set()  # groups that learned since the last pass

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
            if rank == 2 and self._groups is not None:  # waiting: likely-short groups first
                return (2, -self._groups.index(job, self._room(job)), *fifo_by_start(job))
            if self._cheap_victims:  # the costliest to stop keep their GPUs first
                cost = job.checkpoint_cost + job.restore_cost if running else 0.0
                return (rank, -cost, *fifo_by_start(job))
            return (rank, *fifo_by_start(job))
        return (0 if protected else 1, *fifo_by_start(job))

    def _room(self, job: Job) -> float | None:
        """GPU service ``job`` may still attain in its queue (None: the last queue)."""
        if job.queue >= len(self.thresholds):
            return None
        return max(0.0, self.thresholds[job.queue] - job.gpus * job.executed)

    def _target(self, job: Job) -> float | None:
        """Attained service at which running ``job`` is next demoted (None: not this run)."""
        if self._pending and job.job_id in self._pending:  # empty until thresholds move
            return self._pending[job.job_id]
        level = max(bisect.bisect_right(self.thresholds, job.gpus * job.executed), job.queue)
        return self.thresholds[level] if level < len(self.thresholds) else None

    def changed(self, job: Job, now: float) -> None:
        if self._learn_thresholds and job.state is not JobState.RUNNING:
            self._pending.pop(job.job_id, None)
            if job.state is JobState.WAITING:
                job.queue = bisect.bisect_right(self.thresholds, job.gpus * job.executed)
        super().changed(job, now)
        if self._groups is not None:
            self._rank(job)

    def _rank(self, job: Job) -> None:
        """Note which groups' learning may re-rank waiting ``job``: the one that ranks it,
        and the finer ones that will once they have enough samples."""
        job_id = job.job_id
        if (old := self._ranked.pop(job_id, None)) is not None:
            for level in old[0]:
                self._by_group[level].discard(job_id)
        if job.state is JobState.WAITING and job_id in self._members:
            assert self._groups is not None
            levels = self._groups.levels(job)
            chosen, dist = self._groups.distribution(job)
            levels = levels[: levels.index(chosen) + 1]
            self._ranked[job_id] = (levels, chosen, dist.version)
            for level in levels:
                self._by_group.setdefault(level, set()).add(job_id)

    def _rerank(self, now: float) -> None:
        """Re-file the waiting jobs whose ranking distribution changed since they were filed
        (only the note when their key stays the same)."""
        assert self._groups is not None
        stale: set[str] = set()
        for level in self._grown:
            for job_id in self._by_group.get(level, ()):
                levels, chosen, version = self._ranked[job_id]
                job = self._members[job_id]
                c, d = self._groups.distribution(job)
                if (c, d.version) == (chosen, version):
                    continue
                if c == chosen and self.key(job, now) == self._filed[job_id]:
                    self._ranked[job_id] = (levels, c, d.version)
                else:
                    stale.add(job_id)
        self._grown.clear()
        for job_id in sorted(stale):
            self.changed(self._members[job_id], now)

    def _next_change(self, job: Job) -> tuple[float, int] | None:
        if job.state is JobState.RUNNING and not job.awaiting:  # awaiting: no timer yet
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
        if self._grown:
            self._rerank(now)
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
        if self._groups is not None:
            if job.state is JobState.COMPLETED:
                self._grown.update(self._groups.learn(job, job.gpus * job.total_executed))
            self._groups.forget(job.job_id)
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
        } | ({} if self._groups is None else {"groups": self._groups.export_state()})

    def load_state(self, state: dict[str, Any]) -> None:
        self.distribution = ServiceDistribution.from_state(state["distribution"])
        if "thresholds" in state:  # states from before learned thresholds have none
            self.thresholds = tuple(state["thresholds"])
            self._learned_at = int(state["learned_at"])
            self._pending = {
                k: None if v is None else float(v) for k, v in state["pending"].items()
            }
            self._relearn = False
        if self._groups is not None and "groups" in state:
            self._groups.load_state(state["groups"])


class TiresiasL(Queued):
    """Discretized 2D-LAS: queue, then the queue order (``Queued._in_queue``)."""

    name = "tiresias-l"

    def fixed_while_running(self, job: Job) -> bool:
        return True

    def key(self, job: Job, now: float) -> Key:
        return (job.queue, *self._in_queue(job))


class TiresiasG(Queued):
    """Discretized 2D-Gittins: inside every queue, the last included, jobs are ranked by the
    Gittins index of their attained service under the learned service distribution (higher
    first), with Δ = the service left before the job's next demotion (the whole job in the
    last queue); ties keep 2D-LAS's order (``Queued._in_queue``). Waiting and running jobs
    are re-ranked at every pass, and a running job by the service it had when its run
    began: its minimum-run guard (with ``SchedulerConfig.interval``, as in the paper's
    Figure 7, by its service at the last tick instead). It keeps its GPUs until a job of a
    strictly higher index comes, or its demotion moves it, so two jobs of close indices
    never take turns at every event (measured: 13× the preemptions with the index of the
    running service). Where no
    sample exceeds a job's service its index is 0 and 2D-LAS's order decides. The
    distribution learns the total GPU service of every completed job when ``learn``, on
    top of the seed (``--gittins-history``, ``--gittins-samples``). ``variant``:
    "as-written" (default) or "authors" (see coordinator.core.gittins; it looks a whole
    threshold ahead and breaks ties by first start, as the paper's Figure 7 does). With
    ``SchedulerConfig.service_groups`` the index is that of the job's group's distribution
    (``ServiceGroups``)."""

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
        return not self.config.interval  # by its service at the start of its run (the guard)

    def refresh(self, now: float) -> None:
        super().refresh(now)
        if self._indexed_version != self.distribution.version:  # every key is stale
            self._indexed_version = self.distribution.version
            for job in list(self._members.values()):
                self.changed(job, now)

    def key(self, job: Job, now: float) -> Key:
        q = job.queue
        interval = self.config.interval
        # with an interval, the paper's model: the service at the last tick
        a = job.gpus * (executed_for_order(job, now, interval) if interval else job.executed)
        dist = self.distribution if self._groups is None else self._groups.distribution(job)[1]
        if q >= len(self.thresholds):
            delta = WHOLE_JOB
        else:  # the authors' simulator looks a whole threshold ahead, wherever the job is
            delta = self.thresholds[q] if self._authors else max(self.thresholds[q] - a, 1.0)
        g = dist.index(a, delta, self._authors)
        if self._authors:  # an index tie: the earlier start, as in the paper's Figure 7
            return (q, -g, 0, *fifo_by_start(job))
        return (q, -g, *self._in_queue(job))  # an index tie: as in tiresias-l

    def _learns(self) -> bool:
        return self.learn

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self._indexed_version = self.distribution.version
