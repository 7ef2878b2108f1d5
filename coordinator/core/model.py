"""Jobs, GPUs, allocations and decisions: the vocabulary shared by the core, the service and
the simulator. Pure data; no I/O, no clock (every time is a ``now`` passed in by the caller)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
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


class StopReason(StrEnum):
    """Why a run ended before its job completed: what its history says it was."""

    PREEMPTED = "preempted"  # the policy gave its GPUs to jobs ahead of it
    CANCELLED = "cancelled"  # its user cancelled it
    NODE_LOST = "node-lost"  # a node of its allocation went down or lost its processes
    SIGNALLED = "signalled"  # a signal from outside Tiresias (an operator's SIGTERM)
    KILLED = "killed"  # a process was killed from outside (a SIGKILL Tiresias never sent)
    NOT_STARTED = "not-started"  # its processes could not be started
    FAILED = "failed"  # a process exited with an error


@dataclass(frozen=True)
class Stop:
    """A run's end, as the core was told or decided it: the reason; ``code``, the exit
    status that tells it when one does (negative: the signal, as ``subprocess`` reports);
    ``node``, the node it happened on, when one; ``for_jobs``, for a preemption, the
    waiting jobs selected ahead of it; ``size``, for an elastic job's resize (a preemption
    that restarts it at once), the GPUs it restarts on."""

    reason: StopReason
    code: int | None = None
    node: str | None = None
    for_jobs: tuple[str, ...] = ()
    size: int | None = None


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
    GPUs: known to the simulator and to the oracle baselines (srtf, srsf) only.
    ``min_gpus``: an elastic job runs on any count in [min_gpus, gpus] (None: rigid)."""

    job_id: str
    gpus: int
    arrival: float
    duration: float | None = None
    skew: float | None = None  # S_J in [0, 1]; None until profiled
    model: str | None = None
    user: str | None = None
    vc: str | None = None  # virtual cluster (Philly)
    min_gpus: int | None = None

    def problem(self) -> str | None:
        """Why the core refuses this GPU count or range, if it does."""
        if self.gpus < 1:
            return f"job {self.job_id} asks for {self.gpus} GPUs; needs at least 1"
        if self.min_gpus is not None and not 1 <= self.min_gpus <= self.gpus:
            return (
                f"job {self.job_id} asks for {self.min_gpus} to {self.gpus} GPUs; "
                "needs 1 <= minimum <= maximum"
            )
        return None

    @property
    def smallest(self) -> int:
        """The fewest GPUs it can start on (``fitting``)."""
        if self.min_gpus is None:
            return self.gpus
        return next(w for w in range(self.min_gpus, self.gpus + 1) if self.gpus % w == 0)

    def fitting(self, gpus: int) -> int:
        """The most GPUs it runs on within ``gpus`` (0: none): an elastic job's largest size in
        its range that divides its maximum, the only worlds at which its runtime keeps the
        global batch of its largest (a 2:4 job runs on 2 or 4, never 3)."""
        if self.min_gpus is None:
            return self.gpus if gpus >= self.gpus else 0
        top = min(gpus, self.gpus)
        return next((w for w in range(top, self.min_gpus - 1, -1) if self.gpus % w == 0), 0)


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
    #: How its last run ended or is ending, for its history (not in snapshots: a timeline
    #: restarted with the core words only what happens afterwards).
    stop: Stop | None = None
    #: GPUs of its current run when an elastic job runs on fewer than it asked (0: as asked).
    #: While it is set, ``executed`` counts seconds at this size, so W_J × t_J stays the
    #: attained GPU service (``resize`` rescales it).
    size: int = 0
    #: From a Start until its run really begins (``Began``) where the shell's executor reports
    #: begins (``SchedulerConfig.await_begin``): it holds its GPUs, but no service accrues
    #: and no timer of the policy runs for it.
    awaiting: bool = False
    #: Its runtime confirmed it keeps its global batch at another size (``resizable: true``
    #: in a report): only then does the core resize it.
    resizable: bool = False
    #: While an elastic job waits for that confirmation: its range (fewest, most GPUs), and
    #: its spec is rigid at the size of its first run (``hold``; ``release`` restores it).
    held: tuple[int, int] | None = None

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def gpus(self) -> int:
        """GPUs it holds while it runs, else the GPUs it asks for."""
        return self.size or self.spec.gpus

    def resize(self, gpus: int) -> None:
        """Run on ``gpus`` from now on (``spec.gpus``: as asked), keeping attained service."""
        size = 0 if gpus == self.spec.gpus else gpus
        if size != self.size:
            self.executed = self.executed * self.gpus / gpus
            self.size = size

    def pin(self) -> bool:
        """Run rigid from now on, on the GPUs of its current run (its script cannot keep its
        global batch at another size); whether that changed it. Only while it runs: a waiting
        job is filed by the fewest GPUs it can start on, and a stopped one has left its size."""
        if self.state is not JobState.RUNNING:
            return False
        self.held = None  # held at its size already: for good now
        if self.spec.min_gpus is None:
            return False
        self._rigid_at_its_size()
        return True

    def hold(self) -> None:
        """At a start of an elastic job its runtime has not confirmed (``resizable``): run
        rigid at this size until it does. A script that never reports (no ``tiresias.State``,
        not Python) or a run stopped before its first report would otherwise train at
        another global batch when resized. Call it with the job filed nowhere."""
        if self.spec.min_gpus is None or self.resizable:
            return
        self.held = (self.spec.min_gpus, self.spec.gpus)
        self._rigid_at_its_size()

    def _rigid_at_its_size(self) -> None:
        """Its spec becomes a rigid ask of the GPUs it runs on (``pin``, ``hold``)."""
        self.spec = replace(self.spec, gpus=self.gpus, min_gpus=None)
        self.size = 0  # executed already counts seconds at this size

    def release(self) -> bool:
        """Its runtime confirmed it keeps its global batch at another size: resize it within
        its range from now on; whether that changed it. Only while it runs (a waiting job is
        filed by its size); a held job that stopped first is released by its next run."""
        if self.resizable or self.state is not JobState.RUNNING:
            return False
        self.resizable = True
        if self.held is not None:
            (least, most), gpus = self.held, self.gpus
            self.spec = replace(self.spec, gpus=most, min_gpus=least)
            self.size, self.held = (0 if gpus == most else gpus), None
        return True

    def told(self, resizable: bool) -> bool:
        """Its runtime said whether it keeps its global batch at another size (``release``
        or ``pin``); whether that changed it."""
        return self.release() if resizable else self.pin()

    def attained(self, now: float) -> float:
        """Attained GPU service W_J × t_J at ``now`` (counting the current run)."""
        return self.gpus * self.executed_at(now)

    def executed_at(self, now: float) -> float:
        if self.state is JobState.RUNNING and self.last_start is not None and not self.awaiting:
            return self.executed + (now - self.last_start)
        return self.executed

    def began(self, at: float, now: float) -> bool:
        """The current run really started at ``at``, not before it was decided: its service
        counts from then (never past ``now``), and an awaited run's timers start. Whether that
        changed anything."""
        if self.state is not JobState.RUNNING or self.last_start is None:
            return False
        if at <= self.last_start and not self.awaiting:
            return False
        self.last_start, self.awaiting = max(self.last_start, min(at, now)), False
        return True

    def total_executed_at(self, now: float) -> float:
        if self.state is JobState.RUNNING and self.last_start is not None and not self.awaiting:
            return self.total_executed + (now - self.last_start)
        return self.total_executed

    def to_dict(self) -> dict[str, Any]:
        """JSON/msgpack-able, for scheduler snapshots; ``from_dict`` reads it back."""
        d: dict[str, Any] = {f: getattr(self.spec, f) for f in _SPEC_FIELDS}
        d.update({f: getattr(self, f) for f in _JOB_SCALARS})
        d["state"] = self.state.value
        d["held"] = None if self.held is None else list(self.held)
        d["allocation"] = (
            None if self.allocation is None else [[n, list(g)] for n, g in self.allocation.gpus]
        )
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Job:
        spec = JobSpec(**{f: d[f] for f in _SPEC_FIELDS if f in d})  # min_gpus: newer
        job = cls(spec=spec, state=JobState(d["state"]))
        for f in _JOB_SCALARS:
            setattr(job, f, d[f] if f in d else _JOB_SCALARS_SINCE[f])
        if d["allocation"] is not None:
            job.allocation = Allocation(tuple((n, tuple(g)) for n, g in d["allocation"]))
        if d.get("held") is not None:  # older snapshots: none held
            least, most = d["held"]
            job.held = (int(least), int(most))
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
    "size",
    "awaiting",
    "resizable",
]
#: Absent from older snapshots: their defaults.
_JOB_SCALARS_SINCE = {
    "checkpoint_cost": 0.0,
    "restore_cost": 0.0,
    "checkpointable": True,
    "size": 0,
    "awaiting": False,
    "resizable": False,
}


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
    """Decision: checkpoint and stop ``job_id``; its GPUs stay busy until it has exited.
    ``stop`` says why (the reason and the jobs it is for); decisions compare by job only."""

    job_id: str
    stop: Stop = field(default=Stop(StopReason.PREEMPTED), compare=False)


@dataclass(frozen=True)
class Kill:
    """Decision: stop ``job_id`` for good (cancelled by its user)."""

    job_id: str


Decision = Start | Preempt | Kill


class CoreError(Exception):
    """A request the core refuses (unknown job, duplicate id, job larger than the cluster…).
    The message names the problem; shells turn it into an error reply or a skipped row."""
