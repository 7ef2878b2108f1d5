"""The indexed placements pick exactly what the plain scans over every node picked (kept
here as the reference), on random clusters (sizes, switches, free GPUs) and after random
takes and releases of the index."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import (
    ExitOutcome,
    JobSpec,
    Node,
    Scheduler,
    Start,
    make_placement,
    make_policy,
)
from coordinator.core.free import FreeCounts
from coordinator.core.model import Job
from coordinator.core.placement import PLACEMENT_NAMES

Choice = dict[str, int]


# ---- the reference: each placement as a scan over every node ------------------------------


def fewest_nodes(w: int, free: Mapping[str, int]) -> Choice | None:
    items = sorted((-f, n) for n, f in free.items() if f > 0)
    if sum(-f for f, _ in items) < w:
        return None
    pick: Choice = {}
    rem = w
    for k, (negf, name) in enumerate(items):
        fits = [(-f2, n2) for f2, n2 in items[k:] if -f2 >= rem]
        if fits:
            pick[min(fits)[1]] = rem
            return pick
        pick[name] = -negf
        rem += negf
    return None


def by_switch(w: int, free: Mapping[str, int], nodes: Mapping[str, Node]) -> Choice | None:
    groups: dict[str, dict[str, int]] = {}
    for n, f in free.items():
        sw = nodes[n].switch
        if sw is not None:
            groups.setdefault(sw, {})[n] = f
    best: tuple[int, str, Choice] | None = None
    for sw in sorted(groups):
        pick = fewest_nodes(w, groups[sw])
        if pick is not None and (best is None or len(pick) < best[0]):
            best = (len(pick), sw, pick)
    return best[2] if best is not None else fewest_nodes(w, free)


def consolidate(w: int, free: Mapping[str, int], nodes: Mapping[str, Node]) -> Choice | None:
    single = [(f, n) for n, f in free.items() if f >= w]
    return {min(single)[1]: w} if single else by_switch(w, free, nodes)


def spread(w: int, free: Mapping[str, int], nodes: Mapping[str, Node]) -> Choice | None:
    pick: Choice = {}
    for f, n in sorted((f, n) for n, f in free.items() if f > 0):
        take = min(f, w)
        pick[n] = take
        w -= take
        if w == 0:
            return pick
    return None


def yarn(w: int, free: Mapping[str, int], nodes: Mapping[str, Node]) -> Choice | None:
    if w <= max((len(nodes[n].gpus) for n in free), default=0):
        single = [(f, n) for n, f in free.items() if f >= w]
        return {min(single)[1]: w} if single else None
    whole = {n: f for n, f in free.items() if f == len(nodes[n].gpus)}
    return by_switch(w, whole, nodes)


def reference(name: str, job: Job, free: Mapping[str, int], nodes: Mapping[str, Node]):
    if name == "skew":
        skew = job.spec.skew
        name = "consolidate" if skew is None or skew > 0.5 else "spread"
    scan = {"consolidate": consolidate, "spread": spread, "yarn": yarn}[name]
    return scan(job.gpus, free, nodes)


# ---- random clusters ----------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict[str, Node], dict[str, int]]:
    n = draw(st.integers(1, 12))
    nodes, free = {}, {}
    for i in range(n):
        size = draw(st.sampled_from((1, 2, 4, 8)))
        switch = draw(st.sampled_from((None, "s0", "s1", "s2")))
        name = f"n{draw(st.integers(0, 30))}x{i}"
        nodes[name] = Node(name, tuple(range(size)), switch)
        free[name] = draw(st.integers(0, size))
    return nodes, free


@settings(max_examples=400, deadline=None)
@given(
    clusters(),
    st.integers(1, 40),
    st.sampled_from((None, 0.2, 0.9)),
    st.sampled_from(PLACEMENT_NAMES),
)
def test_indexed_placements_pick_what_the_scans_pick(
    cluster: tuple[dict[str, Node], dict[str, int]],
    gpus: int,
    skew: float | None,
    name: str,
) -> None:
    nodes, free = cluster
    job = Job(JobSpec("j", gpus, arrival=0.0, skew=skew))
    got = make_placement(name, packlimit=0.5).choose(job, FreeCounts.of(free, nodes))
    assert got == reference(name, job, free, nodes)


@settings(max_examples=200, deadline=None)
@given(clusters(), st.lists(st.tuples(st.integers(0, 11), st.integers(-8, 8)), max_size=30))
def test_the_index_follows_every_change(
    cluster: tuple[dict[str, Node], dict[str, int]], changes: list[tuple[int, int]]
) -> None:
    """Counts changed one node at a time (taken, released, a node gone or back) index just
    as counts built afresh, for every placement and job size."""
    nodes, free = cluster
    names = sorted(nodes)
    counts = FreeCounts.of(free, nodes)
    for i, delta in changes:
        name = names[i % len(names)]
        if delta == 0 and name in free:
            del free[name]
            counts.drop(name)
        else:
            free[name] = max(0, min(len(nodes[name].gpus), free.get(name, 0) + delta))
            counts.put(name, free[name])
    fresh = FreeCounts.of(free, nodes)
    assert dict(counts) == free and counts.total == fresh.total == sum(free.values())
    assert counts.largest_node == fresh.largest_node
    for placement in PLACEMENT_NAMES:
        for gpus in (1, 2, 3, 5, 8, 9, 16):
            job = Job(JobSpec("j", gpus, arrival=0.0, skew=0.9))
            got = make_placement(placement).choose(job, counts)
            assert got == reference(placement, job, free, nodes)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from((1, 2, 3, 4, 8)), st.booleans()), min_size=1, max_size=30),
    st.sampled_from(PLACEMENT_NAMES),
)
def test_the_schedulers_index_counts_its_free_gpus(
    jobs: list[tuple[int, bool]], placement: str
) -> None:
    """Through starts (placed on the index by the pass), exits, explain's trial decisions
    and a node going, the index counts exactly the free GPUs of the nodes that are up."""
    nodes = [Node(f"n{i}", tuple(range(size))) for i, size in enumerate((8, 4, 4, 2))]
    s = Scheduler(nodes, make_policy("tiresias-l"), make_placement(placement))
    running: list[str] = []
    for t, (gpus, finish) in enumerate(jobs):
        s.submit(JobSpec(f"j{t}", gpus, arrival=float(t)), float(t))
        s.outcome(float(t))  # between passes: places nothing for good
        running += [d.job_id for d in s.schedule(float(t)) if isinstance(d, Start)]
        if finish and running:
            s.exited(running.pop(0), float(t) + 0.5, ExitOutcome.COMPLETED)
        if t == len(jobs) // 2:
            s.node_down("n3", float(t) + 0.5)
        free = {n: len(g) for n, g in s.free_gpus().items()}
        assert dict(s._gpus.counts) == free and s._gpus.counts.total == sum(free.values())
