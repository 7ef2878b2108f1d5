"""The scheduler core: one object that takes events and returns decisions. The CONTRACT and
its semantics are in the package's docstring (``coordinator.core``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import Any

from coordinator.core import elastic, events
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
    Stop,
    StopReason,
)
from coordinator.core.placement import Choice, PackLimited, Placement, make_placement
from coordinator.core.policies import Policy, make_policy
from coordinator.core.selection import Decided, decide

__all__ = ["DEFAULT_QUEUE_THRESHOLDS", "Scheduler", "SchedulerConfig"]

_STATE_VERSION = 3  # 3: drained nodes; 2: finished jobs retired (Retire) and counted


class Scheduler:
    """Jobs, GPUs and one policy + placement; see the CONTRACT above.

    A pass takes ``selection.decide``'s decision and acts on it: it preempts the running
    jobs not selected and starts the jobs placed (a preempted job's GPUs free at its exit;
    the pass after that starts what could not be placed). Selection counts GPUs, so it
    assumes a placement that can use any free GPUs (consolidate, spread, skew); the strict
    ``yarn`` placement may refuse a selected job and leave GPUs idle: pair it with ``yarn-cs``.
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
        self._done: dict[str, Job] = {}  # finished, not retired yet (finish order)
        self.retired = 0  # finished jobs the shell has stored and the core forgot
        self._running: dict[str, Job] = {}
        self._waiting: dict[int, int] = {}  # GPU count → number of WAITING jobs of that size
        self._guards = Guards()  # running jobs inside their minimum run time
        self._version = 0  # bumped by every change: the last pass's decision holds until then
        self._last: Decided | None = None
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
        lost = [j for j in self._active.values() if j.allocation and name in j.allocation.nodes]
        for job in lost:
            if job.state is JobState.RUNNING:
                self._stop(job, now, stop=Stop(StopReason.NODE_LOST, node=name))
        return [j.job_id for j in lost]

    def free_gpus(self) -> dict[str, tuple[int, ...]]:
        """Free GPU indices per node that is up (a copy)."""
        return {n: tuple(g) for n, g in self._gpus.free.items()}

    def nodes(self) -> dict[str, Node]:
        """The nodes that are up, as last described."""
        return {n: self._gpus.nodes[n] for n in self._gpus.free}

    def drained(self) -> frozenset[str]:
        """The nodes that are up but take no new jobs (``NodeDrain``)."""
        return frozenset(self._gpus.parked)

    def guards(self) -> dict[str, float]:
        """Running job → end of its minimum run time (it may not be preempted before)."""
        return dict(self._guards.until)

    # ---- job events ----------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if self._clock is not None and now < self._clock:
            raise CoreError(f"time went backwards: {now} < {self._clock}")
        self._clock = now
        self._version += 1
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
        if (problem := spec.problem()) is not None:
            raise CoreError(problem)
        if self.config.reject_oversized and spec.smallest > self._gpus.known:  # elastic: can run
            raise CoreError(
                f"job {spec.job_id} asks for {spec.smallest} GPUs but the cluster has "
                f"{self._gpus.known}"
            )
        self.policy.validate(spec)
        job = Job(spec=spec, wait_since=now)
        self._active[spec.job_id] = job
        self._count_waiting(job, 1)
        self.policy.changed(job, now)
        return job

    def _count_waiting(self, job: Job, delta: int) -> None:
        n = self._waiting.get(job.spec.smallest, 0) + delta
        if n:
            self._waiting[job.spec.smallest] = n
        else:
            del self._waiting[job.spec.smallest]

    def _stop(
        self, job: Job, now: float, ended: float | None = None, stop: Stop | None = None
    ) -> None:
        """Stop accruing service (RUNNING → PREEMPTING), counted until ``ended`` (the run's
        real end, when known and earlier), for the reason ``stop`` says; GPUs stay taken
        until exit."""
        ran = max(0.0, job.executed_at(now if ended is None else min(now, ended)) - job.executed)
        job.executed += ran
        job.total_executed += ran
        job.resize(job.spec.gpus)
        job.last_start, job.awaiting = None, False
        job.state, job.wait_since, job.stop = JobState.PREEMPTING, now, stop
        del self._running[job.job_id]
        self._guards.drop(job.job_id)
        self.policy.changed(job, now)

    def exited(
        self,
        job_id: str,
        now: float,
        outcome: ExitOutcome,
        ended: float | None = None,
        stop: Stop | None = None,
    ) -> None:
        """All processes of the job have exited; ``stop`` says why its run ended when it did
        not complete (kept for its history; a stop the core decided itself stands)."""
        self._advance(now)
        job = self._get(job_id)
        if job.state not in (JobState.RUNNING, JobState.PREEMPTING):
            raise CoreError(f"job {job_id} is {job.state}, not running: cannot exit")
        if job.state is JobState.RUNNING:
            self._stop(job, now, ended, stop)
        elif stop is not None and (job.stop is None or outcome is ExitOutcome.FAILED):
            job.stop = stop
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

    def retire(self, job_id: str) -> None:
        """Forget the finished job ``job_id``: the shell has stored it."""
        if self._done.pop(job_id, None) is None:
            raise CoreError(f"job {job_id} is {self._get(job_id).state}: cannot retire it")
        self.retired += 1

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
            self._stop(job, now, stop=Stop(StopReason.CANCELLED))
        return [Kill(job_id)]

    def update_skew(self, job_id: str, skew: float | None) -> None:
        job = self._get(job_id)
        job.spec = dataclasses.replace(job.spec, skew=skew)
        self._version += 1

    def update_costs(self, job_id: str, checkpoint_s: float, restore_s: float) -> None:
        """The job's checkpoint and restore times in seconds, as measured or modelled."""
        job = self._get(job_id)
        for name, value in (("checkpoint", checkpoint_s), ("restore", restore_s)):
            if not (value >= 0 and math.isfinite(value)):
                raise CoreError(f"job {job_id}: {name} cost must be >= 0 seconds, got {value}")
        job.checkpoint_cost, job.restore_cost = float(checkpoint_s), float(restore_s)
        self._version += 1
        if job.state.finished:
            return
        now = self._clock if self._clock is not None else 0.0
        if job.state is JobState.RUNNING:  # its minimum run follows the cost it now knows
            assert job.last_start is not None
            self._guards.drop(job_id)
            self._guards.guard(job, job.last_start, now, self.config)
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
        if not isinstance(self.placement, PackLimited):
            raise CoreError(f"placement {self.placement.name} has no PACKLIMIT")
        self.placement.packlimit = value
        self._version += 1

    def apply(self, event: events.Event) -> list[Decision]:
        """Apply one typed event (``coordinator.core.events``); the decisions it made."""
        match event:
            case events.Schedule(now):
                return self.schedule(now)
            case events.Submit(spec, now):
                self.submit(spec, now)
            case events.Exited(job_id, now, outcome, ended, stop):
                self.exited(job_id, now, outcome, ended, stop)
            case events.Began(job_id, at, now):
                self._advance(now)
                if (job := self._get(job_id)).began(at, now):
                    assert job.last_start is not None  # its minimum run counts from then
                    self._guards.guard(job, job.last_start, now, self.config)
                    self.policy.changed(job, now)
            case events.Cancel(job_id, now):
                return self.cancel(job_id, now)
            case events.NodeUp(node, now):
                self.node_up(node, now)
            case events.NodeDown(name, now):
                self.node_down(name, now)
            case events.NodeDrain(name, drained, now):
                self._advance(now)
                self._gpus.drain(name, drained)
            case events.UpdateSkew(job_id, skew):
                self.update_skew(job_id, skew)
            case events.UpdateCheckpointable(job_id, checkpointable, now):
                self.update_checkpointable(job_id, checkpointable, now)
            case events.Pin(job_id, now) | events.Release(job_id, now):
                if (job := self._get(job_id)).told(resizable=isinstance(event, events.Release)):
                    self.policy.changed(job, now)
            case events.UpdateCosts(job_id, checkpoint_s, restore_s):
                self.update_costs(job_id, checkpoint_s, restore_s)
            case events.SetPackLimit(value):
                self.set_packlimit(value)
            case events.Retire(job_id):
                self.retire(job_id)
            case _:
                raise CoreError(f"not a core event: {event!r}")
        return []

    # ---- scheduling ----------------------------------------------------------------------

    def schedule(self, now: float) -> list[Decision]:
        self._advance(now)
        # every pass drops the guards that ended, whatever the policy: a guard left behind
        # would make next_wakeup name a time already past, forever
        self._guards.expire(now)
        return self._pass(now)

    def decide(self, now: float, keep: bool = False) -> Decided:
        """The decision a pass at ``now`` takes, not acted on (``selection.decide``; ``keep``:
        its starts' GPUs stay counted as taken, for the pass that takes them)."""
        smallest = min(self._waiting, default=None)
        return decide(self.policy, self.placement, self._gpus, self._guards, smallest, now, keep)

    def outcome(self, now: float) -> Decided:
        """The last pass's decision while nothing changed since; else the one a pass would
        take at ``now`` (kept until the next change)."""
        last = self._last
        if last is None or last.version != self._version:
            last = self._last = self.decide(now)
            last.version = self._version
        return last

    def _pass(self, now: float) -> list[Decision]:
        decided = self.decide(now, keep=True)
        decisions: list[Decision] = []
        sel = decided.selection
        if sel is not None and sel.drop:
            dropped = [self.policy.job(sel.rkeys[t]) for t in sel.drop]  # before re-filing
            for job, before in zip(dropped, sel.before, strict=True):
                job.preemptions += 1
                stop = sel.stop(before, job.job_id)
                self._stop(job, now, stop=stop)
                decisions.append(Preempt(job.job_id, stop))
        for job, choice in decided.starts:
            decisions.append(self._start(job, choice, now))
        self._version += 1  # acted on: what explain words until the next change
        # its starts run, its drops stop: the running order is its result now
        decided.version, decided.starts, decided.selection = self._version, [], None
        self._last = decided
        return decisions

    def _start(self, job: Job, choice: Choice, now: float) -> Start:
        job.allocation = self._gpus.take(choice)
        job.state = JobState.RUNNING
        job.last_start, job.awaiting = now, self.config.await_begin
        if job.first_start is None:
            job.first_start = now
        job.wait_since = None
        self._count_waiting(job, -1)
        job.resize(sum(choice.values()))
        self._running[job.job_id] = job
        self._guards.guard(job, now, now, self.config)
        elastic.file_started(self.policy, job, now)
        return Start(job.job_id, job.allocation)

    def next_wakeup(self, now: float) -> float | None:
        times = []
        if (t := self.policy.next_wakeup(now)) is not None:
            times.append(t)
        if (self._waiting or self.policy.below) and (end := self._guards.next_end()) is not None:
            times.append(end)  # a guard's end may let a waiting job in, or an elastic one grow
        times += elastic.paid_at(self.policy.below.values(), now, self.config.elastic_payback)
        if self.config.interval > 0 and self._waiting:
            step = self.config.interval
            k = math.floor(now / step) + 1
            times.append(k * step if k * step > now else (k + 1) * step)
        return min(times, default=None)

    # ---- queries -------------------------------------------------------------------------

    def job(self, job_id: str) -> Job:
        return self._get(job_id)

    def jobs(self) -> Iterator[Job]:
        """Active jobs (submission order), then finished ones not retired (finish order)."""
        yield from self._active.values()
        yield from self._done.values()

    # ---- persistence ---------------------------------------------------------------------

    def export_state(self) -> dict[str, Any]:
        """JSON/msgpack-able snapshot; ``from_state`` rebuilds an equivalent scheduler."""
        return {
            "version": _STATE_VERSION,
            "config": self.config.to_dict(),
            "clock": self._clock,
            "nodes": self._gpus.export(),
            "jobs": [j.to_dict() for j in self.jobs()],
            "done": len(self._done),
            "retired": self.retired,
            "running": list(self._running),  # start order: the order of Preempt decisions
            "policy": {"name": self.policy.name, "state": self.policy.export_state()},
            "placement": self.placement.name,
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], policy: Policy | None = None, placement: Placement | None = None
    ) -> Scheduler:
        """The scheduler ``state`` was exported from. ``policy``/``placement`` default to fresh
        ones of the exported names (pass them to keep parameters such as quantum or PACKLIMIT);
        the policy's learned state is restored when its name matches."""
        if state.get("version") not in (1, 2, _STATE_VERSION):  # older ones read as they are
            raise CoreError(f"unsupported scheduler state version {state.get('version')}")
        sched = cls(
            (),
            policy or make_policy(state["policy"]["name"]),
            placement or make_placement(state["placement"]),
            SchedulerConfig.from_dict(state["config"]),
        )
        if state["policy"]["name"] == sched.policy.name:  # else: a new policy learns afresh
            sched.policy.load_state(state["policy"]["state"])
        sched.retired = state.get("retired", 0)
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
            assert job.last_start is not None  # its guard, if any, expires at a pass
            sched._guards.guard(job, job.last_start, job.last_start, sched.config)
        for d in state["nodes"]:
            node = Node(d["name"], tuple(d["gpus"]), d["switch"])
            if d["up"]:
                sched._add_node(node)
                sched._gpus.drain(node.name, d.get("drained", False))  # versions < 3: not
            else:
                sched._gpus.remember(node)
        clock = state["clock"]
        for job in jobs[:n_active]:
            sched.policy.changed(job, clock if clock is not None else 0.0)
        sched._clock = clock
        return sched
