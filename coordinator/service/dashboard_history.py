"""What the dashboard shows over time: the cluster's load as a series of points, and the
finished jobs with their JCT.

- :class:`Series` keeps a point (wall time, GPUs in use and in all, running jobs, waiting
  jobs per queue) each time one of these changes in a published snapshot, so a step plot of
  it is exact however seldom the load changes, and a day of a busy cluster is a few thousand
  points. It lives in the coordinator's memory: it starts again with the coordinator.
- :func:`finished_jobs` reads the job timelines in the state database (``job_events``): a
  job's JCT is its end's time minus its submission's, on the coordinator's clock, so it
  survives restarts and agrees with ``tiresias status``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import deque
from typing import Any

from coordinator.core.explain import queue_name

#: Points kept: at one change a second, most of a day.
MAX_POINTS = 50_000
#: Finished jobs' names, owners and shapes remembered from the snapshots (the timelines hold
#: neither).
MAX_REMEMBERED = 10_000
#: The kinds of a job's last event.
ENDS = ("completed", "failed", "cancelled")


def load(snapshot: dict[str, Any]) -> tuple[int, int, int, dict[str, int]]:
    """(GPUs in use, GPUs in all, running jobs, waiting jobs per queue name) of a snapshot."""
    waiting: dict[str, int] = {}
    for job in snapshot.get("waiting", ()):
        name = queue_name(job["queue"])
        waiting[name] = waiting.get(name, 0) + 1
    gpus = snapshot.get("gpus", {})
    return gpus.get("used", 0), gpus.get("total", 0), len(snapshot.get("running", ())), waiting


class Series:
    """The load over time (``add`` from the coordinator's loop, ``since`` from the HTTP
    thread), and the last view of each job seen active."""

    def __init__(self) -> None:
        self._points: deque[tuple[float, int, int, int, dict[str, int]]] = deque(maxlen=MAX_POINTS)
        self._seen: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def add(self, wall: float, snapshot: dict[str, Any]) -> None:
        point = (wall, *load(snapshot))
        with self._lock:
            if not self._points or self._points[-1][1:] != point[1:]:
                self._points.append(point)
            for job in (*snapshot.get("running", ()), *snapshot.get("waiting", ())):
                self._seen.pop(job["job_id"], None)  # the newest last: the oldest go first
                self._seen[job["job_id"]] = {
                    k: job.get(k) for k in ("name", "owner", "gpus", "queue")
                }
            while len(self._seen) > MAX_REMEMBERED:
                del self._seen[next(iter(self._seen))]

    def since(self, wall: float) -> list[dict[str, Any]]:
        """The points at or after ``wall``, and the one before (where the plot starts)."""
        with self._lock:
            points = list(self._points)
        first = next((i for i, p in enumerate(points) if p[0] >= wall), len(points))
        return [
            {"wall": t, "used": used, "total": total, "running": running, "waiting": waiting}
            for t, used, total, running, waiting in points[max(0, first - 1) :]
        ]

    def seen(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._seen.get(job_id, {}))


def finished_jobs(db: sqlite3.Connection, since_wall: float, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` jobs that finished at or after ``since_wall``, newest first:
    id, how it ended, when (wall) and its JCT in seconds."""
    rows = db.execute(
        "SELECT e.job_id, e.kind, e.wall, e.time - s.time FROM job_events e "
        "JOIN job_events s ON s.job_id = e.job_id AND s.kind = 'submitted' "
        f"WHERE e.kind IN ({', '.join('?' * len(ENDS))}) AND e.wall >= ? "
        "ORDER BY e.n DESC LIMIT ?",
        (*ENDS, since_wall, limit),
    ).fetchall()
    return [
        {"job_id": job_id, "state": kind, "ended": wall, "jct": jct}
        for job_id, kind, wall, jct in rows
    ]
