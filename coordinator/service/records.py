"""What the service keeps about each job beside the core's ``Job``: the submitted request,
the current run and its parts, reported progress, how runs ended.

Each record is stored as one msgpack map per job (``Store.put_job``); ``to_wire`` and
``from_wire`` keep the field names the journal has always used, so state directories written
before these types existed load unchanged (``store.SCHEMA_VERSION``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from itertools import islice
from typing import Any

from coordinator.core.model import Stop, StopReason
from coordinator.protocol import PartOutcome, Stopping
from tiresias_launch.contract import OWN_CHECKPOINTS

#: Request fields a submit may carry (besides the owner and token the coordinator adds).
REQUEST_FIELDS = ("argv", "workers", "min_workers", "ps", "horovod", "cwd", "env", "name", "key")


@dataclass
class Request:
    """A job as submitted: what to run and as whom."""

    argv: list[str]
    workers: int
    owner: str | None = None
    ps: int = 0
    horovod: bool = False
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    key: str | None = None  # the client's idempotency key: a resent submit is the same job
    min_workers: int | None = None  # an elastic gang runs on min_workers to workers
    token: str = ""  # the job's report token (JOB_TOKEN)
    found: str | None = None  # a job the executor found (``JobFound.ref``), not submitted

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Request:
        return cls(**{f.name: d[f.name] for f in fields(cls) if d.get(f.name) is not None})

    def to_wire(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}  # encoded at once


@dataclass
class Run:
    """One start of a job (``restart``) on ``allocation``: its parts, one per node, each
    None while running, else how it ended; ``decided`` is the run's outcome as soon as one
    part settles it, ``stopping`` why the coordinator is stopping it (preempt, kill, stop),
    ``stop`` why it stopped when that is news to the core (a failure, a node lost, a signal
    from outside)."""

    restart: int
    parts: dict[str, PartOutcome | None]
    allocation: dict[str, list[int]]
    started: float  # core time
    decided: PartOutcome | None = None
    stopping: Stopping | None = None
    ended: float | None = None  # wall time its parts really ended, as the executor knows it
    stop: Stop | None = None

    def pending(self, node: str) -> bool:
        """Whether ``node``'s part has not ended yet."""
        return node in self.parts and self.parts[node] is None

    def running_nodes(self) -> list[str]:
        return [n for n, outcome in self.parts.items() if outcome is None]

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Run:
        run = cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})
        run.parts = {n: None if o is None else PartOutcome(o) for n, o in run.parts.items()}
        run.decided = None if run.decided is None else PartOutcome(run.decided)
        run.stopping = None if run.stopping is None else Stopping(run.stopping)
        if isinstance(run.stop, dict):
            s = run.stop
            run.stop = Stop(StopReason(s["reason"]), s.get("code"), s.get("node"))
        return run

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Progress:
    """The newest runtime report of the job's current (or last) run. ``checkpoint`` and
    ``warmup`` are the runtime's own maps (tiresias_launch.report)."""

    restart: int | None = None
    step: int | None = None
    iterations: int | None = None
    iter_time: float | None = None
    gpu_time: float | None = None
    checkpoint: dict[str, Any] | None = None
    warmup: dict[str, Any] | None = None

    def of(self, restart: int) -> bool:
        """Whether these facts are about run ``restart``."""
        return self.restart == restart

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Progress:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def to_wire(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}  # encoded at once


@dataclass
class LastExit:
    """How the last part with process exits ended: on which node, at which step (of run
    ``restart``, when it reported one), and each process's exit code."""

    node: str
    outcome: PartOutcome
    restart: int
    step: int | None
    processes: list[dict[str, Any]]  # role, task_index, code (negative: killed by a signal)


@dataclass
class Lost:
    """Work preempted without a checkpoint, to be run again. For a job the runtime cannot
    checkpoint, the latest preemption's count is ``unconfirmed`` until the next run's first
    report says where it resumed (its own checkpoints may have kept part of the run)."""

    preemptions: int = 0
    steps: int = 0
    gpu_seconds: float = 0.0
    #: {"after": restart, "step": reached, "steps": counted, "gpu_seconds": counted,
    #: "run_gpu_seconds": the whole run's}, or None.
    unconfirmed: dict[str, float] | None = None

    def resumed_at(self, restart: int, step: int) -> None:
        """Run ``restart`` resumed at ``step``: when the run before it was the latest
        preemption, count the steps past ``step`` and that share of the stopped run's GPU
        time, instead of what was counted."""
        u, self.unconfirmed = self.unconfirmed, None
        if u is None or u["after"] != restart - 1:
            return
        steps = max(0, int(u["step"]) - step)
        share = steps / u["step"] if u["step"] else 0.0
        self.steps += steps - int(u["steps"])
        self.gpu_seconds += u["run_gpu_seconds"] * share - u["gpu_seconds"]


@dataclass
class JobRecord:
    key: str  # storage key ``<job id>-<instance>``: checkpoint and log directories
    request: Request
    submitted: float  # wall clock
    skew: float | None = None
    skew_source: str | None = None  # profiler.SOURCES or "submitted"
    run: Run | None = None
    progress: Progress = field(default_factory=Progress)
    checkpointable: bool | None = None
    checkpointable_why: str | None = None
    nodes_ever: list[str] = field(default_factory=list)
    last_exit: LastExit | None = None
    exit_code: int | None = None
    log_tail: str | None = None
    lost: Lost | None = None
    ended: float | None = None  # wall clock, once finished

    @classmethod
    def from_wire(cls, job_id: str, d: dict[str, Any]) -> JobRecord:
        return cls(
            key=d.get("key") or job_id,
            request=Request.from_wire(d["request"]),
            submitted=d["submitted"],
            skew=d.get("skew"),
            skew_source=d.get("skew_source"),
            run=Run.from_wire(d["run"]) if d.get("run") else None,
            progress=Progress.from_wire(d.get("progress") or {}),
            checkpointable=d.get("checkpointable"),
            checkpointable_why=d.get("checkpointable_why"),
            nodes_ever=list(d.get("nodes_ever", [])),
            last_exit=LastExit(**d["last_exit"]) if d.get("last_exit") else None,
            exit_code=d.get("exit_code"),
            log_tail=d.get("log_tail"),
            lost=Lost(**d["lost"]) if d.get("lost") else None,
            ended=d.get("ended"),
        )

    def resumed_itself(self, restart: int, step: int) -> str:
        """Run ``restart``'s first report, after a preemption, is at ``step`` > 0 and the
        runtime restored nothing: the script resumed from its own checkpoints. Say so from
        now on, count the lost work from the steps, and return the line for the history."""
        why = self.checkpointable_why or ""
        if OWN_CHECKPOINTS not in why:
            self.checkpointable_why = (
                f"{why.split('; ')[0]}; its first report after a restart was at step {step}, "
                f"so {OWN_CHECKPOINTS}"
            )
        if self.lost is not None:
            self.lost.resumed_at(restart, step)
        return f"resumed from its own checkpoints at step {step}"

    def to_wire(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["request"] = self.request.to_wire()
        d["run"] = self.run.to_wire() if self.run else None
        d["progress"] = self.progress.to_wire()
        d["lost"] = asdict(self.lost) if self.lost else None
        d["last_exit"] = asdict(self.last_exit) if self.last_exit else None
        return d


def number(job_id: str) -> int:
    """``j42`` → 42: jobs are numbered in submission order."""
    return int(job_id[1:])


@dataclass
class ActiveIndex:
    """The numbers of the active jobs, sorted, in all and per owner: a page starts after
    its cursor by bisection."""

    numbers: list[int] = field(default_factory=list)
    by_owner: dict[str | None, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, records: dict[str, JobRecord]) -> ActiveIndex:
        index = cls()
        for job_id, rec in records.items():
            index.add(job_id, rec)
        return index

    def add(self, job_id: str, rec: JobRecord) -> None:
        n = number(job_id)
        bisect.insort(self.numbers, n)
        bisect.insort(self.by_owner.setdefault(rec.request.owner, []), n)

    def remove(self, job_id: str, rec: JobRecord) -> None:
        n = number(job_id)
        for numbers in (self.numbers, self.by_owner.get(rec.request.owner, [])):
            i = bisect.bisect_left(numbers, n)
            if i < len(numbers) and numbers[i] == n:
                del numbers[i]

    def after(self, after: int, user: str | None) -> Iterator[int]:
        """Active job numbers above ``after``, in order (only ``user``'s if given)."""
        numbers = self.numbers if user is None else self.by_owner.get(user, [])
        return islice(numbers, bisect.bisect_right(numbers, after), None)
