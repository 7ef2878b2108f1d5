"""Agents' messages: one handler per message, as in ``requests``; the fleet turns each into
an executor event, which the coordinator applies."""

from __future__ import annotations

import time
from typing import Any

from coordinator.service import access
from coordinator.service.server import Server


def register(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    c.apply(c.fleet.on_register(rid, msg, time.monotonic()))
    return {"node": msg["node"]}


def heartbeat(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    c.fleet.registered(rid, "heartbeat", msg["node"])
    return {}


def exited(c: Server, rid: bytes, msg: dict[str, Any]) -> dict[str, Any]:
    event = c.fleet.on_exited(rid, msg)
    access.known(c, "exited", event.job_id)
    return {} if c.apply(event) else {"stale": True}


def log_data(c: Server, rid: bytes, msg: dict[str, Any]) -> None:
    c.apply(c.fleet.on_log_data(rid, msg))


AGENT_HANDLERS = {
    "register": register,
    "heartbeat": heartbeat,
    "exited": exited,
    "log_data": log_data,
}
