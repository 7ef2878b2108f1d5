"""Free GPU counts per node, indexed so that a placement finds its nodes without a walk over
the cluster: the nodes of each free count in name order, their total, the same per switch,
and the same for the nodes that are entirely free. ``Gpus`` keeps one up to date as GPUs are
taken and released; a pass places its jobs on it and puts the counts back (``place``).

At 1,000 nodes a start costs O(distinct counts + nodes it takes), not O(nodes).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Iterator, Mapping

from coordinator.core.model import Node


class Counts(Mapping[str, int]):
    """Node → free GPUs (0 included), with the nodes of each count in name order."""

    def __init__(self) -> None:
        self._of: dict[str, int] = {}
        self._by: dict[int, list[str]] = {}  # count → node names, sorted
        self.total = 0

    def __getitem__(self, name: str) -> int:
        return self._of[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._of)

    def __len__(self) -> int:
        return len(self._of)

    def put(self, name: str, count: int) -> None:
        self._unset(name)
        self._of[name] = count
        bisect.insort(self._by.setdefault(count, []), name)
        self.total += count

    def drop(self, name: str) -> None:
        self._unset(name)

    def _unset(self, name: str) -> None:
        count = self._of.pop(name, None)
        if count is None:
            return
        names = self._by[count]
        del names[bisect.bisect_left(names, name)]
        if not names:
            del self._by[count]
        self.total -= count

    def best_fit(self, gpus: int, skip: Collection[str] = ()) -> str | None:
        """The node with the fewest free GPUs that are at least ``gpus`` (the first by name
        among equals), ``skip`` left out."""
        for count in sorted(c for c in self._by if c >= gpus):
            for name in self._by[count]:
                if name not in skip:
                    return name
        return None

    def largest_first(self) -> Iterator[tuple[int, str]]:
        """(free GPUs, node) of the nodes with any free, most free first, then by name."""
        for count in sorted(self._by, reverse=True):
            if count > 0:
                yield from ((count, name) for name in self._by[count])

    def smallest_first(self) -> Iterator[tuple[int, str]]:
        """(free GPUs, node) of the nodes with any free, fewest free first, then by name."""
        for count in sorted(self._by):
            if count > 0:
                yield from ((count, name) for name in self._by[count])


class SwitchCounts(Counts):
    """``Counts``, and the same for the nodes of each switch (``switches``)."""

    def __init__(self, nodes: Mapping[str, Node]) -> None:
        super().__init__()
        self._nodes = nodes  # the descriptions (switch, size), kept by ``Gpus``
        self._switch_of: dict[str, str] = {}
        self.switches: dict[str, Counts] = {}

    def put(self, name: str, count: int) -> None:
        super().put(name, count)
        switch = self._nodes[name].switch
        if self._switch_of.get(name) != switch:
            self._leave_switch(name)
        if switch is not None:
            self._switch_of[name] = switch
            self.switches.setdefault(switch, Counts()).put(name, count)

    def drop(self, name: str) -> None:
        super().drop(name)
        self._leave_switch(name)

    def _leave_switch(self, name: str) -> None:
        switch = self._switch_of.pop(name, None)
        if switch is not None:
            group = self.switches[switch]
            group.drop(name)
            if not group:
                del self.switches[switch]


class FreeCounts(SwitchCounts):
    """The free GPUs of the nodes that are up, by count and switch; ``whole``: those of the
    nodes entirely free; ``largest_node``: the most GPUs a node that is up has."""

    def __init__(self, nodes: Mapping[str, Node]) -> None:
        super().__init__(nodes)
        self.whole = SwitchCounts(nodes)
        self._sizes: Counter[int] = Counter()
        self._size_of: dict[str, int] = {}

    @classmethod
    def of(cls, free: Mapping[str, int], nodes: Mapping[str, Node]) -> FreeCounts:
        """Counts ``free`` (node → free GPUs) of the nodes described in ``nodes``."""
        counts = cls(nodes)
        for name, count in free.items():
            counts.put(name, count)
        return counts

    @property
    def largest_node(self) -> int:
        return max(self._sizes, default=0)

    def put(self, name: str, count: int) -> None:
        super().put(name, count)
        size = len(self._nodes[name].gpus)
        if self._size_of.get(name) != size:
            self._forget_size(name)
            self._size_of[name] = size
            self._sizes[size] += 1
        if count == size:
            self.whole.put(name, count)
        else:
            self.whole.drop(name)

    def drop(self, name: str) -> None:
        super().drop(name)
        self.whole.drop(name)
        self._forget_size(name)

    def _forget_size(self, name: str) -> None:
        size = self._size_of.pop(name, None)
        if size is not None:
            self._sizes[size] -= 1
            if not self._sizes[size]:
                del self._sizes[size]
