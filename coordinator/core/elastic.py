"""Elastic jobs (``JobSpec.min_gpus``) in a preemptive selection: the rules that size them.

An elastic job at its ask is a rigid job: ranked by attained GPU service, it keeps its GPUs
against every job ranked below it. Below its ask it holds GPUs a rigid job of its size could
not, GPUs that rigid Tiresias would hand to the jobs ranked below it (backfill), so there it
uses only what every selected job leaves:

- ``select`` counts a running elastic job below its ask as holding nothing, and passes over
  a waiting one that does not fit whole, or a running one that no longer does (``wants``);
- ``share`` then gives what is left, in the policy's order, to those jobs: each runs on the
  largest size in its range that fits and divides its maximum (``JobSpec.fitting``), so a
  running one shrinks (to its minimum at worst) instead of being preempted, and is preempted
  only below its minimum;
- ``grows`` says when a running one grows back at a checkpoint: nobody waits, its minimum
  run time is over, it has run long enough to pay a restart ``elastic_payback`` times over, and the
  growth is at least ``GROWTH`` times its size (or to its whole ask), so that GPUs freed
  for a moment do not make it restart each time.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Set

from coordinator.core.model import Job
from coordinator.core.policy_base import Key, Policy

#: A growth restarts the job; it must at least make it this much larger (or whole).
GROWTH = 1.5


def counted(rkeys: list[Key], rgpus: list[int], guarded: list[int], below: Set[str]) -> list[int]:
    """The GPUs each running job holds in the selection's walk: ``rgpus`` (the same list)
    when no running elastic job is below its ask (``below``: their ids), else a copy where
    those not guarded hold nothing (``share`` sizes them)."""
    if not below:
        return rgpus
    keep = set(guarded)
    return [
        0 if k[-1] in below and t not in keep else g
        for t, (k, g) in enumerate(zip(rkeys, rgpus, strict=True))
    ]


def share(
    sel_rkeys: list[Key],
    rgpus: list[int],
    held: list[int],
    job: Callable[[Key], Job],
    wants: list[Key],
    budget: int,
    drop: list[int],
    before: list[int],
    chosen: list[Key],
    sizes: dict[str, int],
) -> int:
    """Share ``budget`` (what the walk left) among the elastic jobs below their ask: the
    running ones ``held`` counted as holding nothing and those in ``wants``, in the policy's
    order, each on the largest size in its range that fits. Updates the selection's drops
    (with ``before``), chosen keys and ``sizes``; returns what is left."""
    running = {sel_rkeys[t]: t for t in range(len(rgpus)) if held[t] != rgpus[t]}
    dropped = {sel_rkeys[t]: t for t in drop}
    added = False
    for key in sorted([*running, *wants]):
        elastic = job(key)
        t = running.get(key, dropped.get(key))
        top = elastic.spec.gpus if t is None else rgpus[t]
        size = elastic.spec.fitting(min(top, budget))
        budget -= size
        if size and size < elastic.spec.gpus:
            sizes[elastic.job_id] = size
        if t is None:  # waiting
            if size:
                bisect.insort(chosen, key)
                added = True
        elif key in running and size < top:  # shrunk or preempted for jobs it yields to
            i = bisect.bisect_left(drop, t)
            drop.insert(i, t)
            before.insert(i, -1)
    if added or -1 in before:
        # for whom each stops: the jobs selected ahead of it; one that yields, all of them
        before[:] = [
            len(chosen) if b < 0 else bisect.bisect_left(chosen, sel_rkeys[t])
            for t, b in zip(drop, before, strict=True)
        ]
    return budget


def _pays_after(job: Job, payback: float) -> float:
    """The run time after which ``job`` has paid a restart (its checkpoint and restore)
    ``payback`` times over."""
    return payback * (job.checkpoint_cost + job.restore_cost)


def paid_at(below: Iterable[Job], now: float, payback: float) -> list[float]:
    """When the first of the running jobs ``below`` their ask that has not run long enough
    to pay a restart ``payback`` times over yet will have (empty: none): a pass then may grow it."""
    due = []
    for job in below:
        if job.last_start is not None:
            due.append(job.last_start + _pays_after(job, payback) - job.total_executed)
    later = [t for t in due if t > now]
    return [min(later)] if later else []


def grows(job: Job, free: int, now: float, guarded: Set[str], payback: float) -> int:
    """The size running ``job`` grows to on ``free`` more GPUs, or 0 (not now; the caller
    checks that nobody waits)."""
    if not job.size or job.job_id in guarded or job.last_start is None:
        return 0
    if job.total_executed_at(now) < _pays_after(job, payback):
        return 0
    size = job.spec.fitting(job.size + free)
    if size < job.spec.gpus and size < GROWTH * job.size:
        return 0
    return size


def file_started(policy: Policy, job: Job, now: float) -> None:
    """File ``job`` that just started (still filed as waiting, by its range) with ``policy``,
    held at this size first when its runtime has not confirmed it can resize (``Job.hold``)."""
    policy.remove(job)
    job.hold()
    policy.changed(job, now)
