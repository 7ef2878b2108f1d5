"""The agent fleet: the first executor. One ``tiresias-agent`` per node talks to the
coordinator's ROUTER socket; this module keeps which connection is which node, turns
commands into ``launch``/``preempt``/``kill``/``fetch_logs`` frames, and agents' messages
(``register``, ``heartbeat``, ``exited``, ``log_data``) into executor events."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from coordinator import protocol
from coordinator.executors.agents import messages
from coordinator.protocol import PartOutcome
from coordinator.service.executor import (
    ExecutorEvent,
    Gang,
    LogData,
    MessageHandler,
    NodeInfo,
    NodeJoined,
    NodeLost,
    PartExited,
)

log = logging.getLogger("tiresias.coordinator")

#: Coordinator→agent "code" asking an unknown agent to register again.
REGISTER = "register"
#: Coordinator→agent "code" refusing a register: another agent, alive, holds this node name.
NODE_TAKEN = "node_taken"


def launch_frames(gang: Gang, epochs: Mapping[str, int] | None = None) -> dict[str, bytes]:
    """The ``launch`` message for each node of one gang; ``epochs`` are the node
    connections' (the agent starts nothing meant for an earlier connection of its node)."""
    return {
        node: protocol.encode(
            "launch",
            epoch=(epochs or {}).get(node, 0),
            job_id=gang.job_id,
            job_key=gang.job_key,
            restart=gang.restart,
            processes=[
                {
                    "role": p.role,
                    "task_index": p.task_index,
                    "argv": list(p.argv),
                    "env": dict(p.env),
                    "gpus": list(p.gpus),
                    "cwd": p.cwd,
                }
                for p in procs
            ],
            grace=gang.grace,
            owner=gang.owner,
        )
        for node, procs in gang.parts.items()
    }


class AgentFleet:
    """Executor over node agents; ``send(route, frame)`` writes to the ROUTER socket.

    A node is one connection at a time. Each accepted ``register`` opens a new epoch of the
    node's connection; a register under a name whose agent (another process: another
    ``instance``) is still heard from is refused, so two agents started with one ``--name``
    never take each other's jobs. The same agent reconnecting (same instance) replaces its
    old connection, and reconcile loses whatever was sent to the old one and is not
    running."""

    def __init__(self, send: Callable[[bytes, bytes], None], heartbeat_timeout: float) -> None:
        self.send = send
        self.heartbeat_timeout = heartbeat_timeout
        self.routes: dict[str, bytes] = {}  # node → ZeroMQ routing id
        self.nodes_by_route: dict[bytes, str] = {}
        self.hosts: dict[str, str] = {}
        self.gpus: dict[str, list[dict[str, Any]]] = {}
        self.last_seen: dict[str, float] = {}  # node → monotonic
        self.instances: dict[str, str] = {}  # node → the connected agent process's token
        self.epochs: dict[str, int] = {}  # node → epoch of its current connection

    # --- commands -----------------------------------------------------------------------
    def _to_node(self, node: str, frame: bytes) -> bool:
        route = self.routes.get(node)
        if route is None:
            log.warning("node %s is not connected; command dropped (reconciled on register)", node)
            return False
        self.send(route, frame)
        return True

    def check_launch(self, gang: Gang) -> str | None:
        """A launch is one message to each node: it must fit the message limit."""
        size = max(map(len, launch_frames(gang).values()), default=0)
        if size <= protocol.MAX_MESSAGE_BYTES:
            return None
        return (
            f"the job's command and environment make a launch of {size} bytes for one node, "
            f"over the {protocol.MAX_MESSAGE_BYTES}-byte message limit; shrink the "
            f"environment or arguments (pass large data in files)"
        )

    def launch(self, gang: Gang) -> None:
        for node, frame in launch_frames(gang, self.epochs).items():
            self._to_node(node, frame)

    def signal(
        self, job_id: str, restart: int, nodes: Sequence[str], signal: str, grace: float
    ) -> None:
        frame = protocol.encode(
            "preempt", job_id=job_id, restart=restart, signal=signal, grace=grace
        )
        for node in nodes:
            self._to_node(node, frame)

    def kill(self, job_id: str, restart: int, nodes: Sequence[str], grace: float = 0.0) -> None:
        fields: dict[str, Any] = {"job_id": job_id, "restart": restart}
        if grace:
            fields["grace"] = grace
        frame = protocol.encode("kill", **fields)
        for node in nodes:
            self._to_node(node, frame)

    def fetch_logs(
        self, req: int, job_id: str, job_key: str, node: str, offsets: Mapping[str, int], limit: int
    ) -> bool:
        frame = protocol.encode(
            "fetch_logs", job_id=job_id, job_key=job_key, req=req, offsets=offsets, limit=limit
        )
        return self._to_node(node, frame)

    def forget(self, job_id: str, found: str | None = None) -> None:
        """Agents keep nothing of a job between its starts."""

    # --- inventory ----------------------------------------------------------------------
    def nodes(self) -> dict[str, NodeInfo]:
        mono = time.monotonic()
        return {name: self._info(name, mono) for name in self.hosts | self.last_seen}

    def node(self, name: str) -> NodeInfo | None:
        known = name in self.hosts or name in self.last_seen
        return self._info(name, time.monotonic()) if known else None

    def _info(self, name: str, mono: float) -> NodeInfo:
        return NodeInfo(
            name,
            self.hosts.get(name, name),
            self.gpus.get(name, []),
            name in self.routes,
            mono - self.last_seen[name] if name in self.last_seen else None,
        )

    def overdue(self, mono: float) -> bool:
        """Whether some node has been silent past the heartbeat timeout."""
        return any(mono - seen > self.heartbeat_timeout for seen in self.last_seen.values())

    def stalled(self, seconds: float) -> None:
        """The coordinator did not run for ``seconds`` (stopped, or starved of CPU): that
        time is nobody's silence, so no node's heartbeat counts as missed for it."""
        for node in self.last_seen:
            self.last_seen[node] += seconds

    def poll(self, mono: float) -> list[ExecutorEvent]:
        """Nodes silent past the heartbeat timeout are lost (and forgotten here)."""
        lost: list[ExecutorEvent] = []
        for node, seen in list(self.last_seen.items()):
            if mono - seen > self.heartbeat_timeout:
                why = f"missed heartbeats for {mono - seen:.1f}s"
                log.warning("node %s %s; declaring it down", node, why)
                self._drop(node)
                lost.append(NodeLost(node, why))
        return lost

    def _drop(self, node: str) -> None:
        route = self.routes.pop(node, None)
        if route is not None:
            self.nodes_by_route.pop(route, None)
        self.last_seen.pop(node, None)
        self.instances.pop(node, None)

    def expect(self, nodes: Iterable[str], mono: float) -> None:
        """Nodes the journal knows: each is lost unless it registers within the timeout."""
        for node in nodes:
            self.last_seen[node] = mono

    def heard(self, rid: bytes, mono: float) -> None:
        """Any message from a registered connection keeps its node alive."""
        node = self.nodes_by_route.get(rid)
        if node is not None:
            self.last_seen[node] = mono

    # --- agents' messages → events ------------------------------------------------------
    def handlers(self) -> dict[str, MessageHandler]:
        return messages.bound(self)

    def registered(self, rid: bytes, t: str, node: str) -> None:
        """Refuse agent messages from a connection that has not registered as ``node``."""
        if self.nodes_by_route.get(rid) != node:
            raise protocol.ProtocolError(
                f"{t}: node {node!r} is not registered on this connection; register first",
                code=REGISTER,
            )

    def on_register(self, rid: bytes, msg: dict[str, Any], mono: float) -> NodeJoined:
        node = msg["node"]
        indices = sorted(g["index"] for g in msg["gpus"])
        if not indices:
            raise protocol.ProtocolError("register: a node must declare at least one GPU")
        if "\0" in (msg.get("host") or ""):  # it becomes jobs' server addresses
            raise protocol.ProtocolError("register: 'host' contains a NUL character")
        instance = msg.get("instance") or ""
        old = self.routes.get(node)
        if old is not None and old != rid and self.instances.get(node) != instance:
            silent = mono - self.last_seen.get(node, -math.inf)
            if silent <= self.heartbeat_timeout:
                raise protocol.ProtocolError(
                    f"register: node {node!r} is already connected: another agent registered "
                    f"under this name and was heard {silent:.1f}s ago; give each agent its own "
                    f"--name (if that agent was stopped, it is declared gone after "
                    f"{self.heartbeat_timeout:g}s of silence)",
                    code=NODE_TAKEN,
                    retry_after=round(self.heartbeat_timeout - silent + 1.0, 1),
                )
        if old is not None and old != rid:
            self.nodes_by_route.pop(old, None)
        self.epochs[node] = self.epochs.get(node, 0) + 1
        self.instances[node] = instance
        self.routes[node] = rid
        self.nodes_by_route[rid] = node
        self.hosts[node] = msg.get("host") or node
        self.last_seen[node] = mono
        self.gpus[node] = msg["gpus"]
        running = {r["job_id"]: r["restart"] for r in msg["running"]}
        return NodeJoined(node, self.hosts[node], msg["gpus"], running)

    def on_exited(self, rid: bytes, msg: dict[str, Any]) -> PartExited:
        self.registered(rid, "exited", msg["node"])
        return PartExited(
            msg["job_id"],
            msg["restart"],
            msg["node"],
            PartOutcome(msg["outcome"]),
            msg["processes"],
        )

    def on_log_data(self, rid: bytes, msg: dict[str, Any]) -> LogData:
        self.registered(rid, "log_data", msg["node"])
        return LogData(msg["req"], msg["node"], msg["files"])
