"""Job timelines kept by the coordinator: after each pass the core's ``Timeline`` says what
happened, and the events go into the state database in the same transaction as the pass, so
``tiresias status JOB`` and the dashboard tell each job's story across restarts."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from coordinator.core.history import Timeline
from coordinator.core.scheduler import Scheduler

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS job_events (n INTEGER PRIMARY KEY AUTOINCREMENT, "
    "job_id TEXT NOT NULL, time REAL NOT NULL, wall REAL NOT NULL, kind TEXT NOT NULL, "
    "text TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS job_events_job ON job_events (job_id, n)",
)

#: Events ``of`` returns for one job: the first (its submission, first start) and the newest.
JOB_EVENTS = 200


class History:
    """Stores the events of ``Timeline.observe``; the timeline starts from the scheduler as
    recovered (its past is in the table already)."""

    def __init__(self, db: sqlite3.Connection, sched: Scheduler) -> None:
        self.db = db
        for statement in _SCHEMA:  # execute, not executescript: that would commit
            db.execute(statement)
        self.timeline = Timeline()
        self.timeline.prime(sched)

    def record(self, sched: Scheduler, now: float, step_of: Callable[[str], int | None]) -> None:
        """Store what changed since the last pass (inside the caller's transaction)."""
        wall = time.time()
        events = self.timeline.observe(sched, now, step_of)
        self.db.executemany(
            "INSERT INTO job_events (job_id, time, wall, kind, text) VALUES (?, ?, ?, ?, ?)",
            [(e.job_id, e.time, wall - (now - e.time), e.kind, e.text) for e in events],
        )

    def note(self, job_id: str, now: float, kind: str, text: str) -> None:
        """One event the job's runtime told (inside the caller's transaction)."""
        self.db.execute(
            "INSERT INTO job_events (job_id, time, wall, kind, text) VALUES (?, ?, ?, ?, ?)",
            (job_id, now, time.time(), kind, text),
        )

    def of(self, job_id: str) -> list[dict[str, Any]]:
        return job_events(self.db, job_id)

    def recent(self, limit: int) -> list[dict[str, Any]]:
        return recent_events(self.db, limit)


def job_events(db: sqlite3.Connection, job_id: str) -> list[dict[str, Any]]:
    """The job's events, oldest first: its first and its newest ``JOB_EVENTS // 2``."""
    half = JOB_EVENTS // 2
    rows = db.execute(
        "SELECT n, time, wall, kind, text FROM job_events WHERE job_id = ? ORDER BY n LIMIT ?",
        (job_id, half),
    ).fetchall()
    newest = db.execute(
        "SELECT n, time, wall, kind, text FROM job_events WHERE job_id = ? AND n > ? "
        "ORDER BY n DESC LIMIT ?",
        (job_id, rows[-1][0] if rows else 0, half),
    ).fetchall()
    return [_event(job_id, r) for r in rows + newest[::-1]]


def recent_events(db: sqlite3.Connection, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` events of all jobs, newest first."""
    rows = db.execute(
        "SELECT n, time, wall, kind, text, job_id FROM job_events ORDER BY n DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [_event(r[5], r[:5]) for r in rows]


def _event(job_id: str, row: tuple[Any, ...]) -> dict[str, Any]:
    _, t, wall, kind, text = row
    return {"job_id": job_id, "time": t, "wall": wall, "kind": kind, "text": text}
