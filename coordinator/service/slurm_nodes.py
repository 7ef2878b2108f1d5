"""The Slurm partition's nodes as the executor reports them: ``sinfo --json`` read into the
inventory, and the changes since the last look as ``NodeUp``/``NodeLost``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.service.executor import ExecutorEvent, NodeInfo, NodeLost, NodeUp
from coordinator.service.slurm_ctl import UNUSABLE, gpu_count


class Inventory:
    """Every node of the partition, and which of them take jobs now."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self._usable: set[str] = set()
        self._expected: set[str] = set()

    def expect(self, nodes: Iterable[str]) -> None:
        """Nodes the journal knows: the next look reports each (NodeUp or NodeLost)."""
        self._expected |= set(nodes)

    def look(
        self, nodes: list[dict[str, Any]], running_on: Callable[[str], Mapping[str, int]]
    ) -> list[ExecutorEvent]:
        """Read one ``sinfo`` answer; the nodes that came (with the starts ``running_on``
        them) or went since the last one."""
        events: list[ExecutorEvent] = []
        seen = set()
        for n in nodes:
            name, state = n["name"], str(n.get("state", "")).lower()
            flags = " ".join(map(str, n.get("state_flags", []))).lower()
            gpus = [{"index": i} for i in range(gpu_count(str(n.get("gres", ""))))]
            usable = bool(gpus) and not any(u in f"{state} {flags}" for u in UNUSABLE)
            seen.add(name)
            self.nodes[name] = NodeInfo(name, n.get("address") or name, gpus, usable)
            if usable and name not in self._usable:
                self._usable.add(name)
                events.append(NodeUp(name, n.get("address") or name, gpus, running_on(name)))
            elif not usable and name in self._usable:
                self._usable.discard(name)
                events.append(NodeLost(name, f"Slurm says the node is {state} {flags}".strip()))
        for name in sorted(self._expected - self._usable):  # gone while we were down
            events.append(NodeLost(name, "Slurm does not have the node in the partition now"))
        self._expected.clear()
        for name in self._usable - seen:
            self._usable.discard(name)
            self.nodes.pop(name, None)
            events.append(NodeLost(name, "the node left the partition"))
        return events
