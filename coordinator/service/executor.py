"""The executor interface: the seam between the run lifecycle and the machines.

The run lifecycle (``runs.RunBook``) decides *what* runs where; an executor makes it so on
real machines and tells the coordinator what happened there. Commands flow down as method
calls, always after the journal transaction that decided them has committed (so a crash can
lose a command, reconciled later, but never send one twice). Facts flow up as typed
events (``NodeJoined``, ``NodeLost``, ``NodeDrained``, ``RunBegan``, ``PartExited``,
``LogData``): an executor
that learns them from messages (the agent fleet, ``executors.agents``) hands them to the
coordinator as they arrive; one that must ask (Slurm's ``squeue``/``sacct``) returns them
from ``poll``.

A *gang* is one start (``restart``) of one job on one allocation, planned per node; a *part*
is one node's share of it. Parts are named by ``(job_id, restart, node)`` everywhere, so a
command or event about an older start of the same job is recognisably stale.

Reconcile after a coordinator restart needs no call of its own: the coordinator's journal
says which parts it expects; an executor reports each node it (re)discovers as ``NodeJoined``
with the parts really running there, and the run book kills the unexpected ones and loses
the missing ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from coordinator.protocol import PartOutcome

#: Seconds the rest of a gang gets to end on its own once its chief completed (parameter
#: servers never do) or one process failed (its peers cannot go on): the run book's kill
#: of a completed run's peers and both executors' node-side stops wait this long.
SETTLE = 2.0


@dataclass(frozen=True)
class ProcessLaunch:
    """One process of a gang, fully planned: what to run, with which GPUs of its node."""

    role: str  # chief, worker, ps, or rank for Horovod/torchrun
    task_index: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    gpus: tuple[int, ...]  # the node's GPU indices (CUDA_VISIBLE_DEVICES)
    cwd: str | None = None


@dataclass(frozen=True)
class Gang:
    """One start of a job on an allocation: every node's processes, started together."""

    job_id: str
    job_key: str  # unique across state directories: names checkpoint and log directories
    restart: int
    owner: str  # the user the processes run as
    grace: float  # seconds between the preemption signal and SIGKILL
    parts: Mapping[str, Sequence[ProcessLaunch]]  # node → its processes
    #: A job the executor found (``JobFound.ref``): this start releases it where it waits
    #: instead of launching ``parts``' processes (which say where and on which GPUs).
    found: str | None = None


@dataclass(frozen=True)
class NodeInfo:
    """One machine as the executor knows it (``tiresias nodes``)."""

    name: str
    host: str  # where the job's servers on this node are reached (TF/Horovod addresses)
    gpus: Sequence[Mapping[str, Any]]  # one map per GPU: at least ``index``
    connected: bool  # whether commands reach it now
    silent_for: float | None = None  # seconds since it was last heard of


@dataclass(frozen=True)
class NodeJoined:
    """A node (re)joined with these GPUs, running these parts (job id → restart): the
    inventory change and the reconcile after either side restarted, in one event."""

    node: str
    host: str
    gpus: Sequence[Mapping[str, Any]]
    running: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeLost:
    """A node is gone (silent past its heartbeat timeout, or drained): its parts are lost."""

    node: str
    why: str


@dataclass(frozen=True)
class NodeDrained:
    """A node that is up keeps its running parts but takes no new ones (``drained``: Slurm
    drains it, or still ends a job there), or takes them again; ``why``: what it said."""

    node: str
    drained: bool
    why: str = ""


@dataclass(frozen=True)
class PartExited:
    """Every process of one part has exited (``processes``: role, task_index, code, and
    optionally log_tail, of each)."""

    job_id: str
    restart: int
    node: str
    #: ``lost`` only for a part that never started there (exit ``EXIT_NOT_STARTED``: Slurm
    #: could not launch it); else that is the coordinator's own verdict
    outcome: PartOutcome
    processes: Sequence[Mapping[str, Any]] = ()
    ended: float | None = None  # wall time it really ended, when known (Slurm's end time)


@dataclass(frozen=True)
class RunBegan:
    """The run really started at wall time ``wall``, later than the coordinator launched it
    (Slurm's start time of the released job): its attained service counts from then."""

    job_id: str
    restart: int
    wall: float


@dataclass(frozen=True)
class LogData:
    """One node's answer to ``fetch_logs``: file name → {data, offset, …}."""

    req: int
    node: str
    files: Mapping[str, Any]


@dataclass(frozen=True)
class JobFound:
    """A job submitted to the machines' own scheduler (a plain ``sbatch``), held there for
    the coordinator to schedule as a submitted job; ``ref`` is the executor's id of it,
    carried back in each start (``Gang.found``)."""

    ref: str
    user: str
    gpus: int
    name: str
    command: str


ExecutorEvent = NodeJoined | NodeLost | NodeDrained | RunBegan | PartExited | LogData | JobFound

#: How the coordinator hands an executor a message its nodes sent to the coordinator's own
#: socket: (the coordinator, a ``service.server.Server``; the sender's route; the checked
#: message) → the reply's fields, or None for no reply. Errors are ``ProtocolError``.
MessageHandler = Callable[[Any, bytes, dict[str, Any]], dict[str, Any] | None]


class Executor(Protocol):
    """What the coordinator needs from the machines. Commands are fire-and-forget: their
    effects come back as events, and a command for a node that cannot be reached is dropped
    (the node's next ``NodeJoined`` reconciles it)."""

    def check_launch(self, gang: Gang) -> str | None:
        """Why ``gang`` could never be launched here (e.g. a message limit), or None. Asked
        at submit of a gang planned as large as the job's could ever be, so that a job this
        executor cannot start is refused then, not failed at each start."""

    def launch(self, gang: Gang) -> None:
        """Start every part of ``gang`` (each node's processes together)."""

    def signal(
        self, job_id: str, restart: int, nodes: Sequence[str], signal: str, grace: float
    ) -> None:
        """Preempt: send ``signal`` to the parts on ``nodes`` so they checkpoint and exit;
        SIGKILL what is left after ``grace`` seconds."""

    def kill(self, job_id: str, restart: int, nodes: Sequence[str], grace: float = 0.0) -> None:
        """Stop the parts on ``nodes`` now (``grace``: a moment to finish on their own
        first, e.g. peers of a completed chief)."""

    def forget(self, job_id: str, found: str | None = None) -> None:
        """The job is finished for good (completed, failed, cancelled): drop what is kept
        for it between starts (e.g. a held batch job); ``found``: the ``JobFound.ref`` of a
        job the executor found, which it may hold though it never launched it."""

    def nodes(self) -> Mapping[str, NodeInfo]:
        """The inventory: every node known now, by name."""

    def node(self, name: str) -> NodeInfo | None:
        """One node of the inventory (None: not known), without building all of it."""

    def fetch_logs(
        self, req: int, job_id: str, job_key: str, node: str, offsets: Mapping[str, int], limit: int
    ) -> bool:
        """Ask ``node`` for the job's log files after ``offsets`` (at most ``limit`` bytes);
        the answer comes back as ``LogData(req, …)``. False: this node cannot answer."""

    def expect(self, nodes: Iterable[str], mono: float) -> None:
        """After a coordinator restart: nodes the journal knows. Report each back as
        ``NodeJoined`` (with its running parts), or as ``NodeLost`` if it does not come back in
        time; until then the coordinator schedules nothing."""

    def handlers(self) -> Mapping[str, MessageHandler]:
        """Message types this executor's nodes send on the coordinator's socket (the agents'
        ``register``, ``exited``, …), each with its handler; none for an executor that
        learns by asking."""

    def overdue(self, mono: float) -> bool:
        """Whether some node has been silent too long (then the loop first reads what it
        may have sent meanwhile, before ``poll`` would lose it)."""

    def stalled(self, seconds: float) -> None:
        """The coordinator did not run for ``seconds`` (stopped, or starved of CPU): that
        time is no node's silence."""

    def poll(self, mono: float) -> list[ExecutorEvent]:
        """Events found by looking (``mono``: the loop's monotonic clock), e.g. nodes silent
        too long; called on every turn of the loop, so it must be cheap."""


class Polled:
    """The parts of ``Executor`` an executor that learns everything by asking (``poll``)
    does not need: its nodes send the coordinator's socket nothing, it judges their silence
    itself, and any gang can be handed over (Slurm: a file in the spool)."""

    def nodes(self) -> Mapping[str, NodeInfo]:
        raise NotImplementedError  # each executor's own

    def node(self, name: str) -> NodeInfo | None:
        return self.nodes().get(name)

    def check_launch(self, gang: Gang) -> str | None:
        return None

    def handlers(self) -> Mapping[str, MessageHandler]:
        return {}

    def overdue(self, mono: float) -> bool:
        return False

    def stalled(self, seconds: float) -> None:
        pass
