"""The Slurm partition's nodes as the executor reports them: ``sinfo --json`` read into the
inventory, and the changes since the last look as ``NodeJoined``/``NodeLost``, and
``NodeDrained`` for a node that is up but takes no new jobs (or takes them again)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.executors.slurm.ctl import DRAINED, GONE, gpu_count
from coordinator.service.executor import ExecutorEvent, NodeDrained, NodeInfo, NodeJoined, NodeLost


class Inventory:
    """Every node of the partition, and which of them take jobs now."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self._usable: set[str] = set()  # up: drained ones too
        self._drained: set[str] = set()
        self._expected: set[str] = set()

    def expect(self, nodes: Iterable[str]) -> None:
        """Nodes the journal knows: the next look reports each (NodeJoined or NodeLost)."""
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
            said = f"{state} {flags}"
            usable = bool(gpus) and not any(u in said for u in GONE)
            drained = usable and any(d in said for d in DRAINED)
            seen.add(name)
            self.nodes[name] = NodeInfo(name, n.get("address") or name, gpus, usable)
            if usable and name not in self._usable:
                self._usable.add(name)
                events.append(NodeJoined(name, n.get("address") or name, gpus, running_on(name)))
            elif not usable and name in self._usable:
                self._usable.discard(name)
                events.append(NodeLost(name, f"Slurm says the node is {said}".strip()))
            if usable and drained != (name in self._drained):
                reason = f" ({n['reason']})" if drained and n.get("reason") else ""
                events.append(NodeDrained(name, drained, f"Slurm says {said.strip()}{reason}"))
            (self._drained.add if drained else self._drained.discard)(name)
        for name in sorted(self._expected - self._usable):  # gone while we were down
            events.append(NodeLost(name, "Slurm does not have the node in the partition now"))
        self._expected.clear()
        for name in self._usable - seen:
            self._usable.discard(name)
            self._drained.discard(name)
            self.nodes.pop(name, None)
            events.append(NodeLost(name, "the node left the partition"))
        return events
