"""A run book over a real scheduler core, with the journal kept in memory: for tests that
drive the run lifecycle directly, the machines played by the test."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.core import events
from coordinator.core.model import Decision, JobSpec
from coordinator.core.packlimit import PackLimit
from coordinator.core.settings import Settings, build_scheduler
from coordinator.protocol import PartOutcome
from coordinator.service.commands import Command
from coordinator.service.metrics import Metrics
from coordinator.service.records import JobRecord, Request
from coordinator.service.runs import RunBook, RunSettings, When

GRACE = 30.0
HEARTBEAT = 10.0


class MemoryLedger:
    """The coordinator's journal, in lists."""

    def __init__(self, settings: Settings) -> None:
        self.sched = build_scheduler(settings)
        self.events: list[events.Event] = []
        self.decisions: list[tuple[str, str]] = []
        self.observed: list[tuple[str, float, str, float]] = []

    def core(self, event: events.Event) -> list[Decision]:
        self.events.append(event)
        return self.sched.apply(event)

    def save(self, job_id: str) -> None:
        pass

    def observe(self, key: str, skew: float, placement: str, iter_time: float) -> None:
        self.observed.append((key, skew, placement, iter_time))

    def decided(self, now: float, kind: str, job_id: str, allocation: str | None) -> None:
        self.decisions.append((kind, job_id))


class Bench:
    """A run book, its ledger, and the test's clock (``when``)."""

    def __init__(self, **settings: Any) -> None:
        self.ledger = MemoryLedger(Settings(**settings))
        self.sched = self.ledger.sched
        settings = RunSettings(GRACE, "SIGTERM", HEARTBEAT, Path("/checkpoints"))
        self.book = RunBook(self.sched, self.ledger, settings, PackLimit(0.5), Metrics())
        self.hosts: dict[str, str] = {}

    def when(self, t: float) -> When:
        return When(now=t, mono=1000.0 + t, wall=2000.0 + t)

    def node(
        self, name: str, gpus: int, t: float = 0.0, running: dict[str, int] | None = None
    ) -> None:
        self.hosts[name] = name
        self.book.node_up(name, list(range(gpus)), running or {}, self.when(t))

    def submit(
        self, job_id: str, workers: int, t: float = 0.0, ps: int = 0, least: int | None = None
    ) -> None:
        """Queue ``job_id`` with ``workers`` (``least``: an elastic gang's fewest)."""
        self.ledger.core(events.Submit(JobSpec(job_id, workers, arrival=t, min_gpus=least), t))
        request = Request(["train.py"], workers, owner="alice", ps=ps, token="tok",
                          min_workers=least)  # fmt: skip
        self.book.add(job_id, JobRecord(f"{job_id}-x", request, 2000.0 + t))

    def schedule(self, t: float) -> list[Command]:
        self.book.act(
            self.ledger.core(events.Schedule(t)), self.when(t), self.hosts, lambda _: 4242
        )
        return self.take()

    def take(self) -> list[Command]:
        commands, self.book.commands = self.book.commands, []
        return commands

    def exit(
        self, job_id: str, node: str, outcome: str, t: float, codes: Sequence[int] = (0,)
    ) -> None:
        processes = [{"role": "chief", "task_index": i, "code": c} for i, c in enumerate(codes)]
        self.book.part_ended(job_id, node, PartOutcome(outcome), processes, self.when(t))

    def state(self, job_id: str) -> str:
        return self.sched.job(job_id).state.value
