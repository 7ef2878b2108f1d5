"""A read-only web dashboard of the coordinator (``tiresias-coordinator --dashboard-port N``):
the cluster's GPUs, running and waiting jobs with their place in line and the reason they
wait, each job's history, and the newest events. One page with its own small script, no build
step; it polls ``/api/state`` (and ``/api/job/ID`` for one job's history).

The coordinator's loop publishes a snapshot about once a second (``publish``); the HTTP
thread only serves the newest one and reads histories through its own read-only connection
to the state database, so no request ever touches the scheduler. It shows what ``tiresias
queue`` shows any local user (command lines included, log tails never), and has no login:
it listens on loopback unless told otherwise (docs/security.md)."""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from coordinator.service.dashboard_history import Series, finished_jobs
from coordinator.service.job_events import job_events, recent_events

#: Newest events of all jobs on the page.
RECENT_EVENTS = 50
#: Finished jobs ``/api/finished`` lists at most, and the window of it and ``/api/series``
#: unless the page asks for another (``?window=SECONDS``).
FINISHED = 200
WINDOW = 3600.0
#: The page runs its own inline script and talks to this server only.
_POLICY = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"


def state(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """What the page shows, from the ``queue`` and ``nodes`` replies' contents: GPU totals,
    nodes, running jobs and waiting jobs in line order (log tails left out)."""
    public = [{**j, "log_tail": None} for j in jobs]
    waiting = sorted((j for j in public if j.get("pending")), key=lambda j: j["pending"]["overall"])
    up = [n for n in nodes if n["connected"]]
    return {
        "now": now,
        "gpus": {"total": sum(n["total"] for n in up), "used": sum(n["used"] for n in up)},
        "nodes": nodes,
        "running": [j for j in public if j["state"] in ("running", "preempting")],
        "waiting": waiting,
    }


class Dashboard:
    """The HTTP side: ``serve`` starts a daemon thread on ``addr:port``; ``publish``
    replaces the snapshot; ``close`` stops it."""

    def __init__(self, database: Path) -> None:
        self._database = database
        self._snapshot = b"{}"
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None  # the serving thread's, read-only
        self._server: HTTPServer | None = None
        self.series = Series()

    def publish(self, snapshot: dict[str, Any]) -> None:
        body = json.dumps(snapshot, allow_nan=False, default=str).encode()
        with self._lock:
            self._snapshot = body
        self.series.add(time.time(), snapshot)

    def finished(self, window: float) -> list[dict[str, Any]]:
        """Jobs finished in the last ``window`` seconds, with their JCT, newest first; name,
        owner and shape as last seen active (None for a job that ended before a restart)."""
        jobs = finished_jobs(self.db(), time.time() - window, FINISHED)
        return [
            {
                **dict.fromkeys(("name", "owner", "gpus", "queue")),
                **self.series.seen(j["job_id"]),
                **j,
            }
            for j in jobs
        ]

    def snapshot(self) -> bytes:
        with self._lock:
            return self._snapshot

    def db(self) -> sqlite3.Connection:
        """The serving thread's own read-only connection to the state database."""
        if self._db is None:
            self._db = sqlite3.connect(f"file:{self._database}?mode=ro", uri=True)
        return self._db

    def serve(self, port: int, addr: str) -> None:
        handler = type("Handler", (_Handler,), {"dashboard": self})
        self._server = HTTPServer((addr, port), handler)  # one thread: requests are small
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def serve_dashboard(database: Path, opts: Any) -> Dashboard:
    """The dashboard of ``opts.dashboard_port``/``dashboard_addr``, serving; one clear
    OSError when the port cannot be had."""
    board = Dashboard(database)
    try:
        board.serve(opts.dashboard_port, opts.dashboard_addr)
    except OSError as e:
        where = f"{opts.dashboard_addr}:{opts.dashboard_port}"
        raise OSError(f"cannot serve the dashboard on {where}: {e.strerror}") from None
    return board


def _window(query: str) -> float | None:
    """``?window=SECONDS`` (default :data:`WINDOW`); None when it is not seconds > 0."""
    given = urllib.parse.parse_qs(query).get("window")
    if not given:
        return WINDOW
    try:
        window = float(given[-1])
    except ValueError:
        return None
    return window if math.isfinite(window) and window > 0 else None


class _Handler(BaseHTTPRequestHandler):
    dashboard: Dashboard
    timeout = 10  # a client that sends nothing does not hold the server

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        window = _window(query)
        if window is None:
            self._send(400, "text/plain; charset=utf-8", b"window: expected seconds > 0\n")
        elif path == "/":
            page = resources.files("coordinator.service").joinpath("dashboard.html")
            self._send(200, "text/html; charset=utf-8", page.read_bytes())
        elif path == "/api/state":
            self._send(200, "application/json", self.dashboard.snapshot())
        elif path == "/api/series":
            points = self.dashboard.series.since(time.time() - window)
            self._send(200, "application/json", json.dumps(points).encode())
        elif path == "/api/finished":
            finished = self.dashboard.finished(window)
            self._send(200, "application/json", json.dumps(finished).encode())
        elif path == "/api/events":
            events = recent_events(self.dashboard.db(), RECENT_EVENTS)
            self._send(200, "application/json", json.dumps(events).encode())
        elif path.startswith("/api/job/"):
            events = job_events(self.dashboard.db(), path.removeprefix("/api/job/"))
            if events:  # every job has its submit: none is a job this coordinator never had
                self._send(200, "application/json", json.dumps(events).encode())
            else:
                self._send(404, "application/json", b'{"error": "unknown job id"}')
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found\n")

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", _POLICY)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (a polling page would fill the coordinator's log)."""
