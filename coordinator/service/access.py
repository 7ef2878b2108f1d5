"""Who may act on a job: its owner, or an admin (docs/security.md). The sender of the
message being handled is ``c.peer``."""

from __future__ import annotations

from typing import Any

from coordinator import protocol
from coordinator.service import identity
from coordinator.service.identity import Peer
from coordinator.service.records import JobRecord
from coordinator.service.server import Server

#: Who may send what (docs/security.md); ``report`` is checked per job (owner or job token).
CLIENT_REQUESTS = frozenset({"submit", "status", "queue", "nodes", "cancel", "logs", "advance"})
AGENT_MESSAGES = frozenset({"register", "heartbeat", "exited", "log_data"})
#: The "code" of a refused agent message: the agent's key or uid may not speak for its node
#: name (the agent gives up after a few tries, exit code 2).
IDENTITY = "identity"


def known(c: Server, t: str, job_id: str) -> JobRecord:
    rec = c.book.records.get(job_id) or c.archive.record(job_id)
    if rec is None:
        raise protocol.ProtocolError(f"{t}: unknown job id {job_id!r}")
    return rec


def may_manage(c: Server, rec: JobRecord) -> bool:
    """Whether the sender owns the job or is an admin."""
    return is_owner_or_admin(c, rec.request.owner)


def is_owner_or_admin(c: Server, owner: str | None) -> bool:
    """Whether the sender is ``owner`` (a job's, None when it has none) or an admin."""
    return c.peer.admin or (owner is not None and c.peer.user == owner)


def owned(c: Server, t: str, job_id: str, what: str) -> JobRecord:
    """The job's record, if the sender may ``what`` it."""
    rec = known(c, t, job_id)
    if not may_manage(c, rec):
        raise protocol.ProtocolError(
            f"{t}: job {job_id} belongs to {rec.request.owner!r}; only its owner or an "
            f"admin may {what}"
        )
    return rec


def authorize(peer: Peer, t: str, msg: dict[str, Any]) -> str | None:
    """Why the sender may not send this message, or None when it may."""
    if t in CLIENT_REQUESTS and peer.user is None:
        return f"{t}: {peer.describe()} may not make requests (docs/security.md)"
    if t == "advance" and not peer.admin:
        return f"advance: only an admin may move the clock, not {peer.describe()}"
    if t in AGENT_MESSAGES and peer.node not in (identity.ANY_NODE, msg["node"]):
        return f"{t}: {peer.describe()} may not speak for node {msg['node']!r}"
    return None
