"""What the service keeps about each job beside the core's ``Job``: the submitted request,
the current run and its parts, reported progress, how runs ended.

Each record is stored as one msgpack map per job (``Store.put_job``); ``to_wire`` and
``from_wire`` keep the field names the journal has always used, so state directories written
before these types existed load unchanged (``store.SCHEMA_VERSION``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: Request fields a submit may carry (besides the owner and token the coordinator adds).
REQUEST_FIELDS = ("argv", "workers", "ps", "horovod", "cwd", "env", "name", "key")


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
    token: str = ""  # the job's report token (JOB_TOKEN)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Request:
        return cls(**{f.name: d[f.name] for f in fields(cls) if d.get(f.name) is not None})

    def to_wire(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Run:
    """One start of a job (``restart``) on ``allocation``: its parts, one per node, each
    None while running, else how it ended; ``decided`` is the run's outcome as soon as one
    part settles it, ``stopping`` why the coordinator is stopping it (preempt, kill, stop)."""

    restart: int
    parts: dict[str, str | None]
    allocation: dict[str, list[int]]
    started: float  # core time
    decided: str | None = None
    stopping: str | None = None
    ended: float | None = None  # wall time its parts really ended, as the executor knows it

    def pending(self, node: str) -> bool:
        """Whether ``node``'s part has not ended yet."""
        return node in self.parts and self.parts[node] is None

    def running_nodes(self) -> list[str]:
        return [n for n, outcome in self.parts.items() if outcome is None]

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Run:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

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
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class LastExit:
    """How the last part with process exits ended: on which node, at which step (of run
    ``restart``, when it reported one), and each process's exit code."""

    node: str
    outcome: str
    restart: int
    step: int | None
    processes: list[dict[str, Any]]  # role, task_index, code (negative: killed by a signal)


@dataclass
class Lost:
    """Work preempted without a checkpoint, to be run again."""

    preemptions: int = 0
    steps: int = 0
    gpu_seconds: float = 0.0


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

    def to_wire(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["request"] = self.request.to_wire()
        d["run"] = self.run.to_wire() if self.run else None
        d["progress"] = self.progress.to_wire()
        d["lost"] = asdict(self.lost) if self.lost else None
        d["last_exit"] = asdict(self.last_exit) if self.last_exit else None
        return d
