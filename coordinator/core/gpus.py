"""The cluster's GPUs as the scheduler counts them: every node ever seen, and the free GPU
indices of the nodes that are up (a drained node's are parked: it takes no new jobs). Pure
bookkeeping for ``Scheduler``; it decides nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.core.free import FreeCounts
from coordinator.core.model import Allocation, CoreError, Node


class Gpus:
    """``nodes``: every node ever seen, as last described. ``free``: node that is up → its
    free GPU indices, sorted. ``capacity``: GPUs on nodes that are up; ``known``: GPUs on
    every node ever seen (the largest job that may come); ``free_total``: free GPUs on
    nodes that are up; ``counts``: their free GPU counts, indexed for placements.
    ``parked``: drained node → its free GPUs, counted in none of those (its jobs' GPUs stay
    in ``capacity`` until they free)."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.free: dict[str, list[int]] = {}
        self.parked: dict[str, list[int]] = {}
        self.counts = FreeCounts(self.nodes)
        self.capacity = 0
        self.known = 0
        self.free_total = 0

    def remember(self, node: Node) -> None:
        """``node`` as last described, up or not."""
        old = self.nodes.get(node.name)
        self.known += len(node.gpus) - (len(old.gpus) if old else 0)
        self.nodes[node.name] = node

    def add(self, node: Node, held: set[int]) -> None:
        """``node`` is up; ``held``: its GPUs that jobs still hold (they free at exit)."""
        if node.name in self.free:
            raise CoreError(f"node {node.name} is already up")
        if len(set(node.gpus)) != len(node.gpus):
            raise CoreError(f"node {node.name} lists a GPU twice: {node.gpus}")
        self.remember(node)
        self.free[node.name] = sorted(set(node.gpus) - held)
        self.counts.put(node.name, len(self.free[node.name]))
        self.capacity += len(node.gpus)
        self.free_total += len(self.free[node.name])

    def remove(self, name: str) -> None:
        """Node ``name`` is gone, with its GPUs."""
        if name not in self.free:
            raise CoreError(f"node {name} is not up")
        self.free_total -= len(self.free.pop(name))
        self.counts.drop(name)
        self.capacity -= len(self.nodes[name].gpus) - len(self.parked.pop(name, ()))

    def drain(self, name: str, drained: bool) -> None:
        """Node ``name`` takes no new jobs (``drained``: its free GPUs parked, and those its
        jobs free), or takes them again; nothing changes when it already is so."""
        if name not in self.free:
            raise CoreError(f"node {name} is not up")
        if drained == (name in self.parked):
            return
        if drained:
            self.parked[name], self.free[name] = self.free[name], []
            moved = -len(self.parked[name])
        else:
            self.free[name] = sorted(self.parked.pop(name))
            moved = len(self.free[name])
        self.counts.put(name, len(self.free[name]))
        self.free_total += moved
        self.capacity += moved

    def export(self) -> list[dict[str, Any]]:
        """Every node as a snapshot keeps it: its GPUs, and whether it is up and drained."""
        return [
            {
                "name": n.name,
                "gpus": list(n.gpus),
                "switch": n.switch,
                "up": n.name in self.free,
                "drained": n.name in self.parked,
            }
            for n in self.nodes.values()
        ]

    def take(self, choice: Mapping[str, int]) -> Allocation:
        """The lowest free GPUs of each chosen node, as many as chosen. ``counts`` has them
        taken already: the pass placed them there (``selection.place(keep=True)``)."""
        by_node = {}
        for n, k in choice.items():
            free = self.free[n]
            by_node[n] = free[:k]
            del free[:k]
        self.free_total -= sum(choice.values())
        return Allocation.of(by_node)

    def release(self, alloc: Allocation) -> None:
        for n, gs in alloc.gpus:
            free = self.free.get(n)
            if free is None:  # a node that went down took its GPUs with it
                continue
            back = set(gs) & set(self.nodes[n].gpus)  # it may have come back smaller
            if n in self.parked:  # drained: they leave the capacity
                self.parked[n].extend(back)
                self.capacity -= len(back)
                continue
            free.extend(back)
            free.sort()
            self.counts.put(n, len(free))
            self.free_total += len(back)
