"""Why a waiting job is not running, and where it stands in line: read from a scheduler as a
pass left it, by replaying that pass's rules without changing anything. The service shows the
result in ``tiresias queue``/``status`` and the dashboard; the simulator writes it per job
(``tiresias-sim --out DIR --reasons``), so both tell the same story for the same events.

Reasons (``Pending.reason``), the first that applies:

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

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from coordinator.core.model import Job, JobState, Node
from coordinator.core.scheduler import Scheduler


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
    gpus: int
    free_gpus: int
    capacity: int
    ahead: int
    ahead_gpus: int
    promotion_at: float | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


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


@dataclass(frozen=True)
class _Ahead:
    """The jobs that take GPUs before a waiting job: ``jobs`` ranked ahead of it (``gpus``,
    per queue), plus running jobs inside their minimum run time whatever their rank."""

    jobs: int = 0
    gpus: int = 0
    by_queue: tuple[tuple[int, int], ...] = ()
    guarded: tuple[Job, ...] = ()
    guarded_gpus: int = 0
    fixed: Job | None = None  # the first running one ahead that cannot be checkpointed

    @property
    def total_gpus(self) -> int:
        return self.gpus + self.guarded_gpus


def explain(
    sched: Scheduler, now: float, wanted: Callable[[Job, str], bool] | None = None
) -> dict[str, Pending]:
    """Every WAITING job's place and reason, in the policy's order; with ``wanted``, only
    the jobs ``wanted(job, reason)`` picks (every waiting job is walked to know the others'
    places, but the words, which cost the most, are made for these only). O(active jobs)."""
    policy = sched.policy
    order = [policy.job(k) for k in policy.waiting_order()]
    if not order:
        return {}
    free = {n: len(g) for n, g in sched.free_gpus().items()}
    nodes = sched.nodes()
    capacity = sum(len(nodes[n].gpus) for n in free)
    holders = [j for j in active_jobs(sched) if j.allocation is not None]
    releasing = [j for j in holders if j.state is JobState.PREEMPTING and not j.cancel_requested]
    if policy.preemptive:
        turns = _preemptive_turns(sched, order, capacity, now)
    else:  # running jobs hold their GPUs whatever their rank; decided against free GPUs
        running = [j for j in holders if j.state is JobState.RUNNING]
        held = _Ahead(len(running), sum(j.gpus for j in running))
        turns = dict.fromkeys((j.job_id for j in order), held)
    out: dict[str, Pending] = {}
    per_queue: dict[int, int] = {}
    blocker: Job | None = None
    left = dict(free)
    n_free = free_total = sum(free.values())
    for overall, job in enumerate(order, 1):
        per_queue[job.queue] = per_queue.get(job.queue, 0) + 1
        ahead = turns[job.job_id]
        choice = None
        if job.gpus > capacity:
            reason = "nodes"
        elif blocker is not None:
            reason = "blocked"
        elif policy.preemptive and ahead.total_gpus + job.gpus > capacity:
            reason = "gpus"
        elif job.gpus > n_free:
            reason = ("releasing" if releasing else "next-pass") if policy.preemptive else "gpus"
        else:
            choice = sched.placement.choose(job, left, nodes)
            reason = "placement" if choice is None else "next-pass"
        if wanted is None or wanted(job, reason):
            promotion = _promotion_at(job, sched)
            if reason == "nodes":
                text = _nodes_text(job, capacity)
            elif reason == "blocked":
                assert blocker is not None
                text = _blocked_text(blocker, policy.name)
            elif reason == "gpus":
                text = _gpus_text(job, n_free, ahead, capacity, sched, now)
            elif reason == "releasing":
                text = _releasing_text(releasing)
            elif reason == "placement":
                text = _placement_text(job, left, nodes)
            else:
                text = "starts at the next scheduling pass"
            out[job.job_id] = Pending(
                job_id=job.job_id,
                queue=job.queue,
                position=per_queue[job.queue],
                overall=overall,
                reason=reason,
                text=text + _context(job, sched, now, promotion),
                gpus=job.gpus,
                free_gpus=free_total,
                capacity=capacity,
                ahead=ahead.jobs + len(ahead.guarded),
                ahead_gpus=ahead.total_gpus,
                promotion_at=promotion,
            )
        if choice is not None:  # it takes these GPUs at the next pass
            for n, k in choice.items():
                left[n] -= k
                n_free -= k
        if policy.blocking and reason != "next-pass" and blocker is None:
            blocker = job
    return out


def active_jobs(sched: Scheduler) -> list[Job]:
    """The jobs not finished yet (``Scheduler.jobs`` yields them first, then every finished
    job ever: stop there)."""
    out = []
    for job in sched.jobs():
        if job.state.finished:
            break
        out.append(job)
    return out


def _preemptive_turns(
    sched: Scheduler, order: list[Job], capacity: int, now: float
) -> dict[str, _Ahead]:
    """For each waiting job, the jobs that take GPUs before it in a preemptive pass: running
    jobs inside their minimum run time (whatever their rank), then, in the policy's merged
    order, running jobs that fit and waiting jobs that fit (the scheduler's selection)."""
    policy = sched.policy
    rkeys, _ = policy.running_order(now)
    guards = sched.guards()
    guarded = tuple(policy.job(k) for k in rkeys if guards.get(k[-1], -math.inf) > now)
    guarded_ids = {j.job_id for j in guarded}
    guarded_gpus = sum(j.gpus for j in guarded)
    budget = capacity - guarded_gpus
    jobs = gpus = 0
    by_queue: dict[int, int] = {}
    fixed: Job | None = None
    turns: dict[str, _Ahead] = {}
    r = 0

    def take(j: Job) -> None:
        nonlocal budget, jobs, gpus
        budget -= j.gpus
        jobs += 1
        gpus += j.gpus
        by_queue[j.queue] = by_queue.get(j.queue, 0) + 1

    for wk, job in zip(policy.waiting_order(), order, strict=True):
        while r < len(rkeys) and rkeys[r] < wk:
            running = policy.job(rkeys[r])
            if running.job_id not in guarded_ids and running.gpus <= budget:
                take(running)
                if fixed is None and not running.checkpointable:
                    fixed = running
            r += 1
        turns[job.job_id] = _Ahead(
            jobs, gpus, tuple(sorted(by_queue.items())), guarded, guarded_gpus, fixed
        )
        if job.gpus <= budget:
            take(job)
    return turns


def _nodes_text(job: Job, capacity: int) -> str:
    return (
        f"needs {gpus_text(job.gpus)} but the nodes that are up have {capacity}: "
        f"it waits for a node to come back"
    )


def _blocked_text(head: Job, policy: str) -> str:
    return f"behind {head.job_id}, which cannot start yet ({policy} starts jobs in order)"


def _gpus_text(
    job: Job, n_free: int, ahead: _Ahead, capacity: int, sched: Scheduler, now: float
) -> str:
    one = ahead.jobs == 1
    if sched.policy.preemptive:
        where = ", ".join(f"{queue_name(q)}: {n}" for q, n in ahead.by_queue)
        queued = hasattr(sched.policy, "thresholds")
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
    return f"waiting for {gpus_text(job.gpus)} ({n_free} free): " + "; ".join(parts)


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
    if not hasattr(sched.policy, "thresholds") or job.queue == 0 or not math.isfinite(knob):
        return None
    assert job.wait_since is not None
    return job.wait_since + knob * job.executed


def _context(job: Job, sched: Scheduler, now: float, promotion: float | None) -> str:
    """Why it ranks where it does: its queue, a past preemption, a coming promotion."""
    parts = []
    thresholds = getattr(sched.policy, "thresholds", None)
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
    packlimit = getattr(placement, "packlimit", None)
    if packlimit is not None and job.gpus > 1:
        skew = job.spec.skew
        if skew is None:
            parts.append("it will be consolidated (skew not measured yet)")
        elif skew > packlimit:
            parts.append(f"it will be consolidated (skew {skew:.2f} > PACKLIMIT {packlimit:.2f})")
        else:
            parts.append(f"it may be spread (skew {skew:.2f} ≤ PACKLIMIT {packlimit:.2f})")
    return "".join(f"; {p}" for p in parts)
