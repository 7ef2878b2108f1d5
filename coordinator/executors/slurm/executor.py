"""Slurm as an executor: Tiresias decides order, preemption and placement; Slurm runs the jobs.

One start of a Tiresias job is one Slurm batch job (``--nodes``, ``--nodelist`` from our
placement, ``--gres=gpu:N`` per node, ``--requeue``) whose batch step runs one ``srun`` step per
node and one task per planned process (``slurm_task``). Slurm starts exactly what the
coordinator decides: a job is submitted, or its held predecessor released, only when the core
has decided to start it, on the nodes the core chose; a job that stops to be resumed exits 75,
which ``RequeueExitHold=75`` turns into a held requeue, so Slurm frees its GPUs and never starts
it again on its own.

Preemption sends the preemption signal to the job's steps (``scancel --signal``); the runtime
checkpoints and exits 75; past the grace period ``scontrol requeuehold`` kills what is left and
requeues it held. Facts come from ``squeue --json`` and ``sinfo --json`` (``poll``, at most every
``interval`` seconds), exit codes from the files the tasks write in the job's directory
(``spool``, on a file system the nodes share). After a coordinator restart the jobs are found
again by name (``tiresias:<job key>``) and every node reports the starts really running there.
docs/slurm.md has the cluster settings and the limits.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from coordinator.executors.node import read_logs
from coordinator.executors.slurm.adopt import Adopter, exit_of, found_again
from coordinator.executors.slurm.ctl import (
    ACTIVE,
    WAITING,
    Slurm,
    SlurmError,
    Start,
    batch_args,
    batch_script,
    began,
    hand_over,
    live,
    outcome,
    planned,
    process_exit,
    start_failure,
)
from coordinator.executors.slurm.nodes import Inventory
from coordinator.executors.slurm.owner import job_user
from coordinator.executors.slurm.task import (
    exits,
    fence_file,
    launch_file,
    log_dir,
    preempt_file,
    write_json,
)
from coordinator.executors.slurm.waits import TRIES, Waits, failed_parts, not_launched
from coordinator.protocol import PartOutcome, Stopping
from coordinator.service.curve import server_public
from coordinator.service.executor import (
    ExecutorEvent,
    Gang,
    LogData,
    NodeInfo,
    PartExited,
    Polled,
)
from coordinator.service.options import Options
from tiresias_launch.contract import COORDINATOR, SERVER_KEY

log = logging.getLogger("tiresias.slurm")


class SlurmExecutor(Polled):
    """The ``Executor`` for a Slurm partition that Tiresias manages."""

    def __init__(
        self,
        spool: Path,
        coordinator: str,
        partition: str = "tiresias",
        interval: float = 0.5,
        slurm: Slurm | None = None,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.spool = spool.resolve()
        self.coordinator = coordinator
        #: Variables every process gets below its own (the coordinator's CURVE key).
        self.env = {COORDINATOR: coordinator, **(env or {})}
        self.interval = interval
        self.slurm = slurm or Slurm(partition)
        self.python = python
        self.starts: dict[str, Start] = {}  # job id → its latest start
        self._inventory = Inventory()
        self.waits = Waits()
        self.adopter = Adopter(self.spool, self.slurm)
        self._next_poll = 0.0
        self._found = False  # jobs found again after a restart
        self._queued: list[ExecutorEvent] = []
        self._jobs: Mapping[str, dict[str, Any]] = {}  # Slurm job → squeue's, the last look

    def check(self) -> None:
        """Refuse to start against a Slurm that does not answer or a partition without
        nodes (ValueError naming the problem)."""
        conf = self.slurm.env.get("SLURM_CONF")
        if conf and not Path(conf).is_file():  # Slurm's commands would retry for a minute
            raise ValueError(f"--executor slurm: SLURM_CONF={conf} is not a file")
        try:
            nodes = self.slurm.nodes()
        except (SlurmError, ValueError, KeyError) as e:
            raise ValueError(f"--executor slurm: cannot read Slurm's nodes: {e}") from None
        if not nodes:
            raise ValueError(
                f"--executor slurm: partition {self.slurm.partition!r} has no nodes "
                f"(sinfo -p {self.slurm.partition}); name one with --slurm-partition"
            )

    # --- commands ---------------------------------------------------------------------
    def launch(self, gang: Gang) -> None:
        if gang.found is not None:
            return self._release_found(gang, gang.found)
        old = self.starts.get(gang.job_id)
        if old is not None and not old.ended and old.restart != gang.restart:
            return self._fence(old, gang)
        self._submit(gang, 1)

    def _fence(self, old: Start, gang: Gang) -> None:
        """The core gave ``old`` up while Slurm may still run it (its node stopped
        answering): cancel it, and submit ``gang`` only once Slurm says it ended (``waits``)."""
        log.warning("job %s restart %d waits until Slurm has ended restart %d (Slurm job %s)",
                    gang.job_id, gang.restart, old.restart, old.slurm_id)  # fmt: skip
        jobdir = self.spool / gang.job_key
        with contextlib.suppress(OSError):
            owner = jobdir.stat()
            write_json(fence_file(jobdir), {"restart": gang.restart},
                       (owner.st_uid, owner.st_gid))  # fmt: skip
        old.stopping = old.stopping or Stopping.KILL
        with contextlib.suppress(SlurmError):
            self.slurm.cancel(old.slurm_id)
        self.waits.fence(gang)

    def _submit(self, gang: Gang, attempt: int) -> None:
        """Submit (or release again) the Slurm job of one start, held, then release it."""
        jobdir = self.spool / gang.job_key
        nodes, shape, parts = planned(gang, self.env)
        het = len(set(shape)) > 1  # one component per node: Slurm's gres are per node
        old = self.starts.get(gang.job_id)
        reuse = old is not None and old.reusable and old.shape == shape and not het
        slurm_restarts = old.restarts_after if reuse and old else 0
        try:
            user = job_user(gang.owner)
            self.spool.mkdir(parents=True, exist_ok=True)
            self.spool.chmod(0o711)  # each user reaches their own job directories only
            hand_over(gang, jobdir, user)
        except (ValueError, OSError) as e:
            return self._refused(gang, f"cannot prepare its directories for {gang.owner!r}: {e}")
        write_json(
            launch_file(jobdir),
            {"job_id": gang.job_id, "restart": gang.restart, "slurm_restarts": slurm_restarts,
             "parts": parts, "shape": shape, "het": het}, (user.uid, user.gid),
        )  # fmt: skip
        # a task of an older start still running where Slurm cannot reach stops (``fenced``)
        write_json(fence_file(jobdir), {"restart": gang.restart}, (user.uid, user.gid))
        try:
            if reuse and old:
                slurm_id = old.slurm_id
            else:
                if old is not None and not old.ended:
                    log.warning("job %s: start %d replaces %d", gang.job_id, gang.restart,
                                old.restart)  # fmt: skip
                if old is not None:
                    with contextlib.suppress(SlurmError):
                        self.slurm.cancel(old.slurm_id)
                slurm_id = self.slurm.submit(
                    batch_script(jobdir, self.python, user),
                    batch_args(gang.job_key, gang.job_id, jobdir, nodes, shape, user),
                )
        except SlurmError as e:
            return self._refused(gang, f"Slurm refused the job: {e}")
        start = Start(gang.job_id, gang.job_key, gang.restart, slurm_id, nodes, shape,
                      slurm_restarts, gang=gang, attempt=attempt)  # fmt: skip
        start.released = False  # submitted held: every start is a release by us
        start.launched = time.time()
        if reuse and old:
            start.release_after = old.release_after
        self._release(start)
        self.starts[gang.job_id] = start
        log.info("job %s restart %d is Slurm job %s on %s", gang.job_id, gang.restart,
                 slurm_id, ",".join(nodes))  # fmt: skip

    def _release_found(self, gang: Gang, slurm_id: str) -> None:
        """Start a plain sbatch job (``slurm_adopt``): released onto the node the core chose."""
        nodes = tuple(sorted(gang.parts))
        if len(nodes) != 1:
            why = f"the sbatch job {slurm_id} runs on one node; the core placed it on "
            return self._refused(gang, why + ",".join(nodes))
        gpus = len({g for p in gang.parts[nodes[0]] for g in p.gpus})
        old = self.starts.get(gang.job_id)
        restarts = old.restarts_after if old else 0
        start = Start(gang.job_id, gang.job_key, gang.restart, slurm_id, nodes, ((gpus, 1),),
                      restarts, released=False, launched=time.time(), adopted=True)  # fmt: skip
        start.release_after = old.release_after if old else 0.0
        self._release(start)
        self.starts[gang.job_id] = start
        self.adopter.note(slurm_id, job_id=gang.job_id, key=gang.job_key, restart=gang.restart,
                          nodes=nodes, shape=start.shape, restarts=restarts)  # fmt: skip
        log.info("job %s restart %d is the sbatch job %s on %s", gang.job_id, gang.restart,
                 slurm_id, nodes[0])  # fmt: skip

    def _refused(self, gang: Gang, why: str) -> None:
        """A start that cannot be made: every process of it failed, saying why."""
        log.error("job %s restart %d: %s", gang.job_id, gang.restart, why)
        self._queued += failed_parts(gang.job_id, gang.restart, gang.parts, 127, f"tiresias: {why}")

    def _release(self, start: Start) -> None:
        """Release a held job for its next start, once Slurm will accept its credentials."""
        if start.released or time.time() < start.release_after:
            return
        start.released = True
        try:  # a new heterogeneous job is placed by its components already
            self.slurm.release(start.slurm_id, None if len(set(start.shape)) > 1 else start.nodes)
        except SlurmError as e:  # e.g. cancelled behind our back: the start is lost
            log.error("job %s restart %d: %s", start.job_id, start.restart, e)
            start.ended = True
            gone = (
                PartOutcome.FAILED if start.adopted else PartOutcome.KILLED
            )  # an sbatch job cancelled by its user
            self._queued += [PartExited(start.job_id, start.restart, n, gone) for n in start.nodes]

    def _never_ran(self, start: Start, outcome: PartOutcome) -> bool:
        """Stop a start still waiting for its release: it stays held, ready for the next."""
        if start.released:
            return False
        start.released = start.ended = start.reusable = True
        start.restarts_after = start.slurm_restarts
        self._queued += [PartExited(start.job_id, start.restart, n, outcome) for n in start.nodes]
        return True

    def _unwait(self, job_id: str, restart: int, outcome: PartOutcome) -> bool:
        """Stop a start still waiting to be submitted: it never ran."""
        gang = self.waits.drop(job_id, restart)
        if gang is not None:
            self._queued += [PartExited(job_id, restart, n, outcome) for n in gang.parts]
        return gang is not None

    def _start_failed(self, start: Start, code: int, why: str, mono: float) -> list[ExecutorEvent]:
        """A start whose job never ran: submitted again after a backoff, or, after the last
        try, failed with Slurm's reason on every node."""
        if start.gang is not None and start.attempt < TRIES:
            delay = self.waits.retry(start.gang, start.attempt + 1, mono)
            log.warning("job %s restart %d (Slurm %s) did not start (exit %d); try %d in %.0f s",
                        start.job_id, start.restart, start.slurm_id, code, start.attempt + 1,
                        delay)  # fmt: skip
            return []
        log.error("job %s restart %d (Slurm %s) did not start after %d tries: %s", start.job_id,
                  start.restart, start.slurm_id, start.attempt, why.strip())  # fmt: skip
        planned = start.gang.parts if start.gang is not None else {}
        return failed_parts(start.job_id, start.restart,
                            {n: planned.get(n, ()) for n in start.nodes}, code, why)  # fmt: skip

    def _current(self, job_id: str, restart: int) -> Start | None:
        start = self.starts.get(job_id)
        if start is None or start.restart != restart or start.ended:
            return None
        return start

    def signal(
        self, job_id: str, restart: int, nodes: Sequence[str], signal: str, grace: float
    ) -> None:
        if self._unwait(job_id, restart, PartOutcome.PREEMPTED):
            return
        start = self._current(job_id, restart)
        if (
            start is None
            or start.stopping is not None
            or self._never_ran(start, PartOutcome.PREEMPTED)
        ):
            return
        start.stopping, start.deadline = Stopping.PREEMPT, time.monotonic() + grace
        if start.adopted:  # a plain batch script cannot checkpoint: requeued held now
            return self._expire(start)
        # a process not started yet when the signal goes out signals itself once it is
        jobdir = self.spool / start.job_key
        owner = jobdir.stat()
        write_json(preempt_file(jobdir, restart), {"signal": signal}, (owner.st_uid, owner.st_gid))
        start.signal = signal
        if not self._runs(start):  # scancel would wait for it
            with contextlib.suppress(SlurmError):  # pending: it stays so; else signalled
                self.slurm.hold(start.slurm_id)  # once a look finds it running
        self._send_signal(start)

    def _runs(self, start: Start) -> bool:
        return self._jobs.get(start.slurm_id, {}).get("job_state") == "RUNNING"

    def _send_signal(self, start: Start) -> None:
        if start.signal is None or not self._runs(start):
            return
        try:
            self.slurm.signal(start.slurm_id, start.signal)
        except SlurmError as e:
            log.info("job %s: %s", start.job_id, e)
        start.signal = None

    def kill(self, job_id: str, restart: int, nodes: Sequence[str], grace: float = 0.0) -> None:
        if self._unwait(job_id, restart, PartOutcome.KILLED):
            return
        start = self._current(job_id, restart)
        if start is None or self._never_ran(start, PartOutcome.KILLED):
            return
        start.stopping = start.stopping or Stopping.KILL
        start.deadline = min(start.deadline or float("inf"), time.monotonic() + grace)
        if not grace:
            self._expire(start)

    def _expire(self, start: Start) -> None:
        """Past the deadline: a preempted start is requeued held (its GPUs free, the job waits
        for the coordinator), a killed one cancelled."""
        start.deadline = None
        try:
            if start.stopping == Stopping.PREEMPT:
                self.slurm.requeue_hold(start.slurm_id)
            else:
                self.slurm.cancel(start.slurm_id)
        except SlurmError as e:  # not started yet: it must not start now
            log.info("job %s: %s; holding it", start.job_id, e)
            with contextlib.suppress(SlurmError):
                self.slurm.hold(start.slurm_id)

    def forget(self, job_id: str, found: str | None = None) -> None:
        """The job is finished for good: a Slurm job kept held for its next start goes (an
        adopted sbatch job cancelled before its first start too)."""
        self.waits.drop(job_id)
        start = self.starts.pop(job_id, None)
        held = start.slurm_id if start is not None and start.reusable else None
        if held or (start is None and found):
            with contextlib.suppress(SlurmError):
                self.slurm.cancel(held or str(found))

    def nodes(self) -> Mapping[str, NodeInfo]:
        return self._inventory.nodes  # not a copy: ``node`` reads it

    def fetch_logs(
        self, req: int, job_id: str, job_key: str, node: str, offsets: Mapping[str, int], limit: int
    ) -> bool:
        files = read_logs(log_dir(self.spool / job_key, node), offsets, limit)
        self._queued.append(LogData(req, node, files))
        return True

    def expect(self, nodes: Iterable[str], mono: float) -> None:
        """Nodes the journal knows: Slurm's first answer reports each (NodeJoined or NodeLost)."""
        self._inventory.expect(nodes)

    # --- facts ------------------------------------------------------------------------
    def poll(self, mono: float) -> list[ExecutorEvent]:
        events, self._queued = self._queued, []
        for start in list(self.starts.values()):
            self._release(start)
            if start.deadline is not None and mono >= start.deadline and not start.ended:
                self._expire(start)
        if mono < self._next_poll:
            return events
        self._next_poll = mono + self.interval
        try:
            jobs = {str(j["job_id"]): j for j in self.slurm.jobs()}
            self._jobs = jobs
            nodes = self.slurm.nodes()
        except (SlurmError, ValueError, KeyError) as e:
            log.warning("cannot read Slurm's state: %s", e)
            return events
        if not self._found:  # after a restart: the latest start of each job Slurm knows
            self._found = True
            self.starts.update(found_again(jobs, self.spool, self.adopter))
        for start in self.starts.values():
            if not start.ended:
                self._send_signal(start)
        events += self._inventory.look(nodes, self._running_on)
        largest = max((len(n.gpus) for n in self._inventory.nodes.values()), default=0)
        events += self.adopter.look(jobs, largest)
        events += self._job_events(jobs, mono)
        for waiting in self.waits.due(mono, lambda j: j not in self.starts or self.starts[j].ended):
            self._submit(waiting.gang, waiting.attempt)  # its predecessor is gone
        return events

    def _running_on(self, node: str) -> dict[str, int]:
        """The starts on ``node`` that Slurm runs or is about to (released, not held): not
        those it lists as finished, nor those waiting held for their next start."""
        return {
            s.job_id: s.restart
            for s in self.starts.values()
            if node in s.nodes and not s.ended and live(self._jobs.get(s.slurm_id))
        }

    def _job_events(self, jobs: Mapping[str, dict[str, Any]], mono: float) -> list[ExecutorEvent]:
        events: list[ExecutorEvent] = []
        for start in self.starts.values():
            if start.ended:
                continue
            job = jobs.get(start.slurm_id)
            if job is not None and not start.began:
                events += began(start, job)
            if job is not None and str(job["job_state"]) in ACTIVE:
                continue
            if job is not None and str(job["job_state"]) in WAITING:
                held = (
                    job["job_state"] == "SPECIAL_EXIT" or "held" in str(job["state_reason"]).lower()
                )
                restarts = int(job.get("restart_cnt", 0))
                if restarts == start.slurm_restarts and not (held and start.stopping):
                    continue  # not started yet
                if not held and not start.adopted:  # Slurm requeued it (a node failed): the
                    # next start is a new job (the node may still end this one's old step)
                    with contextlib.suppress(SlurmError):
                        self.slurm.cancel(start.slurm_id)
                elif not held:  # a user's sbatch job: it waits held for us
                    with contextlib.suppress(SlurmError):
                        self.slurm.hold(start.slurm_id)
                start.reusable, start.restarts_after = held or start.adopted, restarts
                start.release_after = time.time() + 1.1  # seen within a second of it
            start.ended = True
            state = str(job["job_state"]) if job else "gone"
            end = float(job.get("end_time") or 0) if job and state not in WAITING else 0.0
            done = exits(self.spool / start.job_key, start.restart)
            failed = start_failure(job, self.spool / start.job_key) if job and not done else None
            if failed and job and not start.stopping:  # placed anew, or tried again here
                events += not_launched(start, job, failed[1]) or self._start_failed(
                    start, *failed, mono)  # fmt: skip
                continue
            for node in start.nodes:
                procs = [process_exit(self.spool / start.job_key, e) for e in done.values()
                         if e["node"] == node]  # fmt: skip
                if start.adopted:
                    procs = exit_of(job, start.stopping) if job else []
                verdict = outcome(procs, start.stopping)
                events.append(PartExited(start.job_id, start.restart, node, verdict, procs,
                                         end if end >= start.launched - 1 else None))  # fmt: skip
            log.info("job %s restart %d (Slurm %s) ended: %s", start.job_id, start.restart,
                     start.slurm_id, state)  # fmt: skip
        return events


def executor_for(opts: Options) -> SlurmExecutor:
    """The Slurm executor ``tiresias-coordinator --executor slurm`` runs with: job
    directories under the state directory (shared by every node), processes told the
    coordinator's address (and its CURVE key)."""
    env = {SERVER_KEY: server_public(opts.curve_keys).decode()} if opts.curve_keys else {}
    executor = SlurmExecutor(opts.state / "slurm", opts.bind, opts.slurm_partition, env=env)
    executor.check()
    return executor
