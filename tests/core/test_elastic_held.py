"""An elastic job is resized only once its runtime confirmed it keeps its global batch
(``resizable: true``, ``events.Release``): until then it runs rigid at the size of its first
run, so a script that never reports trains with the batch it started with."""

from __future__ import annotations

from coordinator.core import events
from coordinator.core.history import Timeline
from coordinator.core.model import ExitOutcome, JobSpec, Preempt
from coordinator.core.scheduler import Scheduler
from tests.core.test_elastic import elastic, sizes
from tests.core.test_scheduler import preempted, sched, settle, started


def beside_a_rigid_job(**config: object) -> Scheduler:
    """``e`` (2:8) started on the 4 GPUs a rigid job leaves, then that job ended."""
    s = sched(gpus=(8,), **config)
    s.submit(JobSpec("r", 4, 0, 100.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 2, 8, 1), 1)
    assert sizes(settle(s, 1)) == {"e": 4}  # its first run: any size in its range
    s.exited("r", 10, ExitOutcome.COMPLETED)
    return s


def test_it_does_not_grow_before_its_runtime_confirms() -> None:
    s = beside_a_rigid_job()
    assert settle(s, 10) == []  # 4 GPUs free, nobody waits: a confirmed job would grow
    assert (s.job("e").gpus, s.job("e").held) == (4, (2, 8))
    s.apply(events.Release("e", 20))
    d = settle(s, 20)
    assert next(x for x in d if isinstance(x, Preempt)).stop.size == 8
    assert sizes(d) == {"e": 8}


def test_it_is_preempted_whole_and_restarts_at_its_size_before_it_confirms() -> None:
    s = sched(gpus=(8,), queue_thresholds=(10.0,))
    s.submit(elastic("e", 2, 8), 0)
    assert sizes(settle(s, 0)) == {"e": 8}
    s.submit(JobSpec("j7", 4, 5, 100.0), 5)  # e is down a queue: j7 ranks ahead
    d = settle(s, 5)
    assert next(x for x in d if isinstance(x, Preempt)).stop.size is None  # not shrunk to 4
    assert sizes(d) == {"j7": 4}
    s.exited("j7", 50, ExitOutcome.COMPLETED)
    assert sizes(settle(s, 50)) == {"e": 8}  # the size of its first run, not any that fits


def test_a_report_of_a_run_that_ended_releases_nothing() -> None:
    s = beside_a_rigid_job(queue_thresholds=(10.0,))
    s.submit(JobSpec("w", 8, 11, 100.0), 11)  # e is down a queue: w ranks ahead
    d = settle(s, 11)
    assert preempted(d) == ["e"] and started(d) == ["w"]
    s.apply(events.Release("e", 12))  # a late report: e waits
    assert s.job("e").held == (2, 8) and not s.job("e").resizable


def test_pinned_while_held_it_stays_rigid_for_good() -> None:
    s = beside_a_rigid_job()
    s.apply(events.Pin("e", 10))
    s.apply(events.Release("e", 11))
    assert settle(s, 11) == []
    assert (s.job("e").spec.gpus, s.job("e").spec.min_gpus, s.job("e").held) == (4, None, None)


def test_the_hold_survives_a_snapshot_and_an_old_snapshot_reads() -> None:
    s = beside_a_rigid_job()
    state = s.export_state()
    back = Scheduler.from_state(state)
    assert settle(back, 10) == []
    back.apply(events.Release("e", 20))
    assert sizes(settle(back, 20)) == {"e": 8}
    for job in state["jobs"]:  # written before the hold: no such fields
        del job["held"], job["resizable"]
    old = Scheduler.from_state(state).job("e")
    assert (old.held, old.resizable, old.gpus) == (None, False, 4)


def test_its_history_says_it_is_held_until_its_runtime_confirms() -> None:
    s = sched(gpus=(8,))
    timeline = Timeline()
    s.submit(JobSpec("r", 4, 0, 100.0), 0)
    settle(s, 0)
    timeline.observe(s, 0)
    s.submit(elastic("e", 2, 8, 1), 1)
    settle(s, 1)
    said = [e.text for e in timeline.observe(s, 1) if e.job_id == "e"]
    assert said[-1] == (
        "started on 4 of 8 GPUs, n0:4,5,6,7; held at 4 until its runtime confirms it can resize"
    )
