"""Per-group learned service (``SchedulerConfig.service_groups``): waiting jobs ranked by
what completed jobs like them needed, learned from finished jobs only."""

from __future__ import annotations

import json
import statistics

import pytest

from coordinator.core.events import Exited, Schedule, Submit
from coordinator.core.gittins import ServiceGroups
from coordinator.core.model import CoreError, ExitOutcome, Job, JobSpec, Node, Start
from coordinator.core.scheduler import Scheduler
from coordinator.core.settings import Settings, build_scheduler
from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import SimOptions, run


def _two_users() -> list[JobSpec]:
    """One GPU; every 5,000 s a burst of three long jobs (user b, 1,000 s each) then three
    short ones (user a, 20 s). The jobs never reach the threshold, so only the order inside
    queue 0 differs between policies."""
    specs = []
    for i in range(30):
        t = 5000.0 * i
        specs += [JobSpec(f"b{i}.{k}", 1, t + k, 1000.0, user="b") for k in range(3)]
        specs += [JobSpec(f"a{i}.{k}", 1, t + 3 + k, 20.0, user="a") for k in range(3)]
    return specs


def _avg_jct(policy: str, **options: object) -> float:
    result = run(_two_users(), cluster_from_shape("1x1"), policy, SimOptions.of(**options))
    return statistics.fmean(j.jct for j in result.jobs)


def test_per_user_history_beats_fifo_and_global_gittins() -> None:
    """Global history cannot tell a fresh short job from a fresh long one (same index), so
    both FIFO and tiresias-g's global Gittins serve the bursts in arrival order; the users'
    own histories put user a's short jobs first (tiresias-g's index also preempts a running
    long job for them)."""
    fifo = _avg_jct("tiresias-l", thresholds=(1e6,))
    global_gittins = _avg_jct("tiresias-g", thresholds=(1e6,))
    grouped = _avg_jct("tiresias-l", thresholds=(1e6,), service_groups=("user",))
    assert grouped < 0.75 * min(fifo, global_gittins), (grouped, fifo, global_gittins)
    grouped_gittins = _avg_jct("tiresias-g", thresholds=(1e6,), service_groups=("user",))
    assert grouped_gittins < 0.75 * global_gittins, (grouped_gittins, global_gittins)


def test_groups_learn_from_finished_jobs_only_and_fall_back_to_everyone() -> None:
    """A group ranks its jobs once it has GROUP_MIN_SAMPLES completed jobs; before that the
    distribution of all completed jobs does; a job's own (unknown) duration never counts."""
    groups = ServiceGroups(("user",), min_samples=2)
    short = Job(JobSpec("s", 1, 0.0, duration=1.0, user="a"))
    assert groups.distribution(short) == ((), groups.everyone)
    for i, service in enumerate((10.0, 10.0)):
        groups.learn(Job(JobSpec(f"a{i}", 1, 0.0, user="a")), service)
    for i in range(3):
        groups.learn(Job(JobSpec(f"b{i}", 1, 0.0, user="b")), 1000.0)
    level, dist = groups.distribution(short)
    assert level == ("a",) and dist.samples == [10.0, 10.0]
    fresh_b = Job(JobSpec("x", 1, 0.0, duration=1.0, user="b"))  # short, but b's are long
    assert groups.index(short) > groups.index(fresh_b)


def test_batches_split_by_time_and_survive_a_restore() -> None:
    """A batch is a group's jobs submitted within BATCH_SPAN of its first one; the batch
    bookkeeping and learned groups are part of the policy's snapshot."""
    settings = Settings(queue_thresholds=(1e6,), service_groups=("user", "batch"))
    sched = build_scheduler(settings, [Node("n", (0,))])
    for job_id, at in (("j1", 0.0), ("j2", 10.0)):
        sched.apply(Submit(JobSpec(job_id, 1, at, user="u"), at))
    (start,) = sched.apply(Schedule(10.0))
    assert isinstance(start, Start) and start.job_id == "j1"
    sched.apply(Exited("j1", 30.0, ExitOutcome.COMPLETED))
    sched.apply(Submit(JobSpec("j3", 1, 5000.0, user="u"), 5000.0))
    groups = sched.policy._groups  # type: ignore[attr-defined]
    batches = [groups.levels(sched.job(j))[0] for j in ("j2", "j3")]
    assert batches == [("u", 0.0), ("u", 5000.0)]
    state = json.loads(json.dumps(sched.export_state()))
    restored = Scheduler.from_state(state, settings.make_policy(), settings.make_placement())
    assert restored.export_state() == state
    again = restored.policy._groups  # type: ignore[attr-defined]
    assert again.levels(restored.job("j2"))[0] == ("u", 0.0)
    assert len(again.everyone) == 1


def test_bad_service_groups_are_refused() -> None:
    with pytest.raises(CoreError, match="service groups"):
        build_scheduler(Settings(service_groups=("colour",)))
    with pytest.raises(CoreError, match=r"distinct features.*got user, user"):
        build_scheduler(Settings(service_groups=("user", "user")))
    with pytest.raises(CoreError, match="running-first"):
        build_scheduler(Settings(service_groups=("user",), queue_order="first-start"))
