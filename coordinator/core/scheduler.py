"""The scheduler core: one object that takes events and returns decisions.

CONTRACT (used by coordinator/service and coordinator/sim; extend, don't change):

    sched = build_scheduler(Settings(policy="tiresias-l", ...), nodes)   # coordinator.core.settings
    sched.apply(event) -> list[Decision]   # one typed event (coordinator.core.events):
        Submit(spec, now)                  #   CoreError if invalid (duplicate id, too large…)
        Exited(job_id, now, outcome)       #   all processes of the job have exited
        Cancel(job_id, now)                #   [] for a waiting job, [Kill] for a running one
        NodeUp(node, now) / NodeDown(name, now)
        UpdateSkew(job_id, skew) ; UpdateCheckpointable(job_id, checkpointable, now)
        UpdateCosts(job_id, checkpoint_s, restore_s)   # measured or modelled seconds
        SetPackLimit(value)                #   a learned PACKLIMIT (skew placement)
        Schedule(now)                      #   one scheduling pass: its decisions
    Each event also has its method (sched.submit(spec, now), sched.schedule(now), …, with
    node_down returning the ids of the jobs it stopped); the service journals events, the
    simulator and tests call either.
    sched.next_wakeup(now) -> float | None         # next time the policy wants a pass with no
                                                   # outside event (threshold crossing,
                                                   # starvation promotion, interval, time slice)
    sched.job(job_id) -> Job ; sched.jobs() -> Iterable[Job] (active first)
    sched.free_gpus() -> {node: (free indices)} ; sched.policy.key(job, now) (rank of any
    active job) ; sched.export_state() -> dict (JSON/msgpack-able) ;
    Scheduler.from_state(d, policy, placement)
    sched.nodes() -> {name: Node} (up) ; sched.guards() -> {job: end of its minimum run}
    (read by coordinator.core.explain).

Semantics:
- ``Start`` marks the job RUNNING at ``now`` and takes its GPUs. ``Preempt`` marks it
  PREEMPTING: its service stops accruing at ``now`` but its GPUs stay taken until
  ``exited(…, CHECKPOINTED)``, which makes it WAITING again. The simulator applies the exits
  itself (at ``now`` or after a modelled checkpoint cost) and calls ``schedule`` again.
- ``exited(COMPLETED)`` → COMPLETED; ``FAILED`` → FAILED; ``CHECKPOINTED``/``LOST`` → WAITING
  (restarts += 1), or CANCELLED when a cancel was requested.
- Deterministic: the same calls in the same order give the same decisions (ties by arrival,
  then job id). No wall clock, no randomness, no I/O.
- A pass costs O(jobs it looks at until the cluster is full), not O(all jobs ever seen):
  finished jobs leave the active structures.
- Details pinned by tests/core: ``cancel`` also answers [Kill] for a PREEMPTING job (the
  shell may escalate) and [] for a finished one; ``node_down`` stops the service of the jobs
  it returns (PREEMPTING) and forgets the node's GPUs, while their GPUs on other nodes stay
  taken until ``exited(…, LOST)``; ``exited`` for a job that holds no GPUs, an unknown job,
  time going backwards, or ``node_up`` of a node already up raise CoreError.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
from collections.abc import Iterable, Iterator
from typing import Any

from coordinator.core import events
from coordinator.core.config import DEFAULT_QUEUE_THRESHOLDS, SchedulerConfig
from coordinator.core.model import (
    Allocation,
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
from coordinator.core.policies import Key, Policy, make_policy

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
        self._nodes: dict[str, Node] = {}  # every node ever seen (last description)
        self._up: dict[str, list[int]] = {}  # free GPU indices of nodes that are up
        self._capacity = 0  # GPUs on nodes that are up
        self._known = 0  # GPUs on every node ever seen (the largest job that may come)
        self._free_total = 0  # free GPUs on nodes that are up
        self._active: dict[str, Job] = {}  # submission order
        self._done: dict[str, Job] = {}
        self._running: dict[str, Job] = {}
        self._waiting: dict[int, int] = {}  # GPU count → number of WAITING jobs of that size
        # running jobs inside their minimum run time: job id → until, and a heap of expiries
        self._guarded: dict[str, float] = {}
        self._guard_heap: list[tuple[float, str]] = []
        for node in nodes:
            self._add_node(node)

    # ---- cluster -------------------------------------------------------------------------

    def _add_node(self, node: Node) -> None:
        if node.name in self._up:
            raise CoreError(f"node {node.name} is already up")
        if len(set(node.gpus)) != len(node.gpus):
            raise CoreError(f"node {node.name} lists a GPU twice: {node.gpus}")
        old = self._nodes.get(node.name)
        self._known += len(node.gpus) - (len(old.gpus) if old else 0)
        self._nodes[node.name] = node
        held = {
            g
            for j in self._active.values()
            if j.allocation
            for n, gs in j.allocation.gpus
            if n == node.name
            for g in gs
        }
        self._up[node.name] = sorted(set(node.gpus) - held)
        self._capacity += len(node.gpus)
        self._free_total += len(self._up[node.name])

    def node_up(self, node: Node, now: float) -> None:
        self._advance(now)
        self._add_node(node)

    def node_down(self, name: str, now: float) -> list[str]:
        """Forget the node's GPUs. Jobs with GPUs on it stop accruing service now
        (PREEMPTING); their GPUs elsewhere stay busy until the shell, having stopped the
        survivors, reports ``exited(…, LOST)``. Returns those jobs' ids."""
        self._advance(now)
        if name not in self._up:
            raise CoreError(f"node {name} is not up")
        self._free_total -= len(self._up.pop(name))
        self._capacity -= len(self._nodes[name].gpus)
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
        return {n: tuple(g) for n, g in self._up.items()}

    def nodes(self) -> dict[str, Node]:
        """The nodes that are up, as last described."""
        return {n: self._nodes[n] for n in self._up}

    def guards(self) -> dict[str, float]:
        """Running job → end of its minimum run time (it may not be preempted before)."""
        return dict(self._guarded)

    def _take(self, choice: dict[str, int]) -> Allocation:
        by_node = {}
        for n, k in choice.items():
            free = self._up[n]
            by_node[n] = free[:k]
            del free[:k]
        self._free_total -= sum(choice.values())
        return Allocation.of(by_node)

    def _release(self, alloc: Allocation) -> None:
        for n, gs in alloc.gpus:
            free = self._up.get(n)
            if free is None:  # a node that went down took its GPUs with it
                continue
            back = set(gs) & set(self._nodes[n].gpus)  # it may have come back smaller
            free.extend(back)
            free.sort()
            self._free_total += len(back)

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
        if self.config.reject_oversized and spec.gpus > self._known:
            raise CoreError(
                f"job {spec.job_id} asks for {spec.gpus} GPUs but the cluster has {self._known}"
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

    def _stop(self, job: Job, now: float) -> None:
        """Stop accruing service (RUNNING → PREEMPTING); GPUs stay taken until exit."""
        assert job.last_start is not None
        ran = now - job.last_start
        job.executed += ran
        job.total_executed += ran
        job.last_start = None
        job.state = JobState.PREEMPTING
        job.wait_since = now
        del self._running[job.job_id]
        self._guarded.pop(job.job_id, None)
        self.policy.changed(job, now)

    def exited(self, job_id: str, now: float, outcome: ExitOutcome) -> None:
        self._advance(now)
        job = self._get(job_id)
        if job.state not in (JobState.RUNNING, JobState.PREEMPTING):
            raise CoreError(f"job {job_id} is {job.state}, not running: cannot exit")
        if job.state is JobState.RUNNING:
            self._stop(job, now)
        assert job.allocation is not None
        self._release(job.allocation)
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
            self._guarded.pop(job_id, None)
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
            case events.Exited(job_id, now, outcome):
                self.exited(job_id, now, outcome)
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
        guarded = self._guarded_indices(rkeys, now)
        # guarded jobs keep their GPUs whatever their rank: set them aside first
        budget = self._capacity - sum(rgpus[t] for t in guarded)
        drop: list[int] = []  # indices into rkeys of running jobs that lose their GPUs
        chosen: list[Job] = []
        j = 0  # running jobs before index j have been decided
        g = 0  # guarded[:g] are before index j

        def running_until(i: int) -> None:
            """Decide running jobs j..i-1: all kept at once when they fit (the usual case)."""
            nonlocal budget, j, g
            h = bisect.bisect_left(guarded, i, g)
            total = sum(rgpus[j:i]) - sum(rgpus[t] for t in guarded[g:h])
            if total <= budget:
                budget -= total
            else:
                for t in range(j, i):
                    if t in guarded[g:h]:
                        continue
                    if rgpus[t] <= budget:
                        budget -= rgpus[t]
                    else:
                        drop.append(t)
            j, g = i, h

        for wk in policy.waiting_order():
            running_until(bisect.bisect_left(rkeys, wk, j))
            job = policy.job(wk)
            if job.gpus <= budget:
                budget -= job.gpus
                chosen.append(job)
            if budget < smallest:  # no other waiting job can fit any more
                break
        running_until(len(rkeys))
        for job in [policy.job(rkeys[t]) for t in drop]:
            job.preemptions += 1
            self._stop(job, now)
            decisions.append(Preempt(job.job_id))
        for job in chosen:
            start = self._try_start(job, now)
            if start is not None:
                decisions.append(start)
        return decisions

    def _guarded_indices(self, rkeys: list[Key], now: float) -> list[int]:
        """Sorted indices into ``rkeys`` of the running jobs still inside their minimum run
        time (after dropping the guards that have expired by ``now``)."""
        heap, guarded = self._guard_heap, self._guarded
        while heap and heap[0][0] <= now:
            until, job_id = heapq.heappop(heap)
            if guarded.get(job_id) == until:
                del guarded[job_id]
        if not guarded:
            return []
        return [t for t, k in enumerate(rkeys) if k[-1] in guarded]

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
            self._guarded[job.job_id] = until
            heapq.heappush(self._guard_heap, (until, job.job_id))

    def _fifo_pass(self, now: float) -> list[Decision]:
        decisions: list[Decision] = []
        if not self._waiting:
            return decisions
        for wk in list(self.policy.waiting_order()):
            if self._free_total < min(self._waiting):
                break
            start = self._try_start(self.policy.job(wk), now)
            if start is not None:
                decisions.append(start)
            elif self.policy.blocking:
                break
        return decisions

    def _try_start(self, job: Job, now: float) -> Start | None:
        if job.gpus > self._free_total:
            return None
        free = {n: len(g) for n, g in self._up.items()}
        choice = self.placement.choose(job, free, self._nodes)
        if choice is None:
            return None
        if sum(choice.values()) != job.gpus or any(
            k < 1 or k > free.get(n, 0) for n, k in choice.items()
        ):
            raise CoreError(
                f"placement {self.placement.name} returned {choice} "
                f"for job {job.job_id} ({job.gpus} GPUs)"
            )
        job.allocation = self._take(choice)
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
        if self._waiting and self._guarded:  # a guard's end may let a waiting job in
            heap = self._guard_heap
            while heap and self._guarded.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)
            if heap:
                times.append(heap[0][0])
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
        return {
            "version": _STATE_VERSION,
            "config": self.config.to_dict(),
            "clock": self._clock,
            "nodes": [
                {"name": n.name, "gpus": list(n.gpus), "switch": n.switch, "up": n.name in self._up}
                for n in self._nodes.values()
            ],
            "jobs": [_job_to_dict(j) for j in self.jobs()],
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
        jobs = [_job_from_dict(d) for d in state["jobs"]]
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
                sched._nodes[node.name] = node
                sched._known += len(node.gpus)
        clock = state["clock"]
        for job in jobs[:n_active]:
            sched.policy.changed(job, clock if clock is not None else 0.0)
        sched._clock = clock
        return sched


_SPEC_FIELDS = [f.name for f in dataclasses.fields(JobSpec)]
_JOB_SCALARS = [
    "executed",
    "total_executed",
    "first_start",
    "last_start",
    "wait_since",
    "queue",
    "preemptions",
    "promotions",
    "restarts",
    "finish",
    "cancel_requested",
    "checkpoint_cost",
    "restore_cost",
    "checkpointable",
]
#: Absent from older states: their defaults.
_JOB_SCALARS_SINCE = {"checkpoint_cost": 0.0, "restore_cost": 0.0, "checkpointable": True}


def _job_to_dict(job: Job) -> dict[str, Any]:
    d: dict[str, Any] = {f: getattr(job.spec, f) for f in _SPEC_FIELDS}
    d.update({f: getattr(job, f) for f in _JOB_SCALARS})
    d["state"] = job.state.value
    d["allocation"] = (
        None if job.allocation is None else [[n, list(g)] for n, g in job.allocation.gpus]
    )
    return d


def _job_from_dict(d: dict[str, Any]) -> Job:
    job = Job(spec=JobSpec(**{f: d[f] for f in _SPEC_FIELDS}), state=JobState(d["state"]))
    for f in _JOB_SCALARS:
        setattr(job, f, d[f] if f in d else _JOB_SCALARS_SINCE[f])
    if d["allocation"] is not None:
        job.allocation = Allocation(tuple((n, tuple(g)) for n, g in d["allocation"]))
    return job
