"""``tiresias logs``: a client's request fanned out to the nodes that ran the job, answered
once every node has (or when the wait runs out, naming the nodes that did not)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator import protocol

#: Seconds a ``logs`` request waits for the nodes' answers before replying without them.
LOG_FETCH_TIMEOUT = 3.0


@dataclass
class LogFetch:
    """A client's ``logs`` request waiting for the nodes' answers."""

    client: bytes
    req_id: int
    deadline: float  # monotonic
    waiting: set[str] = field(default_factory=set)
    files: dict[str, Any] = field(default_factory=dict)


class LogFetches:
    """``logs`` requests in flight; ``reply(route, frame)`` answers a client."""

    def __init__(self, reply: Callable[[bytes, bytes], None]) -> None:
        self.reply = reply
        self.pending: dict[int, LogFetch] = {}
        self._ids = itertools.count(1)

    def open(self, client: bytes, req_id: int) -> tuple[int, LogFetch]:
        req = next(self._ids)
        fetch = self.pending[req] = LogFetch(client, req_id, time.monotonic() + LOG_FETCH_TIMEOUT)
        return req, fetch

    def data(self, req: int, node: str, files: dict[str, Any]) -> None:
        fetch = self.pending.get(req)
        if fetch is None or node not in fetch.waiting:
            return  # late, or not asked: never a part of another node's answer
        for name, data in files.items():
            fetch.files[f"{node}/{name}"] = data
        fetch.waiting.discard(node)
        if not fetch.waiting:
            self.finish(req)

    def expire(self, mono: float) -> None:
        for req, fetch in list(self.pending.items()):
            if mono >= fetch.deadline:
                self.finish(req)

    def finish(self, req: int) -> None:
        fetch = self.pending.pop(req)
        missing = sorted(fetch.waiting)
        self.reply(fetch.client, protocol.ok(fetch.req_id, files=fetch.files, missing=missing))
