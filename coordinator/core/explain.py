"""Why a waiting job is not running, and where it stands in line: the scheduler's last pass
decision (``Scheduler.outcome``: ``coordinator.core.selection``) put into words; nothing here
decides. ``explain`` words every waiting job (or those a filter picks), ``explain_jobs`` a
page of them at the cost of the page. The service shows the result in ``tiresias
queue``/``status`` and the dashboard; the simulator writes it per job (``tiresias-sim --out
DIR --reasons``), so both tell the same story for the same events.

Reasons (``Pending.reason``, ``selection.Reason``), the first that applies:

- ``nodes``: the job needs more GPUs than the nodes that are up have (a node is down);
- ``blocked``: a non-preemptive blocking policy (yarn-cs) starts jobs in order, and a job
  ahead of it cannot start;
- ``gpus``: the jobs ahead of it in the policy's order hold or take the GPUs it needs;
- ``releasing``: it has its turn, but the jobs preempted for it still hold their GPUs until
  they have checkpointed;
- ``placement``: it has its turn and enough GPUs are free, but the placement refuses them
  (yarn's strict consolidation: one node, or whole free nodes);
- ``next-pass``: nothing keeps it out; the next scheduling pass starts it.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from coordinator.core.model import Job, JobState, Node
from coordinator.core.placement import packlimit_of
from coordinator.core.policy_base import Holding, Key, submission_order, thresholds_of
from coordinator.core.scheduler import Scheduler
from coordinator.core.selection import Ahead, AheadIndex, Decided, Reason


@dataclass(frozen=True)
class Pending:
    """One waiting job's place and the dominant reason it waits. Positions are 1-based in
    the policy's order of waiting jobs (``queue`` is the 0-based queue; policies without
    queues keep every job in queue 0). ``ahead``/``ahead_gpus``: the jobs that rank before
    it and hold or take GPUs, and how many; ``promotion_at``: when starvation promotion will
    move it to the first queue (None: never, or it is there)."""

    job_id: str
    queue: int
    position: int
    overall: int
    reason: str
    text: str
    gpus: int  # the GPUs it starts on: its ask, or an elastic job's minimum
    free_gpus: int
    capacity: int
    ahead: int
    ahead_gpus: int
    promotion_at: float | None

    def to_dict(self) -> dict[str, object]:
        return dict(vars(self))  # its fields are plain values (asdict copied each deeply)


def duration_text(seconds: float) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``: how long, as a person says it."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def gpus_text(n: int) -> str:
    return f"{n} GPU{'s' * (n != 1)}"


def queue_name(index: int) -> str:
    """Queues as the paper writes them: Q1 (highest priority) … QK."""
    return f"Q{index + 1}"


def explain(
    sched: Scheduler, now: float, wanted: Callable[[Job, str], bool] | None = None
) -> dict[str, Pending]:
    """Every WAITING job's place and reason, in the policy's order; with ``wanted``, only
    the jobs ``wanted(job, reason)`` picks (every waiting job's reason is read to know the
    others' places, but the words, which cost the most, are made for these only)."""
    policy = sched.policy
    words = _Words(sched, now)
    out: dict[str, Pending] = {}
    per_queue: dict[int, int] = {}
    for overall, key in enumerate(policy.waiting_order(), 1):
        job = policy.job(key)
        per_queue[job.queue] = position = per_queue.get(job.queue, 0) + 1
        reason = words.reason(job, key)
        if wanted is None or wanted(job, reason):
            out[job.job_id] = words.pending(job, key, reason, position, overall)
    return out


def explain_jobs(sched: Scheduler, now: float, job_ids: Iterable[str]) -> dict[str, Pending]:
    """The place and reason of those of ``job_ids`` that wait, in the policy's order: read
    from the last pass (no other job is looked at but the running ones ahead), for a page."""
    policy = sched.policy
    order = policy.waiting_order()
    keyed = sorted((k, policy.job(k)) for k in map(policy.waiting_key, job_ids) if k is not None)
    if not keyed:  # none of them waits: nothing to word (a running job's status)
        return {}
    words = _Words(sched, now)
    queued = thresholds_of(policy) is not None  # their keys lead with the queue
    out: dict[str, Pending] = {}
    for key, job in keyed:
        overall = bisect.bisect_left(order, key) + 1
        position = overall - bisect.bisect_left(order, (job.queue,)) if queued else overall
        out[job.job_id] = words.pending(job, key, words.reason(job, key), position, overall)
    return out


class _Words:
    """One scheduler's pass outcome (``Scheduler.outcome``) put into words, job by job in
    the policy's order (``reason`` then ``pending``, for increasing keys)."""

    def __init__(self, sched: Scheduler, now: float) -> None:
        self.sched, self.now = sched, now
        self.decided = sched.outcome(now)
        self.capacity = self.decided.capacity
        # the free GPUs before the pass's starts, indexed: their total and the largest node
        # are read, not summed over every node (a view of one job costs the same on 1,000)
        counts = self.decided.counts
        taken = sum(sum(choice.values()) for _, choice in self.decided.starts)
        self.left = counts.total - taken  # free once the pass's starts took theirs
        self.started = self.decided.started
        self.free_total = self.left + sum(j.gpus for j, _ in self.decided.starts)
        self.walk = _walk(sched, now, self.decided) if sched.policy.preemptive else None
        self.largest = counts.largest_node  # the most GPUs of one node that is up
        self._releasing: list[Job] | None = None
        self._running: Ahead | None = None

    @functools.cached_property
    def free(self) -> dict[str, int]:
        """Free GPUs per node once the pass's starts took theirs: O(nodes), made only to
        word a placement's refusal."""
        return self.decided.free

    def releasing(self) -> list[Job]:
        """The jobs that still hold GPUs after a preemption (a cancel's are stopping), in
        submission order: read from the jobs that hold GPUs, not from every active one."""
        if self._releasing is None:
            stopping = (
                self.sched.job(k[-1]) for h in holding(self.sched).values() for k in h.order
            )
            self._releasing = sorted(
                (j for j in stopping if j.state is JobState.PREEMPTING and not j.cancel_requested),
                key=submission_order,
            )
        return self._releasing

    def reason(self, job: Job, key: Key) -> Reason:
        decided = self.decided
        if job.spec.smallest > self.capacity:
            return Reason.NODES
        if decided.blocker is not None and key > decided.blocker:
            return Reason.BLOCKED
        if job.job_id in self.started:
            return Reason.NEXT_PASS
        if self.walk is None:  # non-preemptive: tried in order on the free GPUs
            return Reason.GPUS if job.spec.smallest > self.left else Reason.PLACEMENT
        refused = decided.refused.get(job.job_id)
        if refused is None:
            return Reason.GPUS  # not selected: the jobs ahead of it take the capacity
        if refused is Reason.RELEASING and not self.releasing():
            return Reason.NEXT_PASS
        return refused

    def ahead(self, key: Key) -> Ahead:
        if self.walk is not None:
            return self.walk.at(key)
        if self._running is None:  # non-preemptive: every job that holds GPUs is ahead
            held = holding(self.sched).values()
            self._running = Ahead(sum(h.jobs for h in held), sum(h.gpus for h in held))
        return self._running

    def pending(self, job: Job, key: Key, reason: Reason, position: int, overall: int) -> Pending:
        sched, now = self.sched, self.now
        ahead = self.ahead(key)
        promotion = _promotion_at(job, sched)
        if reason is Reason.NODES:
            text = _nodes_text(job, self.capacity)
        elif reason is Reason.BLOCKED:
            assert self.decided.blocker is not None
            text = _blocked_text(sched.policy.job(self.decided.blocker), sched.policy.name)
        elif reason is Reason.GPUS:
            text = _gpus_text(job, self.left, ahead, self.capacity, sched, now)
        elif reason is Reason.RELEASING:
            text = _releasing_text(self.releasing())
        elif reason is Reason.PLACEMENT:
            text = _placement_text(job, self.free, sched.nodes())
        else:
            text = "starts at the next scheduling pass"
        return Pending(
            job_id=job.job_id,
            queue=job.queue,
            position=position,
            overall=overall,
            reason=reason.value,
            text=text + _context(job, sched, now, promotion, self.largest),
            gpus=job.spec.smallest,
            free_gpus=self.free_total,
            capacity=self.capacity,
            ahead=ahead.jobs + len(ahead.guarded),
            ahead_gpus=ahead.total_gpus,
            promotion_at=promotion,
        )


def _walk(sched: Scheduler, now: float, decided: Decided) -> AheadIndex:
    """Who takes GPUs before each waiting job: as the decision selected them when it was not
    acted on; after a pass, the running jobs as it left them (those it started among them)
    and the jobs it selected but could not start. The latter is kept with the decision, for
    every view until the next change, while the running order and the guards stay (no guard
    has ended, and the policy's running keys do not move with time)."""
    sel = decided.selection
    if sel is not None:
        return AheadIndex(sel.rkeys, sel.guarded, sel.drop, sel.chosen, sched.job, sel.sizes)
    policy = sched.policy
    rkeys, _ = policy.running_order(now)
    until = sched.guards()
    steady = min(until.values(), default=math.inf) > now  # no guard has ended yet
    kept = decided.ahead
    if steady and kept is not None and kept[0] is rkeys and kept[1] == until:
        return kept[2]
    guarded = [t for t, k in enumerate(rkeys) if until.get(k[-1], -math.inf) > now]
    chosen = sorted(k for k in map(policy.waiting_key, decided.refused) if k is not None)
    index = AheadIndex(rkeys, guarded, (), chosen, sched.job)
    if steady:
        decided.ahead = (rkeys, until, index)
    return index


def holding(sched: Scheduler) -> Mapping[int, Holding]:
    """Queue → its jobs that hold GPUs (``Policy.index_holding``: indexed at the first call,
    from every job the scheduler has, then as jobs are filed)."""
    return sched.policy.index_holding(sched.jobs())


def active_jobs(sched: Scheduler) -> list[Job]:
    """The jobs not finished yet (``Scheduler.jobs`` yields them first, then every finished
    job ever: stop there)."""
    out = []
    for job in sched.jobs():
        if job.state.finished:
            break
        out.append(job)
    return out


def start_text(job: Job) -> str:
    """The GPUs a waiting job starts on: its ask, or an elastic job's minimum ("2 of its 2
    to 8 GPUs": it starts on what is left once it has that many)."""
    least = job.spec.smallest
    if least == job.spec.gpus:
        return gpus_text(least)
    return f"{least} of its {least} to {job.spec.gpus} GPUs"


def _nodes_text(job: Job, capacity: int) -> str:
    return (
        f"needs {start_text(job)} but the nodes that are up have {capacity}: "
        f"it waits for a node to come back"
    )


def _blocked_text(head: Job, policy: str) -> str:
    return f"behind {head.job_id}, which cannot start yet ({policy} starts jobs in order)"


def _gpus_text(
    job: Job, n_free: int, ahead: Ahead, capacity: int, sched: Scheduler, now: float
) -> str:
    one = ahead.jobs == 1
    if sched.policy.preemptive:
        where = ", ".join(f"{queue_name(q)}: {n}" for q, n in ahead.by_queue)
        queued = thresholds_of(sched.policy) is not None
        who = f"the {ahead.jobs} job{'s' * (not one)} ahead of it" + (
            f" ({where})" if queued else ""
        )
        verb = "holds or needs" if one else "hold or need"
    else:
        who = f"{ahead.jobs} running job{'s' * (not one)}"
        verb = "holds" if one else "hold"
    parts = []
    if ahead.jobs:
        parts.append(f"{who} {verb} {ahead.gpus} of {capacity}")
    if ahead.guarded:
        guards = sched.guards()
        until = min(guards[j.job_id] for j in ahead.guarded)
        names = ", ".join(j.job_id for j in ahead.guarded[:3]) + (
            " …" if len(ahead.guarded) > 3 else ""
        )
        parts.append(
            f"{names} may not be preempted for {duration_text(until - now)} (minimum run time)"
        )
    if ahead.fixed is not None:
        parts.append(f"{ahead.fixed.job_id} cannot be checkpointed, so it keeps its GPUs first")
    return f"waiting for {start_text(job)} ({n_free} free): " + "; ".join(parts)


def _releasing_text(releasing: list[Job]) -> str:
    names = ", ".join(j.job_id for j in releasing[:3]) + (" …" if len(releasing) > 3 else "")
    gpus = sum(j.gpus for j in releasing)
    return f"its turn has come: waiting for {names} to checkpoint and free {gpus_text(gpus)}"


def _placement_text(job: Job, free: Mapping[str, int], nodes: Mapping[str, Node]) -> str:
    largest = max(free.values(), default=0)
    if job.gpus <= max((len(nodes[n].gpus) for n in free), default=0):
        return f"needs {gpus_text(job.gpus)} on one node; the largest free block is {largest}"
    whole = [n for n, f in free.items() if f == len(nodes[n].gpus)]
    return (
        f"needs {gpus_text(job.gpus)} on entirely free nodes; {len(whole)} node"
        f"{'s' * (len(whole) != 1)} ({gpus_text(sum(free[n] for n in whole))}) entirely free"
    )


def _promotion_at(job: Job, sched: Scheduler) -> float | None:
    knob = sched.config.promote_knob
    if thresholds_of(sched.policy) is None or job.queue == 0 or not math.isfinite(knob):
        return None
    assert job.wait_since is not None
    return job.wait_since + knob * job.executed


def _context(job: Job, sched: Scheduler, now: float, promotion: float | None, largest: int) -> str:
    """Why it ranks where it does: its queue, a past preemption, a coming promotion;
    ``largest``: the most GPUs of one node."""
    parts = []
    thresholds = thresholds_of(sched.policy)
    if thresholds is not None and job.queue > 0:
        parts.append(
            f"in {queue_name(job.queue)} since its service passed {thresholds[job.queue - 1]:,.0f}"
            f" GPU-s ({job.attained(now):,.0f} GPU-s attained)"
        )
    if job.restarts and job.wait_since is not None:
        how = "preempted" if job.preemptions >= job.restarts else "stopped"
        parts.append(f"{how} {duration_text(now - job.wait_since)} ago")
    if promotion is not None:
        parts.append(f"starvation promotion to Q1 in {duration_text(promotion - now)}")
    placement = sched.placement
    packlimit = packlimit_of(placement)
    if packlimit is not None and job.gpus > 1:
        skew = job.spec.skew
        if job.gpus > largest:  # consolidation is impossible, whatever the skew
            parts.append(f"it will be spread: no node has {job.gpus} GPUs")
        elif skew is None:
            parts.append("it will be consolidated (skew not measured yet)")
        elif skew > packlimit:
            parts.append(f"it will be consolidated (skew {skew:.2f} > PACKLIMIT {packlimit:.2f})")
        else:
            parts.append(f"it may be spread (skew {skew:.2f} ≤ PACKLIMIT {packlimit:.2f})")
    return "".join(f"; {p}" for p in parts)
