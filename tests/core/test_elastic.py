"""Elastic jobs (JobSpec.min_gpus): started at the largest size that fits, grown at a
checkpoint when GPUs are free and nobody ranked ahead waits, shrunk instead of preempted."""

from __future__ import annotations

import pytest

from coordinator.core import events
from coordinator.core.history import Timeline
from coordinator.core.model import CoreError, ExitOutcome, JobSpec, Preempt, Start
from coordinator.core.scheduler import Scheduler
from tests.core.test_scheduler import preempted, sched, started
from tests.core.test_scheduler import settle as passes

CP = ExitOutcome.CHECKPOINTED


def elastic(job_id: str, lo: int, hi: int, arrival: float = 0.0) -> JobSpec:
    return JobSpec(job_id, hi, arrival, 100.0, min_gpus=lo)


def settle(s: Scheduler, now: float) -> list:
    """``passes`` at ``now``, each elastic run started confirmed by its runtime at once
    (``resizable: true`` in its first report, as ``tiresias.State`` sends it)."""
    out = passes(s, now)
    for d in out:
        if isinstance(d, Start) and s.job(d.job_id).state.value == "running":
            s.apply(events.Release(d.job_id, now))
    return out


def sizes(decisions: list) -> dict[str, int]:
    return {d.job_id: d.allocation.count for d in decisions if isinstance(d, Start)}


def test_a_range_outside_one_to_its_maximum_is_refused() -> None:
    s = sched(gpus=(4,))
    with pytest.raises(CoreError, match="1 <= minimum <= maximum"):
        s.submit(elastic("e", 5, 4), 0)
    with pytest.raises(CoreError, match="1 <= minimum <= maximum"):
        s.submit(elastic("e", 0, 4), 0)


def test_it_starts_on_the_gpus_that_fit_and_grows_when_they_free() -> None:
    s = sched(gpus=(8,))
    s.submit(JobSpec("r", 4, 0, 100.0), 0)
    assert started(settle(s, 0)) == ["r"]
    s.submit(elastic("e", 2, 8, 1), 1)
    d = settle(s, 1)
    assert sizes(d) == {"e": 4}  # 4 of 8: a rigid job of 8 would wait
    s.exited("r", 10, ExitOutcome.COMPLETED)
    d = settle(s, 10)
    assert preempted(d) == ["e"]
    grow = next(x for x in d if isinstance(x, Preempt))
    assert grow.stop.size == 8
    assert sizes(d) == {"e": 8}
    assert s.job("e").restarts == 1


def test_attained_service_counts_the_gpus_it_held() -> None:
    s = sched(gpus=(8,))
    s.submit(JobSpec("r", 6, 0, 100.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 1, 8, 0), 0)
    settle(s, 0)
    assert s.job("e").gpus == 2
    assert s.job("e").attained(10) == pytest.approx(20.0)
    s.exited("r", 10, ExitOutcome.COMPLETED)
    settle(s, 10)  # grows: 20 GPU-seconds carried into the run on 8
    job = s.job("e")
    assert job.gpus == 8 and job.attained(10) == pytest.approx(20.0)
    assert job.attained(11) == pytest.approx(28.0)


def test_it_is_shrunk_for_a_job_ranked_ahead_instead_of_preempted() -> None:
    s = sched(gpus=(8,), queue_thresholds=(10.0,))
    s.submit(elastic("e", 2, 8), 0)
    assert sizes(settle(s, 0)) == {"e": 8}
    s.submit(JobSpec("j7", 4, 5, 100.0), 5)  # e is down a queue: j7 ranks ahead
    d = settle(s, 5)
    stop = next(x for x in d if isinstance(x, Preempt)).stop
    assert stop.size == 4 and stop.for_jobs == ("j7",)
    assert sizes(d) == {"j7": 4, "e": 4}


def test_below_its_minimum_it_is_preempted_as_a_rigid_job_is() -> None:
    s = sched(gpus=(8,), queue_thresholds=(10.0,))
    s.submit(elastic("e", 6, 8), 0)
    settle(s, 0)
    s.submit(JobSpec("j7", 4, 5, 100.0), 5)
    d = settle(s, 5)
    assert next(x for x in d if isinstance(x, Preempt)).stop.size is None
    assert sizes(d) == {"j7": 4}


def test_the_minimum_run_guard_holds_off_a_resize() -> None:
    s = sched(gpus=(8,), min_run=60.0)
    s.submit(JobSpec("r", 4, 0, 100.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 2, 8, 1), 1)
    settle(s, 1)
    s.exited("r", 10, ExitOutcome.COMPLETED)
    assert settle(s, 10) == []  # inside its minimum run: not grown
    assert s.next_wakeup(10) == 61  # nobody waits, but the guard's end may let it grow
    assert preempted(settle(s, 61)) == ["e"]


def test_a_running_elastic_job_survives_a_snapshot() -> None:
    s = sched(gpus=(8,))
    s.submit(JobSpec("r", 5, 0, 100.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 1, 8), 0)
    settle(s, 0)
    back = Scheduler.from_state(s.export_state())
    job = back.job("e")
    assert (job.gpus, job.spec.min_gpus) == (2, 1)  # of 3 free: 2 divides 8, 3 does not
    assert job.attained(10) == s.job("e").attained(10)


def test_its_history_says_started_on_4_of_8_grew_and_shrunk_for_whom() -> None:
    s = sched(gpus=(8,), queue_thresholds=(10.0,))
    timeline = Timeline()
    said: list[str] = []

    def look(now: float) -> None:
        said.extend(e.text for e in timeline.observe(s, now) if e.job_id == "e")

    s.submit(JobSpec("r", 4, 0, 100.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 2, 8, 1), 1)
    settle(s, 1)
    look(1)
    s.exited("r", 10, ExitOutcome.COMPLETED)
    settle(s, 10)
    look(10)
    s.submit(JobSpec("j7", 6, 20, 100.0), 20)
    settle(s, 20)
    look(20)
    assert said[1:] == [
        "started on 4 of 8 GPUs, n0:4,5,6,7",
        "demoted to Q2: its service passed 10 GPU-s",
        "grew to 8",
        "restarted on n0:0,1,2,3,4,5,6,7 (restart 1)",
        "shrunk to 2 for j7",
        "restarted on 2 of 8 GPUs, n0:6,7 (restart 2)",
    ]


def test_a_pinned_job_keeps_its_service_and_never_resizes() -> None:
    """Its runtime cannot keep the global batch (``events.Pin``): it runs rigid on the GPUs
    of its run, with the attained service it had; a job not running is left as it is."""
    s = sched(gpus=(8,))
    s.submit(JobSpec("r", 6, 0, 100.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 2, 8, 1), 1)
    s.submit(elastic("w", 1, 8, 1), 1)
    settle(s, 1)
    assert s.apply(events.Pin("w", 2)) == [] and s.job("w").spec.min_gpus == 1  # waiting
    s.apply(events.Cancel("w", 2))
    assert s.job("e").gpus == 2
    s.apply(events.Pin("e", 5))
    job = s.job("e")
    assert (job.spec.gpus, job.spec.min_gpus, job.size) == (2, None, 0)
    assert job.attained(5) == pytest.approx(8.0)
    s.exited("r", 10, ExitOutcome.COMPLETED)
    assert preempted(settle(s, 10)) == []  # unpinned, it would grow to 8 here


def test_a_range_above_the_cluster_runs_on_what_there_is() -> None:
    """A 2:8 job on 4 GPUs is accepted and runs on 4; one whose fewest is above the cluster
    is refused as a rigid one is."""
    s = sched(gpus=(4,))
    s.submit(elastic("e", 2, 8), 0)
    assert sizes(settle(s, 0)) == {"e": 4}
    with pytest.raises(CoreError, match="job f asks for 5 GPUs but the cluster has 4"):
        s.submit(elastic("f", 5, 10), 0)


@pytest.mark.parametrize(("payback", "grown"), [(10.0, {}), (0.0, {"e": 4})])
def test_how_long_a_run_pays_for_its_growth_is_a_setting(payback: float, grown: dict) -> None:
    """``elastic_payback``: with restarts costing 5 s, a job that has run 20 s grows at the
    default (10 × 5 s) only later; at 0 it grows as soon as the GPUs free."""
    s = sched(gpus=(4,), elastic_payback=payback)
    s.submit(JobSpec("r", 2, 0, 100.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 2, 4, 1), 1)
    assert sizes(settle(s, 1)) == {"e": 2}
    s.update_costs("e", 2.0, 3.0)
    s.exited("r", 21, ExitOutcome.COMPLETED)
    assert sizes(settle(s, 21)) == grown


def test_it_runs_only_on_sizes_that_divide_its_maximum() -> None:
    """The runtime keeps the global batch only at a world that divides the top of the range
    (docs/launcher.md): a 2:8 job starts, shrinks and grows through 2, 4 and 8 only, and a
    3:4 one is a job of 4."""
    s = sched(gpus=(8,), queue_thresholds=(10.0,))
    s.submit(JobSpec("r2", 2, 0, 1000.0), 0)
    s.submit(JobSpec("r3", 3, 0, 1000.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 2, 8, 1), 1)
    s.submit(elastic("f", 3, 4, 1), 1)
    assert sizes(settle(s, 1)) == {"e": 2}  # 3 free: 2, not 3; f waits for its 4
    assert s.job("f").spec.smallest == 4
    s.exited("r3", 50, ExitOutcome.COMPLETED)  # 6 free: f starts, e stays at 2
    assert sizes(settle(s, 50)) == {"f": 4}
    s.exited("f", 60, ExitOutcome.COMPLETED)
    d = settle(s, 60)  # 4 free: e grows to 4, not 6
    assert sizes(d) == {"e": 4} and s.job("e").gpus == 4
    s.exited("r2", 70, ExitOutcome.COMPLETED)
    assert sizes(settle(s, 70)) == {"e": 8}
    s.submit(JobSpec("j7", 3, 80, 100.0), 80)  # e is down a queue: j7 ranks ahead
    d = settle(s, 80)
    assert next(x for x in d if isinstance(x, Preempt)).stop.size == 4  # 5 left: 4, not 5
    assert sizes(d) == {"j7": 3, "e": 4}


def test_the_queue_counts_a_waiting_one_by_the_gpus_it_would_start_on() -> None:
    """``Policy.waiting_per_queue`` (``tiresias queue``'s GPUs waiting) counts an elastic
    job by its fewest, as its pending reason does, not its full ask."""
    s = sched(gpus=(4,))
    s.submit(JobSpec("r", 4, 0, 100.0), 0)
    settle(s, 0)
    s.submit(elastic("e", 2, 8, 1), 1)
    s.submit(elastic("f", 3, 4, 1), 1)  # 3 does not divide 4: it starts on 4
    s.submit(JobSpec("w", 1, 1, 100.0), 1)
    settle(s, 1)
    assert dict(s.policy.waiting_per_queue()) == {0: [3, 2 + 4 + 1]}
