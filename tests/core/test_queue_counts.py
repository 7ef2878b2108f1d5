"""What the policy tracks as jobs change, against a walk of every job, for every policy,
through starts, preemptions, demotions, promotions, cancels, a node lost and back, and
exits: its waiting counts per queue and the jobs holding GPUs in each queue, in submission
order (what ``tiresias queue``'s first screen shows without walking the waiting or the
running jobs), and the jobs it says were touched, from which ``Timeline`` tells
each pass's events (the walk of every active job, kept here as the reference)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import (
    POLICY_NAMES,
    ExitOutcome,
    JobSpec,
    Node,
    Preempt,
    Scheduler,
    Start,
    events,
    make_policy,
)
from coordinator.core.explain import active_jobs, holding
from coordinator.core.history import _NEW, Event, Timeline, _changes, _seen
from coordinator.core.model import JobState

Jobs = list[tuple[int, float, int]]
jobs_strategy = st.lists(
    st.tuples(st.sampled_from((1, 2, 4, 8)), st.floats(10, 5000), st.integers(0, 4)),
    min_size=1,
    max_size=40,
)


def walked(s: Scheduler) -> dict[int, list[int]]:
    counts: dict[int, list[int]] = {}
    for job in s.jobs():
        if job.state is JobState.WAITING:
            q = counts.setdefault(job.queue, [0, 0])
            q[0] += 1
            q[1] += job.spec.smallest  # an elastic job: the GPUs it would start on
    return counts


def walked_holding(s: Scheduler) -> dict[int, tuple[int, int, list[str]]]:
    """Queue → (jobs running or being stopped, the GPUs they hold, their ids in submission
    order)."""
    counts: dict[int, tuple[int, int, list[str]]] = {}
    for job in s.jobs():  # submission order
        if job.state in (JobState.RUNNING, JobState.PREEMPTING):
            n, gpus, ids = counts.get(job.queue, (0, 0, []))
            assert job.allocation is not None
            counts[job.queue] = (n + 1, gpus + job.allocation.count, [*ids, job.job_id])
    return counts


class WalkedTimeline:
    """The reference: every active job compared with how it was last seen, at every look."""

    def __init__(self) -> None:
        self.seen: dict = {}

    def observe(self, sched: Scheduler, now: float) -> list[Event]:
        events: list[Event] = []
        active = active_jobs(sched)
        for job in active:
            old, cur = self.seen.get(job.job_id), _seen(job)
            if old != cur:
                if old is None:
                    events.append(Event(job.job_id, job.spec.arrival, "submitted", "submitted"))
                events += _changes(sched, old or _NEW, job, now, None)
                self.seen[job.job_id] = cur
        ids = {j.job_id for j in active}
        for job_id in [k for k in self.seen if k not in ids]:
            events += _changes(sched, self.seen.pop(job_id), sched.job(job_id), now, None)
        return events


def replay(policy: str, jobs: Jobs, look: Callable[[Scheduler, float], None]) -> None:
    """``jobs`` through a 2-node cluster, ``look`` after each pass; action 2 loses a node for
    a step, 1 cancels an earlier job, 3 and 4 let more time pass (3 makes an 8-GPU job
    elastic); a preempted job exits at the next step."""
    s = Scheduler([Node(f"n{i}", tuple(range(8))) for i in range(2)], make_policy(policy))
    running: dict[str, float] = {}  # started job → when it completes
    now = 0.0

    stopping: list[str] = []  # preempted, exiting at the next step (their GPUs still held)

    def schedule(now: float) -> None:
        for job_id in stopping:
            if s.job(job_id).state is JobState.PREEMPTING:  # not lost with a node meanwhile
                s.exited(job_id, now, ExitOutcome.CHECKPOINTED)
        stopping.clear()
        for d in s.schedule(now):
            if isinstance(d, Start):
                running[d.job_id] = now + (s.job(d.job_id).spec.duration or 0.0)
            elif isinstance(d, Preempt):
                running.pop(d.job_id, None)
                stopping.append(d.job_id)
        look(s, now)

    for n, (gpus, duration, action) in enumerate(jobs):
        least = 2 if gpus == 8 and action == 3 else None  # elastic: 2 to 8 GPUs
        s.submit(JobSpec(f"j{n}", gpus, arrival=now, duration=duration, min_gpus=least), now)
        if action == 1 and n:
            s.cancel(f"j{n // 2}", now)
        if action == 2:
            for job_id in s.node_down("n1", now):
                running.pop(job_id, None)
                s.exited(job_id, now, ExitOutcome.LOST)
        schedule(now)
        if action == 2:
            s.node_up(Node("n1", tuple(range(8))), now)
        now += 400.0 * (action + 1)  # across thresholds: demotions, promotions
        for job_id, done in sorted(running.items()):
            if done <= now and s.job(job_id).state is JobState.RUNNING:
                del running[job_id]
                s.exited(job_id, now, ExitOutcome.COMPLETED)
        schedule(now)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(POLICY_NAMES), jobs_strategy)
def test_waiting_counts_per_queue_follow_every_change(policy: str, jobs: Jobs) -> None:
    def look(s: Scheduler, now: float) -> None:
        assert dict(s.policy.waiting_per_queue()) == walked(s), policy

    replay(policy, jobs, look)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(POLICY_NAMES), jobs_strategy)
def test_holding_per_queue_follows_every_change(policy: str, jobs: Jobs) -> None:
    def look(s: Scheduler, now: float) -> None:
        held = holding(s)
        got = {q: (h.jobs, h.gpus, [k[-1] for k in h.order]) for q, h in held.items()}
        assert got == walked_holding(s), policy

    replay(policy, jobs, look)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(POLICY_NAMES), jobs_strategy, st.booleans())
def test_the_timeline_of_touched_jobs_tells_what_a_walk_tells(
    policy: str, jobs: Jobs, primed: bool
) -> None:
    timeline, reference = Timeline(), WalkedTimeline()
    told: list[list[Event]] = []

    def look(s: Scheduler, now: float) -> None:
        if primed and not told:  # as the service starts: the past is stored
            timeline.prime(s)
            reference.seen = {j.job_id: _seen(j) for j in active_jobs(s)}
        events = timeline.observe(s, now)
        assert events == reference.observe(s, now), policy
        told.append(events)

    replay(policy, jobs, look)
    assert any(told) or primed  # a look tells something


def test_a_stopping_elastic_job_counts_the_gpus_it_holds() -> None:
    """A cancelled elastic job is back at its ask (8) while it still holds the 4 it ran on."""
    s = Scheduler([Node("n0", tuple(range(8)))], make_policy("tiresias-l"))
    s.submit(JobSpec("j0", 4, arrival=0.0, duration=100.0), 0.0)
    s.submit(JobSpec("j1", 8, arrival=0.0, duration=100.0, min_gpus=2), 0.0)
    s.schedule(0.0)
    s.apply(events.Release("j1", 0.0))  # its runtime can resize: it runs on 4 of 2 to 8
    assert s.job("j1").gpus == 4
    holding(s)  # indexed from here on: the cancel re-files it
    s.cancel("j1", 1.0)
    assert s.job("j1").state is JobState.PREEMPTING and s.job("j1").gpus == 8
    held = holding(s)[0]
    assert (held.jobs, held.gpus) == (2, 8)
