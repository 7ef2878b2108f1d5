"""Placement plug-ins: turn a job's GPU count into a GPU count per node (paper §3.3).

A placement sees the free GPU counts of every node that is up (``free``: node → free GPUs,
0 included, indexed by count, switch and whole free nodes: ``coordinator.core.free``); the
scheduler picks the concrete GPU indices.
Returning ``None`` means "not now": the job waits (all-or-nothing). Ties break by node name,
so placement is deterministic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Protocol, runtime_checkable

from coordinator.core.free import Counts, FreeCounts, SwitchCounts
from coordinator.core.model import CoreError, Job

#: Default PACKLIMIT for ``skew`` until the service has learned one from history. Skew is the
#: busiest parameter server's share of traffic; 0.5 means "one server carries half of it",
#: which the paper's skewed models (VGG, AlexNet: one large FC tensor) exceed and balanced
#: models (ResNet, Inception) do not.
DEFAULT_PACKLIMIT = 0.5

Choice = dict[str, int]


@runtime_checkable
class PackLimited(Protocol):
    """A placement's capability: it packs or spreads a job by its skew against PACKLIMIT,
    which the service learns and replaces (``Scheduler.set_packlimit``)."""

    packlimit: float


def packlimit_of(placement: Placement) -> float | None:
    """The placement's PACKLIMIT, or None when it has none: ``isinstance(placement,
    PackLimited)`` by its one attribute (the Protocol check costs ~40 µs a call)."""
    packlimit: float | None = getattr(placement, "packlimit", None)
    return packlimit


class Placement(ABC):
    name: ClassVar[str]

    @abstractmethod
    def choose(self, job: Job, free: FreeCounts) -> Choice | None:
        """GPUs to take per node (summing to ``job.gpus``), or None to wait."""


def _fewest_nodes(w: int, free: Counts) -> Choice | None:
    """Fewest nodes (largest free first), the last piece on the best-fitting node so the
    remaining free GPUs stay in as few fragments as possible."""
    if free.total < w:
        return None
    pick: Choice = {}
    rem = w
    for count, name in free.largest_first():
        fit = free.best_fit(rem, skip=pick)
        if fit is not None:
            pick[fit] = rem
            return pick
        pick[name] = count
        rem -= count
    return None  # unreachable: the total check guarantees a fit


def _by_switch(w: int, free: SwitchCounts) -> Choice | None:
    """``_fewest_nodes`` inside one switch when any switch can hold the job (cross-switch
    traffic is the slowest), else across the whole cluster."""
    best: tuple[int, str, Choice] | None = None
    for sw in sorted(free.switches):
        pick = _fewest_nodes(w, free.switches[sw])
        if pick is not None and (best is None or len(pick) < best[0]):
            best = (len(pick), sw, pick)
    if best is not None:
        return best[2]
    return _fewest_nodes(w, free)


class Consolidate(Placement):
    """Fewest nodes, then least fragmentation (best fit); one switch when possible."""

    name = "consolidate"

    def choose(self, job: Job, free: FreeCounts) -> Choice | None:
        single = free.best_fit(job.gpus)
        if single is not None:
            return {single: job.gpus}
        return _by_switch(job.gpus, free)


class Spread(Placement):
    """Least fragmentation: fill the nodes with the fewest free GPUs first, keeping large free
    blocks intact for jobs that need consolidation."""

    name = "spread"

    def choose(self, job: Job, free: FreeCounts) -> Choice | None:
        pick: Choice = {}
        rem = job.gpus
        for f, n in free.smallest_first():
            take = min(f, rem)
            pick[n] = take
            rem -= take
            if rem == 0:
                return pick
        return None


class YarnStrict(Placement):
    """YARN-CS strict consolidation: a job that fits in one node runs on one node; a larger job
    takes only completely free nodes. Otherwise it waits."""

    name = "yarn"

    def choose(self, job: Job, free: FreeCounts) -> Choice | None:
        w = job.gpus
        if w <= free.largest_node:
            single = free.best_fit(w)
            return {single: w} if single is not None else None
        return _by_switch(w, free.whole)


class SkewAware(Placement):
    """Tiresias: consolidate a job whose skew S_J exceeds ``packlimit``, else spread. A job of
    unknown skew (not profiled yet) is consolidated: that never slows the job itself down, and
    its profile decides later placements."""

    name = "skew"

    def __init__(self, packlimit: float = DEFAULT_PACKLIMIT) -> None:
        self.packlimit = packlimit  # the service may replace it with a learned value
        self._consolidate = Consolidate()
        self._spread = Spread()

    def choose(self, job: Job, free: FreeCounts) -> Choice | None:
        skew = job.spec.skew
        inner = self._consolidate if skew is None or skew > self.packlimit else self._spread
        return inner.choose(job, free)


_PLACEMENTS: dict[str, type[Placement]] = {
    p.name: p for p in (Consolidate, Spread, YarnStrict, SkewAware)
}
PLACEMENT_NAMES: tuple[str, ...] = tuple(_PLACEMENTS)
# Placement each policy gets unless told otherwise, in the simulator and the service alike:
# YARN's strict consolidation for the YARN baselines, skew-aware for Tiresias (§3.3), plain
# consolidation for the rest.
_DEFAULT_PLACEMENTS = {
    "yarn-cs": "yarn",
    "best-effort": "yarn",
    "tiresias-l": "skew",
    "tiresias-g": "skew",
}


def default_placement(policy: str) -> str:
    """The placement a policy runs with when none is configured."""
    return _DEFAULT_PLACEMENTS.get(policy, "consolidate")


def make_placement(name: str, *, packlimit: float = DEFAULT_PACKLIMIT) -> Placement:
    """Placement by name; ``packlimit`` is used by ``skew`` and ignored by the others, so a
    shell can pass its configured value whatever placement is chosen."""
    if name not in _PLACEMENTS:
        raise CoreError(f"unknown placement {name!r}; valid: {', '.join(PLACEMENT_NAMES)}")
    return SkewAware(packlimit) if name == "skew" else _PLACEMENTS[name]()
