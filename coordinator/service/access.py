"""Who may act on a job: its owner, or an admin (docs/security.md). The sender of the
message being handled is ``c.peer``."""

from __future__ import annotations

from coordinator import protocol
from coordinator.service.records import JobRecord
from coordinator.service.server import Server


def known(c: Server, t: str, job_id: str) -> JobRecord:
    rec = c.book.records.get(job_id)
    if rec is None:
        raise protocol.ProtocolError(f"{t}: unknown job id {job_id!r}")
    return rec


def may_manage(c: Server, rec: JobRecord) -> bool:
    """Whether the sender owns the job or is an admin."""
    owner = rec.request.owner
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
