"""The scheduler core: one object that takes events and returns decisions.

The CONTRACT and its semantics are in the package's docstring (``coordinator.core``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import Any

from coordinator.core import events
from coordinator.core.config import DEFAULT_QUEUE_THRESHOLDS, SchedulerConfig
from coordinator.core.gpus import Gpus
from coordinator.core.guards import Guards
from coordinator.core.model import (
    CoreError,
    Decision,
    ExitOutcome,
    Job,
    JobSpec,
    JobState,
    Kill,
    Node,
    Preempt,
    Start,
)
from coordinator.core.placement import Placement, make_placement
from coordinator.core.policies import Policy, make_policy
from coordinator.core.selection import select

__all__ = ["DEFAULT_QUEUE_THRESHOLDS", "Scheduler", "SchedulerConfig"]

_STATE_VERSION = 1


class Scheduler:
    """Jobs, GPUs and one policy + placement; see the CONTRACT above.

    A preemptive pass (1) walks the policy's order and selects jobs by GPU count against the
    whole capacity, skipping those that do not fit; (2) preempts running jobs not selected;
    (3) places the newly selected jobs, in priority order, on GPUs free *now* (a preempted
    job's GPUs free at its exit; the pass after that starts what could not be placed). A
    non-preemptive pass places waiting jobs in order on the free GPUs, stopping at the first
    that cannot start when the policy blocks (YARN-CS). Selection counts GPUs, so it assumes a
    placement that can use any free GPUs (consolidate, spread, skew); the strict ``yarn``
    placement may refuse a selected job and leave GPUs idle: pair it with ``yarn-cs``.
    """

    def __init__(
        self,
        nodes: Iterable[Node] = (),
        policy: Policy | None = None,
        placement: Placement | None = None,
        config: SchedulerConfig | None = None,
    ) -> None:
        self.config = config or SchedulerConfig()
        self.policy = policy or make_policy("tiresias-l")
        self.placement = placement or make_placement("consolidate")
        self.policy.bind(self.config)
        self._clock: float | None = None
        self._gpus = Gpus()
        self._active: dict[str, Job] = {}  # submission order
        self._done: dict[str, Job] = {}
        self._running: dict[str, Job] = {}
        self._waiting: dict[int, int] = {}  # GPU count → number of WAITING jobs of that size
        self._guards = Guards()  # running jobs inside their minimum run time
        for node in nodes:
            self._add_node(node)

    # ---- cluster -------------------------------------------------------------------------

    def _add_node(self, node: Node) -> None:
        allocations = (j.allocation.gpus for j in self._active.values() if j.allocation)
        self._gpus.add(node, {g for a in allocations for n, gs in a if n == node.name for g in gs})

    def node_up(self, node: Node, now: float) -> None:
        self._advance(now)
        self._add_node(node)

    def node_down(self, name: str, now: float) -> list[str]:
        """Forget the node's GPUs. Jobs with GPUs on it stop accruing service now
        (PREEMPTING); their GPUs elsewhere stay busy until the shell, having stopped the
        survivors, reports ``exited(…, LOST)``. Returns those jobs' ids."""
        self._advance(now)
        self._gpus.remove(name)
        lost = [
            j
            for j in self._active.values()
            if j.allocation is not None and name in j.allocation.nodes
        ]
        for job in lost:
            if job.state is JobState.RUNNING:
                self._stop(job, now)
        return [j.job_id for j in lost]

    def free_gpus(self) -> dict[str, tuple[int, ...]]:
        """Free GPU indices per node that is up (a copy)."""
        return {n: tuple(g) for n, g in self._gpus.free.items()}

    def nodes(self) -> dict[str, Node]:
        """The nodes that are up, as last described."""
        return {n: self._gpus.nodes[n] for n in self._gpus.free}

    def guards(self) -> dict[str, float]:
        """Running job → end of its minimum run time (it may not be preempted before)."""
        return dict(self._guards.until)

    # ---- job events ----------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if self._clock is not None and now < self._clock:
            raise CoreError(f"time went backwards: {now} < {self._clock}")
        self._clock = now
        self.policy.refresh(now)

    def _get(self, job_id: str) -> Job:
        job = self._active.get(job_id) or self._done.get(job_id)
        if job is None:
            raise CoreError(f"unknown job {job_id}")
        return job

    def submit(self, spec: JobSpec, now: float) -> Job:
        self._advance(now)
        if spec.job_id in self._active or spec.job_id in self._done:
            raise CoreError(f"duplicate job id {spec.job_id}")
        if spec.gpus < 1:
            raise CoreError(f"job {spec.job_id} asks for {spec.gpus} GPUs; needs at least 1")
        if self.config.reject_oversized and spec.gpus > self._gpus.known:
            raise CoreError(
                f"job {spec.job_id} asks for {spec.gpus} GPUs but the cluster has "
                f"{self._gpus.known}"
            )
        self.policy.validate(spec)
        job = Job(spec=spec, wait_since=now)
        self._active[spec.job_id] = job
        self._count_waiting(job, 1)
        self.policy.changed(job, now)
        return job

    def _count_waiting(self, job: Job, delta: int) -> None:
        n = self._waiting.get(job.gpus, 0) + delta
        if n:
            self._waiting[job.gpus] = n
        else:
            del self._waiting[job.gpus]

    def _stop(self, job: Job, now: float, ended: float | None = None) -> None:
        """Stop accruing service (RUNNING → PREEMPTING), counted until ``ended`` (the run's
        real end, when known and earlier); GPUs stay taken until exit."""
        assert job.last_start is not None
        ran = max(0.0, min(now, now if ended is None else ended) - job.last_start)
        job.executed += ran
        job.total_executed += ran
        job.last_start = None
        job.state = JobState.PREEMPTING
        job.wait_since = now
        del self._running[job.job_id]
        self._guards.drop(job.job_id)
        self.policy.changed(job, now)

    def exited(
        self, job_id: str, now: float, outcome: ExitOutcome, ended: float | None = None
    ) -> None:
        self._advance(now)
        job = self._get(job_id)
        if job.state not in (JobState.RUNNING, JobState.PREEMPTING):
            raise CoreError(f"job {job_id} is {job.state}, not running: cannot exit")
        if job.state is JobState.RUNNING:
            self._stop(job, now, ended)
        assert job.allocation is not None
        self._gpus.release(job.allocation)
        job.allocation = None
        outcome = ExitOutcome(outcome)
        if outcome is ExitOutcome.COMPLETED:
            self._finish(job, JobState.COMPLETED, now)
        elif outcome is ExitOutcome.FAILED:
            self._finish(job, JobState.FAILED, now)
        elif job.cancel_requested:
            self._finish(job, JobState.CANCELLED, now)
        else:
            job.restarts += 1
            job.state = JobState.WAITING
            self._count_waiting(job, 1)
            self.policy.changed(job, now)

    def _finish(self, job: Job, state: JobState, now: float) -> None:
        if job.state is JobState.WAITING:
            self._count_waiting(job, -1)
        job.state = state
        job.finish = now
        job.wait_since = None
        self.policy.remove(job)
        del self._active[job.job_id]
        self._done[job.job_id] = job
        self.policy.finished(job)

    def cancel(self, job_id: str, now: float) -> list[Decision]:
        """[] for a waiting (now CANCELLED) or finished job; [Kill] while processes run: the
        job becomes CANCELLED when they have exited."""
        self._advance(now)
        job = self._get(job_id)
        if job.state.finished:
            return []
        if job.state is JobState.WAITING:
            self._finish(job, JobState.CANCELLED, now)
            return []
        job.cancel_requested = True
        if job.state is JobState.RUNNING:
            self._stop(job, now)
        return [Kill(job_id)]

    def update_skew(self, job_id: str, skew: float | None) -> None:
        job = self._get(job_id)
        job.spec = dataclasses.replace(job.spec, skew=skew)

    def update_costs(self, job_id: str, checkpoint_s: float, restore_s: float) -> None:
        """The job's checkpoint and restore times in seconds, as measured or modelled."""
        job = self._get(job_id)
        for name, value in (("checkpoint", checkpoint_s), ("restore", restore_s)):
            if not (value >= 0 and math.isfinite(value)):
                raise CoreError(f"job {job_id}: {name} cost must be >= 0 seconds, got {value}")
        job.checkpoint_cost, job.restore_cost = float(checkpoint_s), float(restore_s)
        if job.state.finished:
            return
        now = self._clock if self._clock is not None else 0.0
        if job.state is JobState.RUNNING:  # its minimum run follows the cost it now knows
            assert job.last_start is not None
            self._guards.drop(job_id)
            self._guard(job, job.last_start, now)
        self.policy.changed(job, now)

    def update_checkpointable(self, job_id: str, checkpointable: bool, now: float) -> None:
        """Whether the job can be checkpointed (its runtime says so at start); re-files it,
        since queue policies order running jobs that cannot be checkpointed first."""
        self._advance(now)
        job = self._get(job_id)
        if job.checkpointable != checkpointable and not job.state.finished:
            job.checkpointable = checkpointable
            self.policy.changed(job, now)

    def set_packlimit(self, value: float) -> None:
        """A newly learned PACKLIMIT for the skew placement."""
        if not hasattr(self.placement, "packlimit"):
            raise CoreError(f"placement {self.placement.name} has no PACKLIMIT")
        self.placement.packlimit = value

    def apply(self, event: events.Event) -> list[Decision]:
        """Apply one typed event (``coordinator.core.events``); the decisions it made."""
        match event:
            case events.Schedule(now):
                return self.schedule(now)
            case events.Submit(spec, now):
                self.submit(spec, now)
            case events.Exited(job_id, now, outcome, ended):
                self.exited(job_id, now, outcome, ended)
            case events.Began(job_id, at, now):
                self._advance(now)
                if (job := self._get(job_id)).began(at, now):
                    self.policy.changed(job, now)
            case events.Cancel(job_id, now):
                return self.cancel(job_id, now)
            case events.NodeUp(node, now):
                self.node_up(node, now)
            case events.NodeDown(name, now):
                self.node_down(name, now)
            case events.UpdateSkew(job_id, skew):
                self.update_skew(job_id, skew)
            case events.UpdateCheckpointable(job_id, checkpointable, now):
                self.update_checkpointable(job_id, checkpointable, now)
            case events.UpdateCosts(job_id, checkpoint_s, restore_s):
                self.update_costs(job_id, checkpoint_s, restore_s)
            case events.SetPackLimit(value):
                self.set_packlimit(value)
            case _:
                raise CoreError(f"not a core event: {event!r}")
        return []

    # ---- scheduling ----------------------------------------------------------------------

    def schedule(self, now: float) -> list[Decision]:
        self._advance(now)
        # every pass drops the guards that ended, whatever the policy: a guard left behind
        # would make next_wakeup name a time already past, forever
        self._guards.expire(now)
        if self.policy.preemptive:
            return self._preemptive_pass(now)
        return self._fifo_pass(now)

    def _preemptive_pass(self, now: float) -> list[Decision]:
        decisions: list[Decision] = []
        if not self._waiting:  # nothing to start, nobody to make room for
            return decisions
        policy = self.policy
        rkeys, rgpus = policy.running_order(now)
        smallest = min(self._waiting)
        guarded = self._guards.indices(rkeys)
        drop, chosen = select(
            rkeys, rgpus, policy.waiting_order(), policy.job, guarded, self._gpus.capacity, smallest
        )
        for job in [policy.job(rkeys[t]) for t in drop]:
            job.preemptions += 1
            self._stop(job, now)
            decisions.append(Preempt(job.job_id))
        for job in chosen:
            start = self._try_start(job, now)
            if start is not None:
                decisions.append(start)
        return decisions

    def _guard(self, job: Job, start: float, now: float) -> None:
        """Guard ``job``, which started its run at ``start``, until the end of its minimum
        run time (``SchedulerConfig.min_run``/``min_run_restores``) when that is after ``now``."""
        cfg = self.config
        until = start + max(cfg.min_run, cfg.min_run_restores * job.restore_cost)
        if job.restarts:
            # a resumed job works at least as long as its restore took before it may be
            # preempted again: else preemptions as often as restores (a tick every <=
            # restore seconds) make every run restore and nothing more, forever
            until = max(until, start + 2 * job.restore_cost)
        if until > now:
            self._guards.set(job.job_id, until)

    def _fifo_pass(self, now: float) -> list[Decision]:
        decisions: list[Decision] = []
        if not self._waiting:
            return decisions
        for wk in list(self.policy.waiting_order()):
            if self._gpus.free_total < min(self._waiting):
                break
            start = self._try_start(self.policy.job(wk), now)
            if start is not None:
                decisions.append(start)
            elif self.policy.blocking:
                break
        return decisions

    def _try_start(self, job: Job, now: float) -> Start | None:
        if job.gpus > self._gpus.free_total:
            return None
        free = {n: len(g) for n, g in self._gpus.free.items()}
        choice = self.placement.choose(job, free, self._gpus.nodes)
        if choice is None:
            return None
        if sum(choice.values()) != job.gpus or any(
            k < 1 or k > free.get(n, 0) for n, k in choice.items()
        ):
            raise CoreError(
                f"placement {self.placement.name} returned {choice} "
                f"for job {job.job_id} ({job.gpus} GPUs)"
            )
        job.allocation = self._gpus.take(choice)
        job.state = JobState.RUNNING
        job.last_start = now
        if job.first_start is None:
            job.first_start = now
        job.wait_since = None
        self._count_waiting(job, -1)
        self._running[job.job_id] = job
        self._guard(job, now, now)
        self.policy.changed(job, now)
        return Start(job.job_id, job.allocation)

    def next_wakeup(self, now: float) -> float | None:
        times = []
        t = self.policy.next_wakeup(now)
        if t is not None:
            times.append(t)
        if self._waiting and (end := self._guards.next_end()) is not None:
            times.append(end)  # a guard's end may let a waiting job in
        if self.config.interval > 0 and self._waiting:
            step = self.config.interval
            k = math.floor(now / step) + 1
            times.append(k * step if k * step > now else (k + 1) * step)
        return min(times, default=None)

    # ---- queries -------------------------------------------------------------------------

    def job(self, job_id: str) -> Job:
        return self._get(job_id)

    def jobs(self) -> Iterator[Job]:
        """Active jobs (submission order), then finished ones (finish order)."""
        yield from self._active.values()
        yield from self._done.values()

    # ---- persistence ---------------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """JSON/msgpack-able snapshot; ``from_state`` rebuilds an equivalent scheduler."""
        up = self._gpus.free
        return {
            "version": _STATE_VERSION,
            "config": self.config.to_dict(),
            "clock": self._clock,
            "nodes": [
                {"name": n.name, "gpus": list(n.gpus), "switch": n.switch, "up": n.name in up}
                for n in self._gpus.nodes.values()
            ],
            "jobs": [j.to_dict() for j in self.jobs()],
            "done": len(self._done),
            "running": list(self._running),  # start order: the order of Preempt decisions
            "policy": {"name": self.policy.name, "state": self.policy.export_state()},
            "placement": self.placement.name,
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], policy: Policy | None = None, placement: Placement | None = None
    ) -> Scheduler:
        """The scheduler ``state`` was exported from. ``policy``/``placement`` default to
        fresh ones of the exported names (pass them to keep parameters such as quantum or
        PACKLIMIT); the policy's learned state is restored when its name matches."""
        if state.get("version") != _STATE_VERSION:
            raise CoreError(f"unsupported scheduler state version {state.get('version')}")
        sched = cls(
            (),
            policy or make_policy(state["policy"]["name"]),
            placement or make_placement(state["placement"]),
            SchedulerConfig.from_dict(state["config"]),
        )
        if state["policy"]["name"] == sched.policy.name:  # else: a new policy learns afresh
            sched.policy.load_state(state["policy"]["state"])
        jobs = [Job.from_dict(d) for d in state["jobs"]]
        n_active = len(jobs) - state["done"]
        for job in jobs[n_active:]:
            sched._done[job.job_id] = job
        for job in jobs[:n_active]:
            sched._active[job.job_id] = job
            if job.state is JobState.WAITING:
                sched._count_waiting(job, 1)
        for job_id in state["running"]:
            job = sched._active[job_id]
            sched._running[job_id] = job
            assert job.last_start is not None
            sched._guard(job, job.last_start, job.last_start)  # expired: dropped at a pass
        for d in state["nodes"]:
            node = Node(d["name"], tuple(d["gpus"]), d["switch"])
            if d["up"]:
                sched._add_node(node)
            else:
                sched._gpus.remember(node)
        clock = state["clock"]
        for job in jobs[:n_active]:
            sched.policy.changed(job, clock if clock is not None else 0.0)
        sched._clock = clock
        return sched
