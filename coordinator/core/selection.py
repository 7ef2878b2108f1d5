"""Step 1 of a preemptive pass: which jobs hold GPUs after it. Pure: reads the policy's two
orders and changes nothing (``Scheduler`` then preempts and places)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable

from coordinator.core.model import Job
from coordinator.core.policy_base import Key


def select(
    rkeys: list[Key],
    rgpus: list[int],
    waiting: Iterable[Key],
    job: Callable[[Key], Job],
    guarded: list[int],
    capacity: int,
    smallest: int,
) -> tuple[list[int], list[Job]]:
    """Walk the merged order of running (``rkeys``, ``rgpus``: sorted keys and GPU counts)
    and waiting keys, selecting by GPU count against ``capacity`` and skipping jobs that do
    not fit. Running jobs at the sorted indices ``guarded`` keep their GPUs whatever their
    rank. Returns (indices into ``rkeys`` of running jobs that lose their GPUs, waiting
    jobs selected, in priority order). ``smallest``: the smallest waiting GPU count, so the
    walk stops once nothing more can fit."""
    # guarded jobs keep their GPUs whatever their rank: set them aside first
    budget = capacity - sum(rgpus[t] for t in guarded)
    drop: list[int] = []
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

    for wk in waiting:
        running_until(bisect.bisect_left(rkeys, wk, j))
        candidate = job(wk)
        if candidate.gpus <= budget:
            budget -= candidate.gpus
            chosen.append(candidate)
        if budget < smallest:  # no other waiting job can fit any more
            break
    running_until(len(rkeys))
    return drop, chosen
