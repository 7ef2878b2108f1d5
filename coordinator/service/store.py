"""SQLite (WAL) journal of everything the coordinator must not lose.

Core state is kept as a snapshot (``Scheduler.export_state``) plus a journal of the core calls
made since; replaying the journal on a restored snapshot rebuilds the exact scheduler because
the core is deterministic. Service-side records (a job's request, its current run's parts,
reported progress) live in a per-job row. Every change is committed before the coordinator
acts on it, so a ``kill -9`` can lose a command never sent (reconciled later) but never make
one twice.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 1),
                                     seq INTEGER NOT NULL, state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS journal (seq INTEGER PRIMARY KEY, event BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL,
                                 record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS packlimit_history (n INTEGER PRIMARY KEY AUTOINCREMENT,
                                              key TEXT NOT NULL, skew REAL NOT NULL,
                                              placement TEXT NOT NULL, iter_time REAL NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (n INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL,
                                      kind TEXT NOT NULL, job_id TEXT NOT NULL,
                                      allocation TEXT);
"""

#: The layout of the state database. 1: before it was recorded (the same tables and record
#: maps); 3: finished jobs' records move to the ``finished`` table (``archive.py``). A state
#: written by a newer coordinator is refused, never half-read.
SCHEMA_VERSION = 3


def private(path: Path) -> None:
    """Create ``path`` as 0600 before anything is written to it (the journal holds jobs'
    environments), or tighten an older one. SQLite gives its -wal and -shm files the
    database's mode."""
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if p.exists() and p.stat().st_mode & 0o077:
            p.chmod(0o600)


def pack(value: Any) -> bytes:
    """A value as the state database stores it (msgpack; the journal, records, archive)."""
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def unpack(blob: bytes) -> Any:
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)


def finished_before(db: sqlite3.Connection, wall: float) -> list[str]:
    """Storage keys of the jobs that finished before ``wall`` (wall clock), read on any
    connection to a state database (retention reads through its own): the records of the
    ``jobs`` table, and of a ``finished`` table where finished jobs are archived."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    queries: list[tuple[str, tuple[float, ...]]] = [("SELECT record FROM jobs", ())]
    if "finished" in tables:
        queries.append(("SELECT record FROM finished WHERE ended < ?", (wall,)))
    keys = []
    for query, args in queries:
        for (blob,) in db.execute(query, args):
            record = unpack(blob)
            if record.get("ended") is not None and record["ended"] < wall:
                keys.append(record["key"])
    return keys


class Store:
    """One coordinator's state directory. Not thread-safe: the event loop owns it."""

    def __init__(self, directory: Path) -> None:
        # 0711: job processes of other users may pass through to STATE/checkpoints/JOB (which
        # the agent makes theirs), but not list or read anything here
        directory.mkdir(mode=0o711, parents=True, exist_ok=True)
        self.path = directory / "coordinator.sqlite"
        private(self.path)
        # built on one thread, then owned by the event loop's thread (embedded tiresias-run)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit is on disk (WAL fsync'd) before anything is acknowledged
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self._in_tx = False
        row = self.db.execute("SELECT MAX(seq) FROM journal").fetchone()
        snap = self.db.execute("SELECT seq FROM snapshot").fetchone()
        self.seq = max(row[0] or 0, snap[0] if snap else 0)
        self.since_snapshot = 0
        self._check_version(directory)

    def _check_version(self, directory: Path) -> None:
        """Refuse a state database of a layout this coordinator does not know; record ours
        in one it does (older ones are read as they are)."""
        version = self.get_meta("schema", 1)
        if not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
            self.db.close()
            raise ValueError(
                f"state {directory} has state schema version {version!r}, which this "
                f"coordinator cannot read (it reads versions 1 to {SCHEMA_VERSION}); start "
                f"the coordinator version that wrote it, or use a new --state"
            )
        if version != SCHEMA_VERSION:
            with self.tx():
                self.set_meta("schema", SCHEMA_VERSION)

    @contextmanager
    def tx(self) -> Iterator[None]:
        """Group writes; commit on leaving (nested uses join the outer transaction)."""
        if self._in_tx:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._in_tx = True
        counters = self.seq, self.since_snapshot
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # a failed disk may refuse even this
                self.db.execute("ROLLBACK")
            self.seq, self.since_snapshot = counters
            raise
        else:
            self.db.execute("COMMIT")
        finally:
            self._in_tx = False

    @property
    def in_transaction(self) -> bool:
        return self._in_tx

    # --- core journal -----------------------------------------------------------------
    def append(self, kind: str, args: dict[str, Any]) -> None:
        self.seq += 1
        self.since_snapshot += 1
        self.db.execute("INSERT INTO journal VALUES (?, ?)", (self.seq, pack([kind, args])))

    def save_snapshot(self, state: dict[str, Any]) -> None:
        """Replace the snapshot and drop the journal it covers."""
        with self.tx():
            self.db.execute(
                "INSERT OR REPLACE INTO snapshot VALUES (1, ?, ?)", (self.seq, pack(state))
            )
            self.db.execute("DELETE FROM journal WHERE seq <= ?", (self.seq,))
        self.since_snapshot = 0

    def empty(self) -> bool:
        """Whether nothing was ever journaled or recorded (a start that got no further)."""
        return not any(
            self.db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone()
            for table in ("snapshot", "journal", "jobs")
        )

    def load(self) -> tuple[dict[str, Any] | None, list[tuple[str, dict[str, Any]]]]:
        """(snapshot or None, journal events after it, in order)."""
        snap = self.db.execute("SELECT seq, state FROM snapshot").fetchone()
        start = snap[0] if snap else 0
        events = [
            tuple(unpack(blob))
            for (blob,) in self.db.execute(
                "SELECT event FROM journal WHERE seq > ? ORDER BY seq", (start,)
            )
        ]
        self.since_snapshot = len(events)
        return (unpack(snap[1]) if snap else None), events

    def log_decision(self, now: float, kind: str, job_id: str, allocation: str | None) -> None:
        """Audit trail of every decision acted upon, in order (never replayed)."""
        self.db.execute(
            "INSERT INTO decisions (time, kind, job_id, allocation) VALUES (?, ?, ?, ?)",
            (now, kind, job_id, allocation),
        )

    def add_observation(self, key: str, skew: float, placement: str, iter_time: float) -> None:
        """One finished run for the PACKLIMIT learner (kept forever; one row per run)."""
        self.db.execute(
            "INSERT INTO packlimit_history (key, skew, placement, iter_time) VALUES (?, ?, ?, ?)",
            (key, skew, placement, iter_time),
        )

    def observations(self) -> list[tuple[str, float, str, float]]:
        return list(
            self.db.execute(
                "SELECT key, skew, placement, iter_time FROM packlimit_history ORDER BY n"
            )
        )

    def decisions(self) -> list[tuple[float, str, str, str | None]]:
        return list(
            self.db.execute("SELECT time, kind, job_id, allocation FROM decisions ORDER BY n")
        )

    # --- service records --------------------------------------------------------------
    def put_job(self, job_id: str, record: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?)", (job_id, self.seq, pack(record))
        )

    def drop_job(self, job_id: str) -> None:
        self.db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))

    def jobs(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for job_id, blob in self.db.execute("SELECT job_id, record FROM jobs ORDER BY rowid"):
            yield job_id, unpack(blob)

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return unpack(row[0]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, pack(value)))

    def close(self) -> None:
        self.db.close()
