"""The rules that size elastic jobs (coordinator.core.elastic): below its ask a job uses only
GPUs no selected job needs, and it grows back only while nobody waits, once its run has
paid for a restart, and by enough to be worth one."""

from __future__ import annotations

from coordinator.core.config import ELASTIC_PAYBACK
from coordinator.core.explain import explain
from coordinator.core.history import Timeline
from coordinator.core.model import ExitOutcome, JobSpec, Preempt, Start
from coordinator.core.scheduler import Scheduler
from tests.core.test_elastic import elastic as ranged
from tests.core.test_elastic import settle, sizes
from tests.core.test_scheduler import preempted, sched, started

DONE = ExitOutcome.COMPLETED


def beside(*rigid: JobSpec) -> tuple[Scheduler, int]:
    """8 GPUs, the ``rigid`` jobs started at 0, then e (2 to 8 GPUs) at 1: the scheduler
    and the GPUs e started on (0: it waits)."""
    s = sched(gpus=(8,))
    for spec in rigid:
        s.submit(spec, 0)
    settle(s, 0)
    s.submit(ranged("e", 2, 8, 1), 1)
    return s, sizes(settle(s, 1)).get("e", 0)


def test_below_its_ask_it_yields_to_a_job_ranked_below_it() -> None:
    """e runs on 4 of 8 (a rigid e would wait): w, ranked below it (its queue runs
    running jobs first), takes 2 of them at once, as it would have beside a waiting e."""
    s, size = beside(JobSpec("r", 4, 0, 100.0))
    assert size == 4
    timeline = Timeline()
    timeline.observe(s, 1)
    s.submit(JobSpec("w", 2, 5, 100.0), 5)
    d = settle(s, 5)
    stop = next(x for x in d if isinstance(x, Preempt)).stop
    assert (stop.size, stop.for_jobs) == (2, ("w",))
    assert sizes(d) == {"w": 2, "e": 2}
    said = [e.text for e in timeline.observe(s, 5) if e.job_id == "e"]
    assert said[0] == "shrunk to 2 for w"


def test_below_its_minimum_it_yields_whole_and_says_why() -> None:
    s, size = beside(JobSpec("r", 6, 0, 100.0))
    assert size == 2
    timeline = Timeline()
    timeline.observe(s, 1)
    s.submit(JobSpec("w", 1, 5, 100.0), 5)
    d = settle(s, 5)
    assert (preempted(d), started(d)) == (["e"], ["w"])
    said = [e.text for e in timeline.observe(s, 5) if e.job_id == "e"]
    assert (
        said[0] == "preempted for w (Q1): below its ask, it runs only on GPUs no selected job needs"
    )


def test_at_its_ask_it_keeps_its_gpus_as_a_rigid_job() -> None:
    s = sched(gpus=(8,))
    s.submit(ranged("e", 2, 8), 0)
    assert sizes(settle(s, 0)) == {"e": 8}
    s.submit(JobSpec("w", 2, 5, 100.0), 5)  # ranked below e: it waits, as for a rigid e
    assert settle(s, 5) == []


def test_it_grows_only_while_nobody_waits() -> None:
    s, size = beside(JobSpec("r1", 4, 0, 1000.0), JobSpec("r2", 2, 0, 100.0))
    assert size == 2
    s.submit(JobSpec("w", 6, 2, 100.0), 2)  # does not fit beside r1: it waits
    assert settle(s, 2) == []
    s.exited("r2", 100, DONE)
    assert settle(s, 100) == []  # 2 GPUs free, but w waits for them
    s.cancel("w", 101)
    d = settle(s, 101)
    assert preempted(d) == ["e"] and sizes(d) == {"e": 4}


def test_a_growth_waits_until_the_run_paid_for_its_restart() -> None:
    s, _ = beside(JobSpec("r", 4, 0, 100.0))
    s.update_costs("e", 10.0, 10.0)  # a restart costs 20 s: it grows after 200 s of run
    s.exited("r", 100, DONE)
    assert settle(s, 100) == []
    assert s.next_wakeup(100) == 1 + ELASTIC_PAYBACK * 20  # run since 1: a pass then
    d = settle(s, 1 + ELASTIC_PAYBACK * 20)
    assert preempted(d) == ["e"] and sizes(d) == {"e": 8}


def test_it_grows_by_half_its_size_again_or_to_its_ask() -> None:
    s, size = beside(JobSpec("r1", 1, 0, 100.0), JobSpec("r2", 3, 0, 200.0))
    assert size == 4
    s.exited("r1", 100, DONE)
    assert settle(s, 100) == []  # 4 → 5 is not worth a restart
    s.exited("r2", 200, DONE)
    d = settle(s, 200)
    assert preempted(d) == ["e"] and sizes(d) == {"e": 8}


def test_its_pending_reason_counts_the_gpus_it_starts_on() -> None:
    s, size = beside(JobSpec("r", 8, 0, 100.0))
    assert size == 0
    pending = explain(s, 1)["e"]
    assert pending.gpus == 2
    assert pending.text.startswith("waiting for 2 of its 2 to 8 GPUs (0 free)")
    assert not any(isinstance(d, Start) for d in settle(s, 2))
