"""Each job's story in words (submitted, started on …, demoted, preempted at step N for …,
stopped by a signal from outside, restarted …), told from what changed in the scheduler
between two looks; why a run stopped is the core's ``Job.stop``, as the pass that preempted
it or the shell that saw it end said. Pure: the service looks after every pass and stores
the events; the simulator looks after every instant and writes them per job
(``tiresias-sim --out DIR --reasons``).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from coordinator.core.explain import active_jobs, duration_text, queue_name
from coordinator.core.model import Allocation, CoreError, Job, JobState, Stop, StopReason
from coordinator.core.policy_base import thresholds_of
from coordinator.core.scheduler import Scheduler


@dataclass(frozen=True)
class Event:
    """``kind``: submitted, demoted, promoted, preempted, resized (an elastic job), lost (a
    node), signalled (from outside Tiresias), killed (from outside), stopped (no reason
    known), cancelling, started, restarted, completed, failed or cancelled; ``text`` says it
    in words."""

    job_id: str
    time: float
    kind: str
    text: str


class _Seen(NamedTuple):
    state: JobState
    queue: int
    preemptions: int
    promotions: int
    restarts: int
    allocation: Allocation | None


def _seen(job: Job) -> _Seen:
    return _Seen(
        job.state, job.queue, job.preemptions, job.promotions, job.restarts, job.allocation
    )


_NEW = _Seen(JobState.WAITING, 0, 0, 0, 0, None)


def placement_text(alloc: Allocation) -> str:
    """``n1:0,1 n2:0``: the GPUs of an allocation."""
    return " ".join(f"{n}:{','.join(map(str, g))}" for n, g in alloc.gpus)


class Timeline:
    """Remembers each active job as last seen; ``observe`` returns what happened since.
    ``prime`` takes a scheduler's current state as seen (after a restart: no events for the
    past, which the shell has stored). After its first look it reads only the jobs the
    policy re-filed or removed since (``Policy.touched``: every change of a job's state,
    queue, service or allocation is one), so a pass costs its changes, not the backlog."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self._order: dict[str, int] = {}  # job → its place in submission order
        self._next = 0

    def prime(self, sched: Scheduler) -> None:
        self._seen, self._order = {}, {}
        for job in active_jobs(sched):
            self._see(job)
        sched.policy.touched = {}

    def _see(self, job: Job) -> _Seen | None:
        """``job`` as seen now; what it was when last seen (None: first seen now)."""
        if job.job_id not in self._order:
            self._order[job.job_id] = self._next
            self._next += 1
        old = self._seen.get(job.job_id)
        self._seen[job.job_id] = _seen(job)
        return old

    def observe(
        self,
        sched: Scheduler,
        now: float,
        step_of: Callable[[str], int | None] | None = None,
    ) -> list[Event]:
        """Events since the last look, job by job in submission order. ``step_of``: the
        training step a job has reached (the service knows it; the simulator does not)."""
        touched, sched.policy.touched = sched.policy.touched, {}
        if touched is None:  # the first look: every job
            looked = [*(j.job_id for j in active_jobs(sched)), *self._seen]
        else:  # in first-touch order: a new job's first is its submit
            looked = list(touched)
        active: list[Job] = []
        ended: list[Job] = []
        for job_id in dict.fromkeys(looked):
            try:
                job = sched.job(job_id)
            except CoreError:  # finished and retired before any look
                continue
            if not job.state.finished:
                active.append(job)
            elif job_id in self._seen:  # else it came and went between two looks
                ended.append(job)
        events: list[Event] = []
        for job in active:  # order new jobs after every job seen before
            if job.job_id not in self._order:
                self._order[job.job_id] = self._next
                self._next += 1
        for job in sorted(active, key=lambda j: self._order[j.job_id]):
            old = self._seen.get(job.job_id)
            if old == _seen(job):
                continue
            if old is None:
                events.append(Event(job.job_id, job.spec.arrival, "submitted", "submitted"))
            self._see(job)
            events += _changes(sched, old or _NEW, job, now, step_of)
        for job in sorted(ended, key=lambda j: self._order[j.job_id]):
            old = self._seen.pop(job.job_id)
            del self._order[job.job_id]
            events += _changes(sched, old, job, now, step_of)
        return events


def _changes(
    sched: Scheduler,
    old: _Seen,
    job: Job,
    now: float,
    step_of: Callable[[str], int | None] | None,
) -> list[Event]:
    """What happened to ``job`` since it was ``old``, in the order it happened."""
    said: list[tuple[str, str]] = []
    thresholds = thresholds_of(sched.policy)
    if job.promotions > old.promotions:
        knob = sched.config.promote_knob
        said.append(("promoted", f"promoted to Q1: it had waited {knob:g}× as long as it ran"))
    elif job.queue > old.queue and thresholds is not None:
        passed = thresholds[job.queue - 1]
        said.append(
            (
                "demoted",
                f"demoted to {queue_name(job.queue)}: its service passed {passed:,.0f} GPU-s",
            )
        )
    step = step_of(job.job_id) if step_of else None
    at = f" at step {step}" if step is not None else ""
    again = _ran_again(old, job)
    stopped = old.state is JobState.RUNNING and (job.state is not JobState.RUNNING or again)
    stop = job.stop
    if stopped and job.preemptions > old.preemptions and stop is not None and stop.size:
        held = old.allocation.count if old.allocation is not None else 0
        how = "grew" if stop.size > held else "shrunk"  # an elastic job, at a checkpoint
        who = ", ".join(stop.for_jobs[:3]) + (" …" if len(stop.for_jobs) > 3 else "")
        said.append(("resized", f"{how} to {stop.size}{at}" + (f" for {who}" if who else "")))
    elif stopped and job.preemptions > old.preemptions:
        for_jobs = stop.for_jobs if stop is not None else ()
        below = old.allocation is not None and old.allocation.count < job.spec.gpus
        said.append(("preempted", f"preempted{at}" + _for_whom(sched, job, for_jobs, below)))
    elif stopped and job.cancel_requested:
        said.append(("cancelling", f"stopping{at}: cancel requested"))
    elif stopped and job.state not in (JobState.COMPLETED, JobState.FAILED):
        said.append(_stopped(sched, stop, at, old.allocation))
    if job.state is JobState.RUNNING and (old.state is not JobState.RUNNING or again):
        assert job.allocation is not None
        where = placement_text(job.allocation)
        most = job.held[1] if job.held is not None else job.spec.gpus
        if job.allocation.count < most:  # an elastic job below its ask
            where = f"{job.allocation.count} of {most} GPUs, {where}"
        if job.held is not None:
            where += f"; held at {job.allocation.count} until its runtime confirms it can resize"
        if job.restarts == 0:
            said.append(("started", f"started on {where}"))
        else:
            said.append(("restarted", f"restarted on {where} (restart {job.restarts})"))
    if job.state.finished:
        ran = duration_text(job.total_executed)
        said.append(
            (
                job.state.value,
                {
                    JobState.COMPLETED: f"completed after {ran} of run time",
                    JobState.FAILED: _failed(stop, at, ran),
                    JobState.CANCELLED: "cancelled",
                }[job.state],
            )
        )
    return [Event(job.job_id, now, kind, text) for kind, text in said]


def _stopped(
    sched: Scheduler, stop: Stop | None, at: str, allocation: Allocation | None
) -> tuple[str, str]:
    """A run that ended without completing, and not by the policy or a cancel: its kind
    and words."""
    if stop is None:  # e.g. a journal from before stops were told
        return "stopped", f"stopped{at}"
    if stop.reason is StopReason.NODE_LOST:
        up = sched.nodes()
        nodes = [stop.node] if stop.node else list(allocation.nodes if allocation else ())
        down = [n for n in nodes if n not in up]
        if down:
            return "lost", f"stopped{at}: node {', '.join(down)} went down"
        return "lost", f"stopped{at}: node {', '.join(nodes)} lost its processes"
    if stop.reason is StopReason.NOT_STARTED:  # e.g. Slurm's prolog failed there
        return "lost", f"stopped{at}: its processes could not be started on {stop.node}"
    if stop.reason is StopReason.SIGNALLED:
        if stop.code is not None and stop.code < 0:
            return "signalled", f"stopped{at} by {signal_name(stop.code)} from outside Tiresias"
        return "signalled", f"stopped{at} by a signal from outside Tiresias (it checkpointed)"
    if stop.reason is StopReason.KILLED:
        return "killed", f"stopped{at}: {_killed(stop)}"
    return "stopped", f"stopped{at}"


def _failed(stop: Stop | None, at: str, ran: str) -> str:
    """A failed job's last words: what failed it, when known."""
    if stop is not None and stop.reason is StopReason.NOT_STARTED:
        told = f" (exit code {stop.code})" if stop.code is not None else ""
        return f"failed: its processes could not be started{told}"
    text = f"failed{at} after {ran} of run time"
    if stop is None:
        return text
    if stop.reason in (StopReason.KILLED, StopReason.SIGNALLED):
        return f"{text}: {_killed(stop)}"
    if stop.reason is StopReason.FAILED and stop.code is not None:
        code = stop.code
        how = f"killed by {signal_name(code)}" if code < 0 else f"exit code {code}"
        return f"{text} ({how})"
    return text


def _killed(stop: Stop) -> str:
    """``killed by SIGKILL from outside Tiresias on n1``."""
    how = f"killed by {signal_name(stop.code)}" if stop.code is not None else "killed"
    return f"{how} from outside Tiresias" + (f" on {stop.node}" if stop.node else "")


def signal_name(code: int) -> str:
    """``SIGTERM`` for the exit status -15 (``signal 99`` for a number no signal has)."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _for_whom(sched: Scheduler, job: Job, for_jobs: tuple[str, ...], below: bool = False) -> str:
    """`` for j2 (Q1), a higher queue than its Q2``: who takes the GPUs, and why they
    rank first (queues), or just who (other policies: their order is the reason). An
    elastic job ``below`` its ask yields to any job selected (``coordinator.core.elastic``)."""
    others = [sched.job(j) for j in for_jobs[:3]]
    if not others:
        return ""
    queued = thresholds_of(sched.policy) is not None
    names = ", ".join(
        f"{b.job_id} ({queue_name(b.queue)})" if queued else b.job_id for b in others
    ) + (" …" if len(for_jobs) > 3 else "")
    if below:
        return f" for {names}: below its ask, it runs only on GPUs no selected job needs"
    if queued and all(b.queue < job.queue for b in others):
        return f" for {names}, a higher queue than its {queue_name(job.queue)}"
    return f" for {names}, ahead of it in {sched.policy.name}'s order"


def _ran_again(old: _Seen, job: Job) -> bool:
    """Running now and then, but a run ended in between (the simulator's free checkpoints)."""
    return old.state is JobState.RUNNING and job.restarts > old.restarts
