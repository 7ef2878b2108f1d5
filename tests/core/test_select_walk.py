"""The selection visits only the waiting jobs that can start on its budget (one bisection
per smallest GPU count) and selects exactly what the walk over every waiting key, kept here
as the reference, selects: the same jobs chosen (elastic ones shrunk alike), the same
running jobs dropped, in order."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import JobSpec
from coordinator.core.model import Job
from coordinator.core.selection import select

Key = tuple[float, str]


def reference(
    rkeys: list[Key],
    rgpus: list[int],
    waiting: list[Key],
    jobs: dict[str, Job],
    guarded: list[int],
    capacity: int,
    smallest: int,
) -> tuple[list[int], list[Key], list[int], dict[str, int]]:
    budget = capacity - sum(rgpus[t] for t in guarded)
    drop: list[int] = []
    chosen: list[Key] = []
    sizes: dict[str, int] = {}
    wants: list[Key] = []  # elastic jobs that share what the walk leaves
    below = [t for t, k in enumerate(rkeys) if jobs[k[-1]].size and t not in guarded]
    j = 0

    def running_until(i: int) -> None:  # the running jobs ahead, one by one
        nonlocal budget, j
        for t in range(j, i):
            if t in guarded or t in below:  # below its ask: holds nothing in the walk
                continue
            if rgpus[t] <= budget:
                budget -= rgpus[t]
            else:
                drop.append(t)
                if jobs[rkeys[t][-1]].spec.min_gpus is not None:
                    wants.append(rkeys[t])
        j = i

    for wk in waiting:
        running_until(bisect.bisect_left(rkeys, wk, j))
        if jobs[wk[-1]].gpus <= budget:
            budget -= jobs[wk[-1]].gpus
            chosen.append(wk)
        elif jobs[wk[-1]].spec.min_gpus is not None:
            wants.append(wk)
        if budget < smallest:
            break
    running_until(len(rkeys))
    yields = set()  # running below their ask, shrunk or preempted for the jobs selected
    for key in sorted(wants + [rkeys[t] for t in below]):
        job = jobs[key[-1]]
        t = rkeys.index(key) if key in rkeys else None
        top = job.spec.gpus if t is None else rgpus[t]
        size = job.spec.fitting(min(top, budget))
        budget -= size
        if size and size < job.spec.gpus:
            sizes[job.job_id] = size
        if t is None and size:
            chosen.append(key)
        elif t in below and size < top:
            drop.append(t)
            yields.add(t)
    chosen.sort()
    drop.sort()
    before = [len(chosen) if t in yields else bisect.bisect_left(chosen, rkeys[t]) for t in drop]
    return drop, chosen, before, sizes


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 30),  # rank
            st.sampled_from((1, 2, 4, 8)),  # GPUs asked
            st.sampled_from((None, 1, 2)),  # elastic: the fewest it runs on
            st.booleans(),  # running
            st.booleans(),  # an elastic running job: below its ask
        ),
        max_size=25,
    ),
    st.data(),
)
def test_the_walk_selects_what_a_walk_over_every_waiting_job_selects(
    jobs: list[tuple[int, int, int | None, bool, bool]], data: st.DataObject
) -> None:
    keyed = [((float(rank), f"j{i}"), running) for i, (rank, _, _, running, _) in enumerate(jobs)]
    made = {
        f"j{i}": Job(JobSpec(f"j{i}", gpus, arrival=0.0, min_gpus=least and min(least, gpus)))
        for i, (_, gpus, least, _, _) in enumerate(jobs)
    }
    for i, (_, gpus, least, running, low) in enumerate(jobs):
        if running and low and least is not None and min(least, gpus) < gpus:
            made[f"j{i}"].size = min(least, gpus)  # runs on its minimum
    rkeys = sorted(k for k, running in keyed if running)
    rgpus = [made[k[-1]].gpus for k in rkeys]
    waiting = sorted(k for k, running in keyed if not running)
    by_smallest: dict[int, list[Key]] = {}
    for k in waiting:
        by_smallest.setdefault(made[k[-1]].spec.smallest, []).append(k)
    guarded = sorted(data.draw(st.sets(st.sampled_from(range(len(rkeys)))))) if rkeys else []
    capacity = data.draw(st.integers(0, 48))
    smallest = min((made[k[-1]].spec.smallest for k in waiting), default=1)
    below = {k[-1] for k in rkeys if made[k[-1]].size}
    job = lambda k: made[k[-1]]  # noqa: E731
    sel = select(rkeys, rgpus, by_smallest, job, guarded, capacity, smallest, below)
    expected = reference(rkeys, rgpus, waiting, made, guarded, capacity, smallest)
    assert (sel.drop, sel.chosen, sel.before, sel.sizes) == expected
