"""Each job's story in words (submitted, started on …, demoted, preempted at step N for …,
restarted …), told from what changed in the scheduler between two looks. Pure: the service
looks after every pass and stores the events; the simulator looks after every instant and
writes them per job (``tiresias-sim --out DIR --reasons``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from coordinator.core.explain import active_jobs, duration_text, explain, queue_name
from coordinator.core.model import Allocation, Job, JobState
from coordinator.core.scheduler import Scheduler


@dataclass(frozen=True)
class Event:
    """``kind``: submitted, demoted, promoted, preempted, lost, cancelling, started,
    restarted, completed, failed or cancelled; ``text`` says it in words."""

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
    past, which the shell has stored)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def prime(self, sched: Scheduler) -> None:
        self._seen = {j.job_id: _seen(j) for j in active_jobs(sched)}

    def observe(
        self,
        sched: Scheduler,
        now: float,
        step_of: Callable[[str], int | None] | None = None,
    ) -> list[Event]:
        """Events since the last look, job by job in submission order. ``step_of``: the
        training step a job has reached (the service knows it; the simulator does not)."""
        events: list[Event] = []
        active = active_jobs(sched)
        changed = [
            (j, old, cur) for j in active if (old := self._seen.get(j.job_id)) != (cur := _seen(j))
        ]
        started = [
            j
            for j, old, _ in changed
            if j.state is JobState.RUNNING
            and (old is None or old.state is not JobState.RUNNING or _ran_again(old, j))
        ]
        beneficiaries: list[Job] | None = None
        for job, old, cur in changed:
            if old is None:
                events.append(Event(job.job_id, job.spec.arrival, "submitted", "submitted"))
                old = _NEW
            if job.preemptions > old.preemptions and beneficiaries is None:
                releasing = [p for p in explain(sched, now).values() if p.reason == "releasing"]
                beneficiaries = started + [sched.job(p.job_id) for p in releasing]
            events += _changes(sched, old, job, now, step_of, beneficiaries or [])
            self._seen[job.job_id] = cur
        if len(self._seen) > len(active):  # some finished
            ids = {j.job_id for j in active}
            for job_id in [k for k in self._seen if k not in ids]:
                job, old = sched.job(job_id), self._seen.pop(job_id)
                events += _changes(sched, old, job, now, step_of, beneficiaries or started)
        return events


def _changes(
    sched: Scheduler,
    old: _Seen,
    job: Job,
    now: float,
    step_of: Callable[[str], int | None] | None,
    beneficiaries: list[Job],
) -> list[Event]:
    """What happened to ``job`` since it was ``old``, in the order it happened."""
    said: list[tuple[str, str]] = []
    thresholds = getattr(sched.policy, "thresholds", None)
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
    if stopped and job.preemptions > old.preemptions:
        others = [b for b in beneficiaries if b.job_id != job.job_id]
        said.append(("preempted", f"preempted{at}" + _for_whom(sched, job, others)))
    elif stopped and job.cancel_requested:
        said.append(("cancelling", f"stopping{at}: cancel requested"))
    elif stopped and job.state not in (JobState.COMPLETED, JobState.FAILED):
        up = sched.nodes()
        down = [n for n in (old.allocation.nodes if old.allocation else ()) if n not in up]
        said.append(("lost", f"stopped{at}: node {', '.join(down) or '?'} went down"))
    if job.state is JobState.RUNNING and (old.state is not JobState.RUNNING or again):
        assert job.allocation is not None
        where = placement_text(job.allocation)
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
                    JobState.FAILED: f"failed{at} after {ran} of run time",
                    JobState.CANCELLED: "cancelled",
                }[job.state],
            )
        )
    return [Event(job.job_id, now, kind, text) for kind, text in said]


def _for_whom(sched: Scheduler, job: Job, others: list[Job]) -> str:
    """`` for j2 (Q1), a higher queue than its Q2``: who takes the GPUs, and why they
    rank first (queues), or just who (other policies: their order is the reason)."""
    if not others:
        return ""
    queued = hasattr(sched.policy, "thresholds")
    names = ", ".join(
        f"{b.job_id} ({queue_name(b.queue)})" if queued else b.job_id for b in others[:3]
    ) + (" …" if len(others) > 3 else "")
    if queued and all(b.queue < job.queue for b in others):
        return f" for {names}, a higher queue than its {queue_name(job.queue)}"
    return f" for {names}, ahead of it in {sched.policy.name}'s order"


def _ran_again(old: _Seen, job: Job) -> bool:
    """Running now and then, but a run ended in between (the simulator's free checkpoints)."""
    return old.state is JobState.RUNNING and job.restarts > old.restarts
