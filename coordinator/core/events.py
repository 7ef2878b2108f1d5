"""Typed events: everything that changes the scheduler core, as values.

``Scheduler.apply(event)`` takes one and returns the decisions it made (most events make
none). The service journals each event it applies under its wire name with its wire
arguments (``to_wire``) and replays a journal with ``from_wire``, so live handling and crash
replay apply the very same values. The wire names and arguments are those the journal has
always held ("schedule", "submit", …), so state directories written before the events were
typed replay unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from coordinator.core.model import CoreError, ExitOutcome, JobSpec, Node, Stop, StopReason


@dataclass(frozen=True)
class Schedule:
    """One scheduling pass at ``now``."""

    now: float
    kind: ClassVar[str] = "schedule"


@dataclass(frozen=True)
class Submit:
    """A new job; CoreError if the core refuses it (duplicate id, larger than the cluster…)."""

    spec: JobSpec
    now: float
    kind: ClassVar[str] = "submit"


@dataclass(frozen=True)
class Exited:
    """All processes of a running or preempting job have exited; a running one ``ended``
    then (e.g. Slurm's end time, before the shell saw it; None: ``now``). ``stop``: why the
    run ended, when it did not complete (its history's words; None: not known)."""

    job_id: str
    now: float
    outcome: ExitOutcome
    ended: float | None = None
    stop: Stop | None = None
    kind: ClassVar[str] = "exited"


@dataclass(frozen=True)
class Began:
    """The job's current run really started at ``at``, after its Start decision (e.g. Slurm
    started the released job on its next pass): its service counts from then."""

    job_id: str
    at: float
    now: float
    kind: ClassVar[str] = "began"


@dataclass(frozen=True)
class Cancel:
    """The user cancels a job: [Kill] while it has processes, else nothing."""

    job_id: str
    now: float
    kind: ClassVar[str] = "cancel"


@dataclass(frozen=True)
class NodeUp:
    """A node joins with its GPUs."""

    node: Node
    now: float
    kind: ClassVar[str] = "node_up"


@dataclass(frozen=True)
class NodeDown:
    """A node is gone: its jobs stop accruing service (see ``Scheduler.node_down``)."""

    name: str
    now: float
    kind: ClassVar[str] = "node_down"


@dataclass(frozen=True)
class NodeDrain:
    """A node keeps its running jobs but takes no new ones (``drained``: e.g. Slurm drains
    it, or still ends a job there), or takes them again."""

    name: str
    drained: bool
    now: float
    kind: ClassVar[str] = "node_drain"


@dataclass(frozen=True)
class UpdateSkew:
    """The job's measured or estimated skew S_J (None: unknown)."""

    job_id: str
    skew: float | None
    kind: ClassVar[str] = "update_skew"


@dataclass(frozen=True)
class UpdateCheckpointable:
    """Whether the job can be checkpointed, as its runtime says at start."""

    job_id: str
    checkpointable: bool
    now: float
    kind: ClassVar[str] = "checkpointable"


@dataclass(frozen=True)
class Pin:
    """The elastic job's runtime cannot keep its global batch at another size: it runs rigid
    on the GPUs of its current run from now on (``Job.pin``)."""

    job_id: str
    now: float
    kind: ClassVar[str] = "pin"


@dataclass(frozen=True)
class Release:
    """The elastic job's runtime keeps its global batch at another size (``resizable: true``):
    the core may resize it within its range from now on (``Job.release``); until then it
    runs at the size of its first run (``Job.hold``)."""

    job_id: str
    now: float
    kind: ClassVar[str] = "release"


@dataclass(frozen=True)
class UpdateCosts:
    """The job's checkpoint and restore times in seconds, as its runtime measured them."""

    job_id: str
    checkpoint_s: float
    restore_s: float
    kind: ClassVar[str] = "update_costs"


@dataclass(frozen=True)
class SetPackLimit:
    """A newly learned PACKLIMIT for the skew placement (``coordinator.core.packlimit``)."""

    value: float
    kind: ClassVar[str] = "packlimit"


@dataclass(frozen=True)
class Retire:
    """The shell has stored the finished job ``job_id``: the core forgets it (its id, state
    and times are the shell's from now on; what the policy learned from it stays)."""

    job_id: str
    kind: ClassVar[str] = "retire"


Event = (
    Schedule
    | Submit
    | Exited
    | Began
    | Cancel
    | NodeUp
    | NodeDown
    | NodeDrain
    | UpdateSkew
    | UpdateCheckpointable
    | Pin
    | Release
    | UpdateCosts
    | SetPackLimit
    | Retire
)

EVENT_TYPES: tuple[type[Event], ...] = (
    Schedule,
    Submit,
    Exited,
    Began,
    Cancel,
    NodeUp,
    NodeDown,
    NodeDrain,
    UpdateSkew,
    UpdateCheckpointable,
    Pin,
    Release,
    UpdateCosts,
    SetPackLimit,
    Retire,
)
_BY_KIND: dict[str, type[Event]] = {t.kind: t for t in EVENT_TYPES}
#: Wire argument names that differ from the field names (the journal's older spelling).
_RENAMED: dict[type[Event], dict[str, str]] = {
    UpdateCheckpointable: {"checkpointable": "value"},
}


def to_wire(event: Event) -> tuple[str, dict[str, Any]]:
    """(wire name, msgpack-able arguments) as the journal stores them."""
    args: dict[str, Any] = {}
    renamed = _RENAMED.get(type(event), {})
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, JobSpec):
            value = dataclasses.asdict(value)
        elif isinstance(value, ExitOutcome):
            value = value.value
        if isinstance(value, Stop):  # its reason and exit status sit beside the others
            args["reason"] = value.reason.value
            told = (("code", value.code), ("node", value.node))
            args.update((k, v) for k, v in told if v is not None)
            continue
        if value is None and f.name == "stop":
            continue  # journals written before stops were told carry none
        if isinstance(value, Node):  # its fields sit beside the others
            args["name"], args["gpus"] = value.name, list(value.gpus)
            if value.switch is not None:
                args["switch"] = value.switch
            continue
        args[renamed.get(f.name, f.name)] = value
    return event.kind, args


def from_wire(kind: str, args: dict[str, Any]) -> Event:
    """The event a journal entry names; CoreError for an entry this version cannot read."""
    cls = _BY_KIND.get(kind)
    if cls is None:
        raise CoreError(
            f"unknown journal event {kind!r} (known: {', '.join(sorted(_BY_KIND))}); the "
            f"journal was written by a newer coordinator"
        )
    try:
        if cls is Submit:
            return Submit(JobSpec(**args["spec"]), args["now"])
        if cls is Exited:
            outcome = ExitOutcome(args["outcome"])
            reason = args.get("reason")
            told = (args.get("code"), args.get("node"))
            stop = None if reason is None else Stop(StopReason(reason), *told)
            return Exited(args["job_id"], args["now"], outcome, args.get("ended"), stop)
        if cls is NodeUp:
            node = Node(args["name"], tuple(args["gpus"]), args.get("switch"))
            return NodeUp(node, args["now"])
        renamed = _RENAMED.get(cls, {})
        return cls(**{f.name: args[renamed.get(f.name, f.name)] for f in dataclasses.fields(cls)})
    except (KeyError, TypeError, ValueError) as e:
        raise CoreError(f"journal event {kind!r} has bad arguments {args!r}: {e}") from None
