"""A pass's decision, before the scheduler acts on it, and why every other waiting job waits.

Pure: these functions read the policy's orders and the free GPU counts and change nothing.
``select`` (preemptive policies) walks the merged order of running and waiting jobs by GPU
count; ``place`` puts the selected jobs (or, for non-preemptive policies, the waiting ones in
order) on the free GPUs. ``Scheduler`` acts on the result (preempts, takes GPUs) and keeps
it as its last pass's ``Decided``; ``coordinator.core.explain`` puts it into words, and
``AheadIndex`` counts from it who takes GPUs before each waiting job, by bisection.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from enum import StrEnum

from coordinator.core import elastic
from coordinator.core.free import FreeCounts
from coordinator.core.gpus import Gpus
from coordinator.core.guards import Guards
from coordinator.core.model import CoreError, Job, Stop, StopReason
from coordinator.core.placement import Choice, Placement
from coordinator.core.policy_base import Key, Policy


class Reason(StrEnum):
    """Why a waiting job is not running: the first that applies (``coordinator.core.explain``
    says each in words)."""

    NODES = "nodes"  # it needs more GPUs than the nodes that are up have
    BLOCKED = "blocked"  # a blocking policy starts jobs in order, and one ahead cannot start
    GPUS = "gpus"  # the jobs ahead of it in the policy's order hold or take its GPUs
    RELEASING = "releasing"  # selected, but preempted jobs still hold the GPUs it needs
    PLACEMENT = "placement"  # selected, enough GPUs free, but the placement refuses them
    NEXT_PASS = "next-pass"  # nothing keeps it out: the next pass starts it


@dataclass(slots=True)
class Selection:
    """What a preemptive selection decided, compactly: the running order it walked (the
    policy's own lists: valid until a job is re-filed), the indices into it of guarded and
    of dropped jobs (sorted),
    the waiting keys selected (in order), and for each drop how many of them rank before it
    (the jobs it is preempted for)."""

    rkeys: list[Key]
    rgpus: list[int]
    guarded: list[int]
    drop: list[int]
    chosen: list[Key]
    before: list[int]
    #: elastic jobs selected on fewer GPUs than they ask: job id → GPUs (a running one that
    #: is dropped with a size here is shrunk, not preempted: its restart is reserved that many)
    sizes: dict[str, int] = field(default_factory=dict)

    def stop(self, before: int, job_id: str) -> Stop:
        """Why a dropped job stops: preempted for the ``before`` jobs selected ahead of it,
        or resized (``sizes``: shrunk for them, or grown for nobody)."""
        ahead = tuple(k[-1] for k in self.chosen[:before])
        return Stop(StopReason.PREEMPTED, for_jobs=ahead, size=self.sizes.get(job_id))


@dataclass
class Decided:
    """One pass's decision (or, between passes, the one a pass would take now): the
    selection (None once acted on: the running order is then its result), the starts (job,
    GPUs per node), the selected jobs it could not start (``refused``), the first
    waiting job that blocks the rest (blocking policies), the free GPUs per node after the
    starts, and the scheduler's version it was taken at (explain trusts it while that holds)."""

    version: int
    now: float
    selection: Selection | None
    starts: list[tuple[Job, Choice]]
    refused: dict[str, Reason]
    blocker: Key | None
    counts: FreeCounts  # the free GPU counts (the scheduler's own), placed on if any start
    capacity: int  # GPUs of the nodes that are up
    #: explain's index of who is ahead, with the running order and guards it was built on
    ahead: tuple[list[Key], dict[str, float], AheadIndex] | None = None

    @property
    def started(self) -> set[str]:
        return {j.job_id for j, _ in self.starts}

    @property
    def free(self) -> dict[str, int]:
        """Free GPUs per node once the starts took theirs. O(nodes): for explain's words on
        a placement, not for a pass (``counts.total`` and ``counts.largest_node`` are read)."""
        free = dict(self.counts)
        for _, choice in self.starts:
            for n, k in choice.items():
                free[n] -= k
        return free


def decide(
    policy: Policy,
    placement: Placement,
    gpus: Gpus,
    guards: Guards,
    smallest: int | None,
    now: float,
    keep: bool = False,
) -> Decided:
    """The decision a pass at ``now`` takes, not acted on: what ``Scheduler`` acts on, and
    between passes what explain words. Preemptive policies select by GPU count against the
    whole capacity (``select``), then place the selected jobs in priority order on the GPUs
    free now; the others place waiting jobs in order, a blocking policy stopping at the
    first that cannot start. ``smallest``: the smallest waiting GPU count (None: nothing
    waits). ``version`` is the caller's to set."""
    if smallest is None:  # nothing to start, nobody to make room for; an elastic job may grow
        sel = grow(None, policy, gpus.free_total, set(), guards, now, gpus.capacity)
        return Decided(0, now, sel, [], {}, None, gpus.counts, gpus.capacity)
    waiting = policy.waiting_order()
    sel = blocker = None
    free = gpus.counts
    starts: list[tuple[Job, Choice]] = []
    refused: dict[str, Reason] = {}
    if policy.preemptive:
        rkeys, rgpus = policy.running_order(now)
        guarded = guards.indices(rkeys, now)
        by_smallest = policy.waiting_by_smallest()
        below = policy.below.keys()
        sel = select(rkeys, rgpus, by_smallest, policy.job, guarded, gpus.capacity, smallest, below)
        if sel.chosen:  # the usual case at scale: a full cluster, nothing to place
            chosen = (policy.job(k) for k in sel.chosen)
            starts, refused, blocker = place(chosen, free, placement, sizes=sel.sizes, keep=keep)
    elif gpus.free_total >= smallest or policy.blocking:
        starts, refused, blocker = place(
            (policy.job(k) for k in waiting),
            free,
            placement,
            blocking=policy.blocking,
            smallest=smallest,
            note=False,  # explain tells a refused job's reason from the free GPUs
            keep=keep,
        )
    if policy.below:  # only elastic jobs below their ask grow (``grow``)
        taken = sum(sum(choice.values()) for _, choice in starts)
        started = {j.job_id for j, _ in starts}
        sel = grow(sel, policy, gpus.free_total - taken, started, guards, now, gpus.capacity)
    head = policy.key(blocker, now) if blocker is not None else None
    return Decided(0, now, sel, starts, refused, head, free, gpus.capacity)


def select(
    rkeys: list[Key],
    rgpus: list[int],
    by_smallest: Mapping[int, list[Key]],
    job: Callable[[Key], Job],
    guarded: list[int],
    capacity: int,
    smallest: int,
    below: Set[str] = frozenset(),
) -> Selection:
    """Walk the merged order of running (``rkeys``, ``rgpus``: sorted keys and GPU counts)
    and waiting keys (``by_smallest``: the fewest GPUs a job can start on → sorted keys),
    selecting by GPU count against ``capacity`` and skipping jobs that do not fit. Running
    jobs at the sorted indices ``guarded`` keep their GPUs whatever their rank.
    ``smallest``: the smallest waiting GPU count, so the walk stops once nothing more can fit.

    The budget only shrinks along the walk, so a waiting job that cannot start on it now
    never can later: the walk visits only the next waiting key of a size that fits (a cursor
    per size), not every waiting job in between, and selects what a walk over
    every waiting key selects.

    Elastic jobs (``coordinator.core.elastic``): those running below their ask (``below``)
    hold nothing in the walk, and those that do not fit whole wait for what it leaves."""
    sel = Selection(rkeys, rgpus, guarded, [], [], [])
    # guarded jobs keep their GPUs whatever their rank: set them aside first
    budget = capacity - sum(rgpus[t] for t in guarded)
    held = elastic.counted(rkeys, rgpus, guarded, below)
    wants: list[Key] = []  # elastic jobs that do not fit whole, for what the walk leaves
    drop, chosen, before = sel.drop, sel.chosen, sel.before
    j = 0  # running jobs before index j have been decided
    g = 0  # guarded[:g] are before index j

    def running_until(i: int) -> None:
        """Decide running jobs j..i-1: all kept at once when they fit (the usual case)."""
        nonlocal budget, j, g
        if i == j:
            return
        h = bisect.bisect_left(guarded, i, g) if guarded else 0
        total = sum(held[j:i])
        if h > g:
            total -= sum(held[t] for t in guarded[g:h])
        if total <= budget:
            budget -= total
        else:
            skip = set(guarded[g:h])
            for t in range(j, i):
                if t in skip:
                    continue
                if held[t] <= budget or not held[t]:  # none: below its ask (elastic)
                    budget -= held[t]
                else:
                    drop.append(t)
                    before.append(len(chosen))
                    if job(rkeys[t]).spec.min_gpus is not None:
                        wants.append(rkeys[t])
        j, g = i, h

    # per size, the index of its next key not visited: only the visited key's size moves on
    # (sizes are disjoint; one left out once the budget is below it never fits again)
    at = dict.fromkeys(by_smallest, 0)
    while budget >= smallest:
        wk: Key | None = None
        for least, keys in by_smallest.items():
            if least <= budget and (i := at[least]) < len(keys) and (wk is None or keys[i] < wk):
                wk, size = keys[i], least
        if wk is None:
            break
        at[size] += 1
        running_until(bisect.bisect_left(rkeys, wk, j))
        candidate = job(wk)
        if candidate.gpus <= budget:
            budget -= candidate.gpus
            chosen.append(wk)
        elif candidate.spec.min_gpus is not None:
            wants.append(wk)
    running_until(len(rkeys))
    if wants or held is not rgpus:
        args = (budget, drop, before, chosen, sel.sizes)
        elastic.share(rkeys, rgpus, held, job, wants, *args)
    return sel


def grow(
    sel: Selection | None,
    policy: Policy,
    free: int,
    started: Set[str],
    guards: Guards,
    now: float,
    capacity: int,
) -> Selection | None:
    """When elastic jobs grow, at a checkpoint: ``sel`` (or a selection that keeps every
    running job) with the running elastic jobs below their ask that grow added to its drops,
    in priority order, sharing ``free`` GPUs (after this pass's starts). Only while no
    waiting job that fits the cluster is left out (jobs stay small while others wait), and
    as ``elastic.grows`` allows."""
    if free < 1 or not policy.preemptive or not policy.below:
        return sel
    fits = sum(
        len(keys) for least, keys in policy.waiting_by_smallest().items() if least <= capacity
    )
    if fits > len(started):
        return sel
    if sel is None:
        rkeys, rgpus = policy.running_order(now)
        candidate = Selection(rkeys, rgpus, guards.indices(rkeys, now), [], [], [])
    else:
        candidate = sel
    grown = False
    for t, key in enumerate(candidate.rkeys):
        if free < 1:
            break
        job = policy.job(key)
        size = elastic.grows(job, free, now, guards.until.keys(), policy.config.elastic_payback)
        if t in candidate.drop or not size:
            continue
        free -= size - job.size
        i = bisect.bisect_left(candidate.drop, t)
        candidate.drop.insert(i, t)
        candidate.before.insert(i, 0)  # for nobody
        candidate.sizes[job.job_id] = size
        grown = True
    return candidate if grown or sel is not None else None


def place(
    jobs: Iterable[Job],
    free: FreeCounts,
    placement: Placement,
    *,
    blocking: bool = False,
    smallest: int = 0,
    note: bool = True,
    sizes: Mapping[str, int] | None = None,
    keep: bool = False,
) -> tuple[list[tuple[Job, Choice]], dict[str, Reason], Job | None]:
    """Place ``jobs`` in order on ``free`` (GPU counts per node, updated as each takes its
    share, and put back before returning unless ``keep``: the caller takes those GPUs, as
    counted already). Returns the starts, the jobs refused
    (``RELEASING``: fewer GPUs free than it needs; ``PLACEMENT``: the placement said no; only
    with ``note``) and, with ``blocking``, the first refused, where the walk stops. It also
    stops once fewer than ``smallest`` GPUs are free. CoreError for a placement that returns
    GPUs it cannot have. ``sizes``: the GPUs to place elastic jobs on, when not all they ask."""
    starts: list[tuple[Job, Choice]] = []
    refused: dict[str, Reason] = {}
    taken: list[tuple[str, int]] = []  # (node, free GPUs before), to put back
    try:
        for job in jobs:
            total = free.total
            if total < smallest:  # nothing more can start: this one is the first that cannot
                return starts, refused, job if blocking else None
            want = sizes.get(job.job_id, job.gpus) if sizes else job.gpus
            shape = job if want == job.gpus else dataclasses.replace(job, size=want)
            choice = None if want > total else placement.choose(shape, free)
            if choice is None:
                if note:
                    refused[job.job_id] = Reason.RELEASING if want > total else Reason.PLACEMENT
                if blocking:
                    return starts, refused, job
                continue
            if sum(choice.values()) != want or any(
                k < 1 or k > free.get(n, 0) for n, k in choice.items()
            ):
                raise CoreError(
                    f"placement {placement.name} returned {choice} for job {job.job_id} "
                    f"({want} GPUs)"
                )
            for n, k in choice.items():
                taken.append((n, free[n]))
                free.put(n, free[n] - k)
            starts.append((job, choice))
    except BaseException:
        keep = False  # nothing is taken
        raise
    finally:
        for n, count in reversed(taken if not keep else ()):
            free.put(n, count)
    return starts, refused, None


@dataclass(frozen=True)
class Ahead:
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


class AheadIndex:
    """Who takes GPUs before any waiting key: the running jobs at the sorted indices
    ``guarded`` of the running order ``rkeys`` whatever their rank, then the others that
    rank before it (but those at ``drop``) and the waiting jobs ``chosen`` (sorted keys) that
    do, on their ``sizes`` (elastic ones below their ask). Built once, O(those); each key is
    then a bisection (a view of one job, or a page deep in the line, walks no running job)."""

    def __init__(
        self,
        rkeys: list[Key],
        guarded: list[int],
        drop: Iterable[int],
        chosen: list[Key],
        job: Callable[[str], Job],
        sizes: Mapping[str, int] | None = None,
    ) -> None:
        self._rkeys, self._chosen = rkeys, chosen
        sizes = sizes or {}
        skip = {*drop, *guarded}
        self.guarded = tuple(job(rkeys[t][-1]) for t in guarded)
        self._guarded_gpus = sum(j.gpus for j in self.guarded)
        self._fixed_at, self._fixed = len(rkeys), None  # the first that cannot checkpoint
        running = []
        for t, k in enumerate(rkeys):
            j = None if t in skip else job(k[-1])
            running.append(j)
            if j is not None and self._fixed is None and not j.checkpointable:
                self._fixed_at, self._fixed = t, j
        self._r = _Taken(running, sizes)
        self._c = _Taken([job(k[-1]) for k in chosen], sizes)
        self._queues = {*self._r.at, *self._c.at}

    def at(self, key: Key) -> Ahead:
        r, c = bisect.bisect_left(self._rkeys, key), bisect.bisect_left(self._chosen, key)
        by_queue = {q: self._r.in_queue(q, r) + self._c.in_queue(q, c) for q in self._queues}
        return Ahead(
            sum(by_queue.values()),
            self._r.gpus[r] + self._c.gpus[c],
            tuple((q, n) for q, n in sorted(by_queue.items()) if n),
            self.guarded,
            self._guarded_gpus,
            self._fixed if self._fixed_at < r else None,
        )


class _Taken:
    """Jobs in an order (None: one that takes nothing): the GPUs the first ``i`` take
    (``gpus[i]``), and where each queue's jobs are (``at``), to count them by bisection."""

    def __init__(self, jobs: list[Job | None], sizes: Mapping[str, int]) -> None:
        self.gpus = [0, *itertools.accumulate(
            0 if j is None else sizes.get(j.job_id, j.gpus) for j in jobs
        )]  # fmt: skip
        self.at: dict[int, list[int]] = {}
        for t, j in enumerate(jobs):
            if j is not None:
                self.at.setdefault(j.queue, []).append(t)

    def in_queue(self, queue: int, i: int) -> int:
        return bisect.bisect_left(self.at.get(queue, ()), i)
