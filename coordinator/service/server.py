"""What message handlers (``requests``, ``access``, an executor's ``handlers``) may use of the
coordinator: its state and its journal transaction. A Protocol, so that handlers depend on
this and not on the server loop's module."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from coordinator.core import events
from coordinator.core.model import Decision
from coordinator.core.scheduler import Scheduler
from coordinator.service.archive import Archive
from coordinator.service.executor import Executor, ExecutorEvent
from coordinator.service.identity import Peer
from coordinator.service.job_events import History
from coordinator.service.logfetch import LogFetches
from coordinator.service.options import Options
from coordinator.service.profiler import SkewStage
from coordinator.service.records import ActiveIndex
from coordinator.service.recovery import Clock
from coordinator.service.runs import RunBook, When
from coordinator.service.store import Store


class Server(Protocol):
    opts: Options
    peer: Peer  # who sent the message being handled
    sched: Scheduler
    book: RunBook
    clock: Clock
    store: Store
    executor: Executor
    logs: LogFetches
    #: Each job's story in words (``status JOB``).
    history: History
    #: Finished jobs, read from the state database; the active ones' numbers.
    archive: Archive
    active: ActiveIndex
    #: Core time of the last scheduling pass (jobs are ranked as it left them).
    passed_at: float
    #: Nodes the core knows that have not registered again since a restart: no pass until
    #: they have, or their heartbeat timeout has passed.
    unconfirmed: set[str]
    #: Whether the loop should schedule before it sleeps again.
    dirty: bool
    #: Jobs whose reported progress is written at the next flush.
    progress_dirty: set[str]
    next_job: int
    #: (owner, client key) → job id of submits with a key.
    submit_keys: dict[tuple[str | None, str | None], str]
    instance: str
    skew_estimator: SkewStage

    def atomic(self) -> AbstractContextManager[None]:
        """One journal transaction; commands leave after it commits."""

    def core(self, event: events.Event) -> list[Decision]:
        """Apply one core event and journal it (inside ``atomic``)."""

    def act(self, decisions: list[Decision]) -> None:
        """Turn core decisions into executor commands (inside ``atomic``)."""

    def when(self) -> When:
        """This moment on each clock (core, monotonic, wall)."""

    def apply(self, event: ExecutorEvent) -> bool:
        """Act on an executor event; False when it is stale news."""
