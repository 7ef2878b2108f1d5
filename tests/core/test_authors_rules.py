"""tiresias-l/-g under the authors' rules (coordinator.core.authors_rules): their demotion
timing, their list order and their Gittins step ranks, on cases worked out by hand."""

from __future__ import annotations

import pytest

from coordinator.core.authors_rules import StepRanks
from coordinator.core.model import CoreError, JobSpec, Preempt, Start
from coordinator.core.settings import Settings, build_scheduler
from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import simulate

THEIRS = (3250.0, 7200.0)


def authors(rules: str = "authors", policy: str = "tiresias-l", **kw: object):
    settings = Settings(policy=policy, rules=rules, queue_thresholds=THEIRS, **kw)  # type: ignore[arg-type]
    return build_scheduler(settings, cluster_from_shape("1x8"))


def test_multi_gpu_demotion_waits_for_the_mixed_unit_wakeup() -> None:
    """An 8-GPU job reaches 3,250 GPU-s at 406.25 s. The authors' wakeup is (3,250 - t_J) /
    W_J whole seconds after each event: at 406 it has 3,248 GPU-s (not demoted), the next is
    (3,250 - 406) // 8 = 355 s later, at 761, where it is demoted. Exact demotion wakes at
    406.25."""
    s = authors()
    s.submit(JobSpec("a", 8, 0.0, 10_000.0), 0.0)
    s.schedule(0.0)
    assert s.next_wakeup(0.0) == 406.0
    s.schedule(406.0)
    assert s.job("a").queue == 0
    assert s.next_wakeup(406.0) == 761.0
    s.schedule(761.0)
    assert s.job("a").queue == 1
    exact = authors("authors-exact-demotion")
    exact.submit(JobSpec("a", 8, 0.0, 10_000.0), 0.0)
    exact.schedule(0.0)
    assert exact.next_wakeup(0.0) == 406.25


def test_list_order_running_jobs_keep_their_queue_and_a_demoted_job_joins_its_end() -> None:
    """b waits behind running a in queue 0 (no preemption inside a queue). When a is demoted
    at 761, b preempts it; b is demoted at 1,522 and joins the end of queue 1, behind a, which
    then preempts b although b is running."""
    s = authors()
    s.submit(JobSpec("a", 8, 0.0, 10_000.0), 0.0)
    s.schedule(0.0)
    s.submit(JobSpec("b", 8, 100.0, 10_000.0), 100.0)
    assert s.schedule(100.0) == []
    assert s.schedule(761.0) == [Preempt("a")]
    s.exited("a", 761.0, "checkpointed")
    assert [type(d) for d in s.schedule(761.0)] == [Start]
    assert s.next_wakeup(761.0) == 1167.0  # 761 + 3250 // 8
    s.schedule(1167.0)
    assert s.next_wakeup(1167.0) == 1522.0
    assert s.schedule(1522.0) == [Preempt("b")]


def test_a_preempted_runs_stale_completion_makes_no_instant() -> None:
    """The same two jobs through the simulator, a lasting 1,000 s: a's first run would have
    ended at 1,000, after b preempted it. Were that stale completion an instant, b's service
    would be checked there and b demoted at 1,376 instead of 1,522, and a would end 146 s
    sooner than the authors' simulator says."""
    jobs = [JobSpec("a", 8, 0.0, 1000.0), JobSpec("b", 8, 100.0, 5000.0)]
    r = simulate(jobs, cluster_from_shape("1x8"), "tiresias-l", rules="authors", thresholds=THEIRS)
    a = next(j for j in r.jobs if j.job_id == "a")
    assert a.finish == 1522.0 + (1000.0 - 761.0)


def test_step_ranks_by_hand() -> None:
    """Samples 10, 20, 30, 40 and Δ = 10: the rank of service a is that of (the next sample
    above a) - 1: P over the samples above it that end within Δ, E summing the samples
    themselves and Δ for the rest, in whole GPU-seconds rounded down; 0 past the last."""
    r = StepRanks([10, 20, 30, 40], 10)
    assert r.rank(0) == 25_000.0  # a = 9: P 1/4, E (10 + 3 × 10) // 4 = 10
    assert r.rank(10) == 25_640.7692  # a = 19: P 0.33333, E 40 // 3 = 13
    assert r.rank(25) == 25_000.0  # a = 29: P 1/2, E (30 + 10) // 2 = 20
    assert r.rank(39) == 0.0  # a = 39: the last sample is never counted as ending
    assert r.rank(40) == 0.0 and r.rank(10**9) == 0.0


def test_step_ranks_round_halves_up() -> None:
    """P = 1/64 = 0.015625 exactly: their rounding (half away from zero) gives 0.01563,
    round-half-even would give 0.01562."""
    r = StepRanks([*range(1, 64), 1000], 1)
    # a = 0: one of 64 samples ends within Δ = 1; E = (1 + 63 × 1) // 64 = 1
    assert r.rank(0) == 15_630.0


def test_tiresias_g_under_their_rules_needs_samples() -> None:
    with pytest.raises(CoreError, match="samples"):
        authors(policy="tiresias-g")
    with pytest.raises(CoreError, match="unknown rules"):
        Settings(rules="theirs")
