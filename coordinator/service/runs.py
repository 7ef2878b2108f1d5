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
from typing import Any, Protocol

from coordinator.core import events
from coordinator.core.model import (
    Decision,
    JobState,
    Kill,
    Node,
    Preempt,
    Start,
)
from coordinator.core.packlimit import PACKED, SPREAD, PackLimit
from coordinator.core.placement import PackLimited
from coordinator.core.scheduler import Scheduler
from coordinator.protocol import PartOutcome, Stopping
from coordinator.service.commands import Command, Forget, KillParts, LaunchGang, Signal
from coordinator.service.executor import SETTLE
from coordinator.service.gangs import RunSettings, plan_gang
from coordinator.service.metrics import Metrics
from coordinator.service.records import JobRecord, LastExit, Lost, Run
from coordinator.service.settle import SETTLING, part_stop, run_outcome
from tiresias_launch.contract import EXIT_CHECKPOINTED, OWN_CHECKPOINTS

log = logging.getLogger("tiresias.coordinator")


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


@dataclass
class RunBook:
    sched: Scheduler
    ledger: Ledger
    settings: RunSettings
    packlimit: PackLimit
    metrics: Metrics
    #: Records of the active jobs, in submission order (j1, j2, …); finished jobs' are
    #: archived (``archive.py``).
    records: dict[str, JobRecord] = field(default_factory=dict)
    #: Jobs finished for good since the last pass, to be archived after it.
    ended: list[str] = field(default_factory=list)
    #: node → the jobs whose current run has (or had) a part there: what a node event
    #: reads (built from the records at the first, kept up to date by starts and ends).
    on_node: dict[str, set[str]] | None = None
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
                self.stop(d.job_id, Stopping.PREEMPT, when)
            elif isinstance(d, Kill):
                self.stop(d.job_id, Stopping.KILL, when)

    def start(
        self, d: Start, when: When, hosts: Mapping[str, str], port: Callable[[str], int]
    ) -> None:
        restart = self.sched.job(d.job_id).restarts
        rec = self.records[d.job_id]
        allocation = d.allocation.to_wire()
        gang = plan_gang(d.job_id, rec, allocation, restart, hosts, port, self.settings)
        rec.run = Run(restart, dict.fromkeys(gang.parts), allocation, when.now)
        self._index(d.job_id, rec.run, add=True)
        rec.nodes_ever = sorted({*rec.nodes_ever, *gang.parts})
        self.ledger.save(d.job_id)
        self.metrics.starts.inc()
        self.commands.append(LaunchGang(gang))
        log.info("start %s (restart %d) on %s", d.job_id, restart, allocation)

    def stop(self, job_id: str, why: Stopping, when: When) -> None:
        """Preempt (signal, then SIGKILL after the grace) or kill the job's current run."""
        run = self.records[job_id].run
        if run is None:
            return
        run.stopping = run.stopping or why
        self.ledger.save(job_id)
        nodes = tuple(run.running_nodes())
        if why == Stopping.PREEMPT:
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
        launch (Slurm starts a released job on its next pass): the core serves it from then
        (an awaited run too when Slurm's whole second is before the launch)."""
        rec = self.records.get(job_id)
        run = rec.run if rec is not None else None
        at = core_time(wall, when)
        if run is not None and run.restart == restart and not run.stopping:
            self.ledger.core(events.Began(job_id, at, when.now))

    def part_ended(
        self,
        job_id: str,
        node: str,
        outcome: PartOutcome,
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
            run.stop = part_stop(outcome, node, processes, run.stopping)  # the first failure
            if failing:
                rec.exit_code = failing[0]["code"]
                rec.log_tail = failing[0].get("log_tail") or ""
        elif outcome in SETTLING and (
            run.decided is None
            or (run.decided, outcome) == (PartOutcome.PREEMPTED, PartOutcome.CHECKPOINTED)
        ):
            run.decided = outcome  # the chief's checkpoint counts, however peers ended
        if run.stop is None:
            run.stop = part_stop(outcome, node, processes, run.stopping)
        pending = tuple(run.running_nodes())
        if run.decided is not None and pending and run.stopping is None:
            run.stopping = Stopping.STOP  # the others cannot go on without this part
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
        self._index(job_id, run, add=False)
        self.deadlines.pop(job_id, None)
        ended = None if run.ended is None else core_time(run.ended, when)
        self.ledger.core(events.Exited(job_id, when.now, outcome, ended, run.stop))
        state = self.sched.job(job_id).state
        if state.finished:
            self.finished(job_id, when)
        if state is JobState.COMPLETED:
            rec.exit_code = 0
        elif state is JobState.CANCELLED and rec.exit_code is None:
            rec.exit_code = 130
        # what happened to the processes, not what the core was told (a cancel's kill is
        # "checkpointed" to the core: the job resumes from its last checkpoint, if ever)
        happened = run.decided or (PartOutcome.KILLED if run.stopping == Stopping.KILL else outcome)
        log.info("job %s restart %d ended: %s → %s", job_id, run.restart, happened, state.value)
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
        # a job that keeps its own checkpoints resumes from them: not known to lose any
        own = rec.checkpointable is False and OWN_CHECKPOINTS in (rec.checkpointable_why or "")
        saved = step if own else (0 if rec.checkpointable is False else began)
        saved = max(saved, (progress.checkpoint or {}).get("step") or 0)
        job = self.sched.job(job_id)
        seconds = max(0.0, (job.wait_since or when.now) - run.started)
        share = 1.0 if step <= began else min(1.0, max(0, step - saved) / (step - began))
        share = 0.0 if own else share
        lost = rec.lost = rec.lost or Lost()
        lost.preemptions += 1
        lost.steps += max(0, step - saved)
        lost.gpu_seconds += job.gpus * seconds * share
        if rec.checkpointable is False:  # its next run's first report says what it kept
            counted = {"steps": max(0, step - saved), "gpu_seconds": job.gpus * seconds * share}
            lost.unconfirmed = {
                "after": run.restart,
                "step": step,
                "run_gpu_seconds": job.gpus * seconds,
            } | counted
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
            or not isinstance(self.sched.placement, PackLimited)
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
        self._lose_parts(node, {}, when)
        self.changed = True

    def node_drained(self, node: str, drained: bool, why: str, when: When) -> None:
        """The node keeps its running parts but takes no new ones (``drained``), or takes
        them again: the core places nothing there meanwhile."""
        if node not in self.sched.free_gpus() or drained == (node in self.sched.drained()):
            return
        self.ledger.core(events.NodeDrain(node, drained, when.now))
        log.info("node %s %s%s", node, "takes no new jobs" if drained else "takes jobs again",
                 f": {why}" if why else "")  # fmt: skip
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
        elif node in self.sched.drained():  # it takes jobs until the executor says otherwise
            self.ledger.core(events.NodeDrain(node, False, when.now))
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
        self._lose_parts(node, running, when)

    def _lose_parts(self, node: str, running: Mapping[str, int], when: When) -> None:
        """Lose the parts we believe run on ``node`` that it does not run: their job is not
        in ``running``, or runs there at another restart (a launch sent to a connection
        that went away, while an older run of the job was still there)."""
        for job_id in sorted(self.jobs_on(node), key=lambda j: (len(j), j)):  # j2 < j10
            run = self.records[job_id].run
            if run is not None and run.pending(node) and running.get(job_id) != run.restart:
                log.warning("node %s no longer runs %s; it is lost", node, job_id)
                self.part_ended(job_id, node, PartOutcome.LOST, [], when)

    def jobs_on(self, node: str) -> set[str]:
        """The jobs whose current run has a part on ``node`` (the index built at the first
        node event or query, from the records)."""
        if self.on_node is None:
            self.on_node = {}
            for job_id, rec in self.records.items():
                self._index(job_id, rec.run, add=True)
        return self.on_node.get(node, set())

    def _index(self, job_id: str, run: Run | None, add: bool) -> None:
        """Add or remove ``job_id`` under the nodes of its ``run`` (once ``on_node`` is built)."""
        if run is None or self.on_node is None:
            return
        for node in run.parts:
            jobs = self.on_node.setdefault(node, set())
            if add:
                jobs.add(job_id)
            else:
                jobs.discard(job_id)

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
        self.ended.append(job_id)
        self.commands.append(Forget(job_id, self.records[job_id].request.found))


def core_time(wall: float, when: When) -> float:
    """The core time of an earlier wall-clock moment (an executor's fact), at most now."""
    return when.now - max(0.0, when.wall - wall)
