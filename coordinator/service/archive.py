"""Finished jobs, kept in the state database and read from there. Once a job has finished
and the pass after it has told its story (``job_events``), its record and its final view
move from memory to the ``finished`` table, in the same transaction, so a coordinator that
has run a year of jobs holds only its active ones. Listings, ``status JOB``, ``logs JOB``
and resent submits read it by index: job number, owner, end time, submit key."""

from __future__ import annotations

import sqlite3
from typing import Any

from coordinator.service.records import JobRecord, number
from coordinator.service.store import pack, unpack

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS finished (num INTEGER PRIMARY KEY, job_id TEXT NOT NULL, "
    "owner TEXT, ended REAL NOT NULL, submit_key TEXT, record BLOB NOT NULL, "
    "view BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS finished_owner ON finished (owner, num)",
    "CREATE INDEX IF NOT EXISTS finished_ended ON finished (ended)",
    "CREATE INDEX IF NOT EXISTS finished_key ON finished (owner, submit_key)",
)


class Archive:
    """The ``finished`` table of one state database (writes join the caller's transaction)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        for statement in _SCHEMA:  # execute, not executescript: that would commit
            db.execute(statement)

    def put(self, job_id: str, rec: JobRecord, view: dict[str, Any]) -> None:
        """Keep a finished job: its record (logs, owner) and what ``status`` says of it."""
        self.db.execute(
            "INSERT OR REPLACE INTO finished VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                number(job_id),
                job_id,
                rec.request.owner,
                rec.ended if rec.ended is not None else rec.submitted,
                rec.request.key,
                pack(rec.to_wire()),
                pack(view),
            ),
        )

    def record(self, job_id: str) -> JobRecord | None:
        row = self.db.execute(
            "SELECT record FROM finished WHERE num = ?", (_num(job_id),)
        ).fetchone()
        return JobRecord.from_wire(job_id, unpack(row[0])) if row else None

    def view(self, job_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT view FROM finished WHERE num = ?", (_num(job_id),)).fetchone()
        return unpack(row[0]) if row else None

    def page(
        self, after: int, limit: int, user: str | None, since: float | None
    ) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``limit`` finished jobs numbered above ``after``, in order: only ``user``'s
        if given, only those that ended at or after ``since`` if given."""
        where, args = ["num > ?"], list[Any]([after])
        if user is not None:
            where.append("owner = ?")
            args.append(user)
        if since is not None:
            where.append("ended >= ?")
            args.append(since)
        rows = self.db.execute(
            f"SELECT num, view FROM finished WHERE {' AND '.join(where)} ORDER BY num LIMIT ?",
            (*args, limit),
        )
        return [(num, unpack(view)) for num, view in rows]

    def job_of_key(self, owner: str | None, key: str) -> str | None:
        """The finished job a submit with this owner and key made, if any."""
        row = self.db.execute(
            "SELECT job_id FROM finished WHERE owner IS ? AND submit_key = ?", (owner, key)
        ).fetchone()
        return row[0] if row else None


def _num(job_id: str) -> int:
    """The number of a job id, or -1 (no row) for one not of the form ``jN``."""
    return number(job_id) if job_id[1:].isdigit() and job_id[:1] == "j" else -1
