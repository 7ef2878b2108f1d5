"""Agents' messages: one handler per message, as in ``requests``; the fleet turns each into
an executor event, which the coordinator applies. The coordinator reaches them through
``Executor.handlers`` (``bound``), so it needs nothing of the fleet."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from coordinator.service import access
from coordinator.service.executor import LogData, MessageHandler, NodeJoined, PartExited
from coordinator.service.server import Server


class Fleet(Protocol):
    """What the handlers need of the fleet (``fleet.AgentFleet``)."""

    epochs: dict[str, int]  # node → epoch of its current connection

    def heard(self, rid: bytes, mono: float) -> None: ...
    def registered(self, rid: bytes, t: str, node: str) -> None: ...
    def on_register(self, rid: bytes, msg: dict[str, Any], mono: float) -> NodeJoined: ...
    def on_exited(self, rid: bytes, msg: dict[str, Any]) -> PartExited: ...
    def on_log_data(self, rid: bytes, msg: dict[str, Any]) -> LogData: ...


def register(fleet: Fleet, c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    c.apply(fleet.on_register(rid, msg, time.monotonic()))
    return {"node": msg["node"], "epoch": fleet.epochs[msg["node"]]}


def heartbeat(fleet: Fleet, c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    fleet.registered(rid, "heartbeat", msg["node"])
    return {}


def exited(fleet: Fleet, c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    event = fleet.on_exited(rid, msg)
    access.known(c, "exited", event.job_id)
    return {} if c.apply(event) else {"stale": True}


def log_data(fleet: Fleet, c: Server, rid: bytes, msg: dict[str, Any]) -> None:
    c.apply(fleet.on_log_data(rid, msg))


Handler = Callable[[Fleet, Server, bytes, dict[str, Any]], dict[str, Any] | None]
HANDLERS: Mapping[str, Handler] = {
    "register": register,
    "heartbeat": heartbeat,
    "exited": exited,
    "log_data": log_data,
}


def bound(fleet: Fleet) -> dict[str, MessageHandler]:
    """The handlers for the coordinator: each first notes that the sender's node is alive
    (any message from a registered connection is), then handles the message."""

    def handler(h: Handler) -> MessageHandler:
        def handle(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any] | None:
            fleet.heard(rid, time.monotonic())
            return h(fleet, c, rid, msg)

        return handle

    return {t: handler(h) for t, h in HANDLERS.items()}
