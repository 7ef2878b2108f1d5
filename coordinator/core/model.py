"""Jobs, GPUs, allocations and decisions: the vocabulary shared by the core, the service and
the simulator. Pure data; no I/O, no clock (every time is a ``now`` passed in by the caller)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    """Lifecycle: WAITING → RUNNING → (PREEMPTING → WAITING)* → COMPLETED | FAILED | CANCELLED."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTING = "preempting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class ExitOutcome(StrEnum):
    """How all processes of a job ended, as reported by agents (or the simulator)."""

    COMPLETED = "completed"  # exit code 0 everywhere
    CHECKPOINTED = "checkpointed"  # reserved exit code, or killed at the preemption deadline
    FAILED = "failed"  # any other exit code
    LOST = "lost"  # its node disappeared; resume from the last checkpoint


@dataclass(frozen=True, order=True)
class Allocation:
    """Concrete GPUs of one job: ((node, (gpu index, …)), …), sorted by node name."""

    gpus: tuple[tuple[str, tuple[int, ...]], ...]

    @classmethod
    def of(cls, by_node: Mapping[str, Iterable[int]]) -> Allocation:
        return cls(tuple(sorted((n, tuple(sorted(g))) for n, g in by_node.items() if tuple(g))))

    @property
    def count(self) -> int:
        return sum(len(g) for _, g in self.gpus)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.gpus)

    def to_wire(self) -> dict[str, list[int]]:
        return {n: list(g) for n, g in self.gpus}


@dataclass(frozen=True)
class JobSpec:
    """What a user (or a trace row) submits. ``duration`` is the true run time on ``gpus``
    GPUs: known to the simulator and to the oracle baselines (srtf, srsf) only."""

    job_id: str
    gpus: int
    arrival: float
    duration: float | None = None
    skew: float | None = None  # S_J in [0, 1]; None until profiled
    model: str | None = None
    user: str | None = None
    vc: str | None = None  # virtual cluster (Philly)


@dataclass
class Job:
    """A job as the core tracks it. Attained service is accounted by the core only."""

    spec: JobSpec
    state: JobState = JobState.WAITING
    executed: float = 0.0  # t_J: seconds run with all W_J GPUs (since last promotion reset)
    total_executed: float = 0.0  # seconds run in all, never reset (for JCT/oracles)
    first_start: float | None = None
    last_start: float | None = None  # start of the current run, when RUNNING
    wait_since: float | None = None  # start of the current wait, when WAITING (δ_J)
    queue: int = 0  # 0-based priority queue index (0 = highest)
    allocation: Allocation | None = None
    preemptions: int = 0
    promotions: int = 0
    restarts: int = 0
    finish: float | None = None
    cancel_requested: bool = False
    # Seconds to checkpoint and to restore, as the shell last measured or modelled them (0:
    # unknown); they weigh victim choice and the minimum run time (SchedulerConfig).
    checkpoint_cost: float = 0.0
    restore_cost: float = 0.0
    #: False once the job said it has nothing a preemption could checkpoint: preempting it
    #: loses all its progress, so queue policies take other jobs' GPUs first.
    checkpointable: bool = True

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    def attained(self, now: float) -> float:
        """Attained GPU service W_J × t_J at ``now`` (counting the current run)."""
        return self.gpus * self.executed_at(now)

    def executed_at(self, now: float) -> float:
        if self.state is JobState.RUNNING and self.last_start is not None:
            return self.executed + (now - self.last_start)
        return self.executed

    def began(self, at: float, now: float) -> bool:
        """The current run really started at ``at``, later than decided: its service counts
        from then (never past ``now``). Whether that changed anything."""
        if self.state is not JobState.RUNNING or self.last_start is None or at <= self.last_start:
            return False
        self.last_start = min(at, now)
        return True

    def total_executed_at(self, now: float) -> float:
        if self.state is JobState.RUNNING and self.last_start is not None:
            return self.total_executed + (now - self.last_start)
        return self.total_executed

    def to_dict(self) -> dict[str, Any]:
        """JSON/msgpack-able, for scheduler snapshots; ``from_dict`` reads it back."""
        d: dict[str, Any] = {f: getattr(self.spec, f) for f in _SPEC_FIELDS}
        d.update({f: getattr(self, f) for f in _JOB_SCALARS})
        d["state"] = self.state.value
        d["allocation"] = (
            None if self.allocation is None else [[n, list(g)] for n, g in self.allocation.gpus]
        )
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Job:
        job = cls(spec=JobSpec(**{f: d[f] for f in _SPEC_FIELDS}), state=JobState(d["state"]))
        for f in _JOB_SCALARS:
            setattr(job, f, d[f] if f in d else _JOB_SCALARS_SINCE[f])
        if d["allocation"] is not None:
            job.allocation = Allocation(tuple((n, tuple(g)) for n, g in d["allocation"]))
        return job


_SPEC_FIELDS = [f.name for f in fields(JobSpec)]
_JOB_SCALARS = [
    "executed",
    "total_executed",
    "first_start",
    "last_start",
    "wait_since",
    "queue",
    "preemptions",
    "promotions",
    "restarts",
    "finish",
    "cancel_requested",
    "checkpoint_cost",
    "restore_cost",
    "checkpointable",
]
#: Absent from older snapshots: their defaults.
_JOB_SCALARS_SINCE = {"checkpoint_cost": 0.0, "restore_cost": 0.0, "checkpointable": True}


@dataclass(frozen=True)
class Node:
    name: str
    gpus: tuple[int, ...]
    switch: str | None = None


@dataclass(frozen=True)
class Start:
    """Decision: start (or resume) ``job_id`` on exactly ``allocation``."""

    job_id: str
    allocation: Allocation


@dataclass(frozen=True)
class Preempt:
    """Decision: checkpoint and stop ``job_id``; its GPUs stay busy until it has exited."""

    job_id: str


@dataclass(frozen=True)
class Kill:
    """Decision: stop ``job_id`` for good (cancelled by its user)."""

    job_id: str


Decision = Start | Preempt | Kill


class CoreError(Exception):
    """A request the core refuses (unknown job, duplicate id, job larger than the cluster…).
    The message names the problem; shells turn it into an error reply or a skipped row."""
