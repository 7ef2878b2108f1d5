"""The run lifecycle, pure: core decisions become executor commands, part exits become job
outcomes.

A job's *run* is one start of it on an allocation; its *parts* are the run's share on each
node. The ``RunBook`` keeps the service's job records, starts runs for ``Start`` decisions,
stops them for ``Preempt``/``Kill``, settles each run from its parts' exits (the chief's
checkpoint counts however its peers ended; one failed part fails the run and stops the
rest), counts work lost to preemptions without a checkpoint, learns PACKLIMIT from finished
runs, and loses the parts of nodes that went away or no longer have them.

It reads no clock and sends nothing: times come in as ``When``, commands (``commands.py``)
go to ``commands`` (sent by the coordinator after the journal commit), core calls and record
writes go through the ``Ledger`` (the coordinator's journal transaction).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from coordinator.core import events
from coordinator.core.model import Decision, ExitOutcome, JobState, Kill, Node, Preempt, Start
from coordinator.core.packlimit import PACKED, SPREAD, PackLimit
from coordinator.core.scheduler import Scheduler
from coordinator.gang import GangRequest, plan
from coordinator.protocol import PartOutcome
from coordinator.service.agent import SETTLE
from coordinator.service.commands import Command, Forget, KillParts, LaunchGang, Signal
from coordinator.service.executor import FOUND_JOB, Gang, ProcessLaunch
from coordinator.service.metrics import Metrics
from coordinator.service.records import JobRecord, LastExit, Lost, Run
from tiresias_launch.contract import EXIT_CHECKPOINTED, JOB_TOKEN, PREEMPT_SIGNAL

log = logging.getLogger("tiresias.coordinator")

#: A part whose node is gone or no longer has it: the run book's own outcome, beside the
#: executors' ``PartOutcome``.
LOST = "lost"
#: Part outcomes that settle a run unless a failure did.
SETTLING = (PartOutcome.COMPLETED, PartOutcome.CHECKPOINTED, PartOutcome.PREEMPTED, LOST)


@dataclass(frozen=True)
class When:
    """The moment an event is handled, on each clock that matters: core time (the journal's,
    continued across restarts), monotonic (local timeouts), wall (what users read)."""

    now: float
    mono: float
    wall: float


class Ledger(Protocol):
    """Where the run book's changes go: applied and journaled in one transaction."""

    def core(self, event: events.Event) -> list[Decision]:
        """Apply one core event and journal it; the decisions it made."""

    def save(self, job_id: str) -> None:
        """Write the job's record."""

    def observe(self, key: str, skew: float, placement: str, iter_time: float) -> None:
        """Keep one finished run for the PACKLIMIT learner."""

    def decided(self, now: float, kind: str, job_id: str, allocation: str | None) -> None:
        """Audit one decision acted upon."""


@dataclass(frozen=True)
class RunSettings:
    grace: float
    preempt_signal: str
    heartbeat_timeout: float
    checkpoints: Path


def plan_gang(
    job_id: str,
    rec: JobRecord,
    allocation: Mapping[str, list[int]],
    restart: int,
    hosts: Mapping[str, str],
    port: Callable[[str], int],
    settings: RunSettings,
) -> Gang:
    """One (re)start of a job: every process on every node of ``allocation``."""
    req = rec.request
    specs = plan(
        GangRequest(tuple(req.argv), req.workers, req.ps, req.horovod),
        job_id,
        allocation,
        None,
        settings.checkpoints,
        restart,
        port,
        hosts=hosts,
        job_key=rec.key,
    )
    parts: dict[str, list[ProcessLaunch]] = {}
    extra = {PREEMPT_SIGNAL: settings.preempt_signal, JOB_TOKEN: req.token}
    for s in specs:
        env = {**req.env, **s.env, **extra}
        parts.setdefault(s.node, []).append(
            ProcessLaunch(s.role, s.task_index, tuple(s.argv), env, tuple(s.gpus), req.cwd)
        )
    return Gang(job_id, rec.key, restart, req.owner or "", settings.grace, parts)


@dataclass
class RunBook:
    sched: Scheduler
    ledger: Ledger
    settings: RunSettings
    packlimit: PackLimit
    metrics: Metrics
    #: Job records in submission order (j1, j2, …): listings page through it.
    records: dict[str, JobRecord] = field(default_factory=dict)
    commands: list[Command] = field(default_factory=list)
    #: job → monotonic time by which its stopped run must be gone (then killed again).
    deadlines: dict[str, float] = field(default_factory=dict)
    #: Set when a run ended or a node came or went, so the loop schedules again.
    changed: bool = False
    #: Each node's GPU indices as it last joined (since this process started).
    joined: dict[str, list[int]] = field(default_factory=dict)

    # --- decisions → commands -----------------------------------------------------------
    def act(
        self,
        decisions: list[Decision],
        when: When,
        hosts: Mapping[str, str],
        port: Callable[[str], int],
    ) -> None:
        for d in decisions:
            alloc = json.dumps(d.allocation.to_wire()) if isinstance(d, Start) else None
            self.ledger.decided(when.now, type(d).__name__.lower(), d.job_id, alloc)
            if isinstance(d, Start):
                self.start(d, when, hosts, port)
            elif isinstance(d, Preempt):
                self.metrics.preemptions.inc()
                self.stop(d.job_id, "preempt", when)
            elif isinstance(d, Kill):
                self.stop(d.job_id, "kill", when)

    def start(
        self, d: Start, when: When, hosts: Mapping[str, str], port: Callable[[str], int]
    ) -> None:
        restart = self.sched.job(d.job_id).restarts
        rec = self.records[d.job_id]
        allocation = d.allocation.to_wire()
        gang = plan_gang(d.job_id, rec, allocation, restart, hosts, port, self.settings)
        rec.run = Run(restart, dict.fromkeys(gang.parts), allocation, when.now)
        rec.nodes_ever = sorted({*rec.nodes_ever, *gang.parts})
        self.ledger.save(d.job_id)
        self.metrics.starts.inc()
        self.commands.append(LaunchGang(gang))
        log.info("start %s (restart %d) on %s", d.job_id, restart, allocation)

    def stop(self, job_id: str, why: str, when: When) -> None:
        """Preempt (signal, then SIGKILL after the grace) or kill the job's current run."""
        run = self.records[job_id].run
        if run is None:
            return
        run.stopping = run.stopping or why
        self.ledger.save(job_id)
        nodes = tuple(run.running_nodes())
        if why == "preempt":
            s = self.settings
            self.commands.append(Signal(job_id, run.restart, nodes, s.preempt_signal, s.grace))
            grace = s.grace
        else:
            self.commands.append(KillParts(job_id, run.restart, nodes))
            grace = 0.0
        backstop = grace + max(2.0, self.settings.heartbeat_timeout)
        self.deadlines[job_id] = when.mono + backstop
        log.info("%s %s (restart %d)", why, job_id, run.restart)

    def overdue(self, mono: float) -> None:
        """Kill again the stopped runs whose parts should be gone by now."""
        for job_id, deadline in list(self.deadlines.items()):
            if mono >= deadline:
                del self.deadlines[job_id]
                run = self.records[job_id].run
                if run is not None:
                    self.commands.append(KillParts(job_id, run.restart, tuple(run.running_nodes())))

    # --- parts ending → job outcomes ----------------------------------------------------
    def is_current(self, job_id: str, restart: int, node: str) -> bool:
        """Whether a part exit is news (not a resent report, not about an older run)."""
        rec = self.records.get(job_id)
        run = rec.run if rec is not None else None
        return run is not None and run.restart == restart and run.pending(node)

    def began(self, job_id: str, restart: int, wall: float, when: When) -> None:
        """The executor saw the current run really start at wall time ``wall``, after the
        launch (Slurm starts a released job on its next pass): the core serves it from then."""
        rec = self.records.get(job_id)
        run = rec.run if rec is not None else None
        at = core_time(wall, when)
        if run is not None and run.restart == restart and not run.stopping and at > run.started:
            self.ledger.core(events.Began(job_id, at, when.now))

    def part_ended(
        self,
        job_id: str,
        node: str,
        outcome: str,
        processes: list[Mapping[str, Any]],
        when: When,
        ended: float | None = None,
    ) -> None:
        """One node's processes of the current run are gone (or the node is); ``ended``: the
        wall time they really ended, when the executor knows it."""
        rec = self.records[job_id]
        run = rec.run
        assert run is not None
        run.parts[node] = outcome
        if ended is not None:
            run.ended = max(run.ended or ended, ended)
        failing = [p for p in processes if p["code"] not in (0, EXIT_CHECKPOINTED, None)]
        if processes:
            rec.last_exit = LastExit(
                node,
                outcome,
                run.restart,
                rec.progress.step if rec.progress.of(run.restart) else None,
                [{k: p[k] for k in ("role", "task_index", "code")} for p in processes],
            )
        if outcome == PartOutcome.FAILED and run.decided != PartOutcome.FAILED:
            run.decided = PartOutcome.FAILED
            if failing:
                rec.exit_code = failing[0]["code"]
                rec.log_tail = failing[0].get("log_tail") or ""
        elif outcome in SETTLING and (
            run.decided is None
            or (run.decided, outcome) == (PartOutcome.PREEMPTED, PartOutcome.CHECKPOINTED)
        ):
            run.decided = outcome  # the chief's checkpoint counts, however peers ended
        pending = tuple(run.running_nodes())
        if run.decided is not None and pending and run.stopping is None:
            run.stopping = "stop"  # the others cannot go on without this part
            # after a completion, peers get a moment to finish on their own
            settle = SETTLE if run.decided == PartOutcome.COMPLETED else 0.0
            self.commands.append(KillParts(job_id, run.restart, pending, settle))
        if not pending:
            self._job_ended(job_id, run, when)
        self.ledger.save(job_id)

    def _job_ended(self, job_id: str, run: Run, when: When) -> None:
        rec = self.records[job_id]
        outcome = run_outcome(run)
        self._learn_packlimit(job_id, run)
        if run.decided == PartOutcome.PREEMPTED:
            self._count_lost_work(job_id, run, when)
        rec.run = None
        self.deadlines.pop(job_id, None)
        ended = None if run.ended is None else core_time(run.ended, when)
        self.ledger.core(events.Exited(job_id, when.now, outcome, ended))
        state = self.sched.job(job_id).state
        if state.finished:
            self.finished(job_id, when)
        if state is JobState.COMPLETED:
            rec.exit_code = 0
        elif state is JobState.CANCELLED and rec.exit_code is None:
            rec.exit_code = 130
        log.info(
            "job %s restart %d ended: %s → %s", job_id, run.restart, outcome.value, state.value
        )
        self.changed = True

    def _count_lost_work(self, job_id: str, run: Run, when: When) -> None:
        """A run stopped by preemption without a checkpoint: its steps since the last
        checkpoint (all of them, for a job that cannot be checkpointed) will run again."""
        rec = self.records[job_id]
        progress = rec.progress
        if progress.of(run.restart):
            step = progress.step or 0
            began = (progress.warmup or {}).get("step") or 0
        else:  # no report from this run: it never got going
            step = began = 0
        saved = 0 if rec.checkpointable is False else began
        saved = max(saved, (progress.checkpoint or {}).get("step") or 0)
        job = self.sched.job(job_id)
        seconds = max(0.0, (job.wait_since or when.now) - run.started)
        share = 1.0 if step <= began else min(1.0, max(0, step - saved) / (step - began))
        lost = rec.lost = rec.lost or Lost()
        lost.preemptions += 1
        lost.steps += max(0, step - saved)
        lost.gpu_seconds += job.gpus * seconds * share
        self.metrics.lost_gpu_seconds.inc(job.gpus * seconds * share)

    def _learn_packlimit(self, job_id: str, run: Run) -> None:
        """Feed a finished multi-GPU run (skew, packed or spread, iteration time) to the
        PACKLIMIT learner; journal a new value so replay places jobs the same way."""
        rec = self.records[job_id]
        iter_time = rec.progress.iter_time
        if (
            rec.skew is None
            or not iter_time
            or not rec.progress.of(run.restart)
            or sum(map(len, run.allocation.values())) < 2
            or not hasattr(self.sched.placement, "packlimit")
        ):
            return
        placement = PACKED if len(run.allocation) == 1 else SPREAD
        key = rec.request.name or job_id
        self.ledger.observe(key, rec.skew, placement, iter_time)
        self.packlimit.observe(key, rec.skew, placement, iter_time)
        if self.packlimit.value != self.sched.placement.packlimit:
            log.info("PACKLIMIT learned from history: %.3f", self.packlimit.value)
            self.ledger.core(events.SetPackLimit(self.packlimit.value))

    # --- nodes --------------------------------------------------------------------------
    def node_lost(self, node: str, when: When) -> None:
        """The node is gone: the core stops its jobs' service now; their parts there are
        lost, survivors elsewhere are killed, each job resumes once all its parts are gone."""
        if node in self.sched.free_gpus():
            self.ledger.core(events.NodeDown(node, when.now))
        self._lose_parts(node, set(), when)
        self.changed = True

    def node_up(self, node: str, gpus: list[int], running: Mapping[str, int], when: When) -> None:
        """A node (re)joined: tell the core (again, if its GPUs changed), then reconcile."""
        known = node in self.sched.free_gpus()
        before = self.joined.get(node)
        self.joined[node] = gpus
        if known and before is not None and before != gpus:
            self.ledger.core(events.NodeDown(node, when.now))
            known = False
        if not known:
            self.ledger.core(events.NodeUp(Node(node, tuple(gpus)), when.now))
        self.reconcile(node, running, when)
        self.changed = True

    def reconcile(self, node: str, running: Mapping[str, int], when: When) -> None:
        """Make the node's view and ours agree: kill what we do not expect, lose what it
        does not have."""
        for job_id, restart in running.items():
            if not self.is_current(job_id, restart, node):
                log.warning(
                    "node %s runs %s restart %d, which it should not; killing it",
                    node,
                    job_id,
                    restart,
                )
                self.commands.append(KillParts(job_id, restart, (node,)))
        self._lose_parts(node, set(running), when)

    def _lose_parts(self, node: str, keep: set[str], when: When) -> None:
        for job_id, rec in self.records.items():
            if rec.run is not None and rec.run.pending(node) and job_id not in keep:
                log.warning("node %s no longer runs %s; it is lost", node, job_id)
                self.part_ended(job_id, node, LOST, [], when)

    # --- submit and end -----------------------------------------------------------------
    def add(self, job_id: str, rec: JobRecord) -> None:
        self.records[job_id] = rec
        self.ledger.save(job_id)

    def step_of(self, job_id: str) -> int | None:
        """The training step the job last reported."""
        rec = self.records.get(job_id)
        return rec.progress.step if rec is not None else None

    def finished(self, job_id: str, when: When) -> None:
        """The core finished the job for good (its last run ended, or it was cancelled
        while it had none)."""
        self.records[job_id].ended = when.wall
        self.ledger.save(job_id)
        self.commands.append(Forget(job_id, self.records[job_id].request.env.get(FOUND_JOB)))


def core_time(wall: float, when: When) -> float:
    """The core time of an earlier wall-clock moment (an executor's fact), at most now."""
    return when.now - max(0.0, when.wall - wall)


def run_outcome(run: Run) -> ExitOutcome:
    """What the core is told when every part of ``run`` has ended."""
    decided = run.decided
    if decided in (PartOutcome.FAILED, PartOutcome.COMPLETED):
        return ExitOutcome(decided)
    if decided == LOST:
        return ExitOutcome.LOST
    stopped = run.stopping in ("preempt", "kill")
    if decided in (PartOutcome.CHECKPOINTED, PartOutcome.PREEMPTED) or stopped:
        return ExitOutcome.CHECKPOINTED  # resumed from its last checkpoint, if any
    return ExitOutcome.LOST
