"""The simulator's elastic jobs: a seeded share made elastic, Amdahl-style speed on fewer
GPUs than asked, resizes counted and paid like preemptions."""

from __future__ import annotations

import pytest

from coordinator.core.model import JobSpec
from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import ELASTIC_ALPHA, SimOptions, amdahl, elastic_specs, simulate


def test_a_job_started_on_fewer_gpus_trains_slower_and_grows_when_they_free() -> None:
    jobs = [JobSpec("a", 4, 0.0, 100.0), JobSpec("b", 8, 0.0, 100.0, min_gpus=2)]
    result = simulate(jobs, cluster_from_shape("1x8"), "tiresias-l")
    b = next(j for j in result.jobs if j.job_id == "b")
    done = 100.0 * amdahl(4, ELASTIC_ALPHA) / amdahl(8, ELASTIC_ALPHA)  # by a's end, on 4
    assert b.finish == pytest.approx(100.0 + (100.0 - done))  # then on all 8
    assert (b.resizes, b.preemptions) == (1, 1)
    # GPUs held: a 4 × 100, b 4 × 100 then 8 × the rest
    assert result.busy_gpu_seconds == pytest.approx(800.0 + 8 * (100.0 - done))


def test_a_resize_pays_the_checkpoint_and_restore_a_preemption_pays() -> None:
    # a runs long enough for b's growth to pay its restart (elastic_payback) either way
    jobs = [JobSpec("a", 4, 0.0, 300.0), JobSpec("b", 8, 0.0, 1000.0, min_gpus=2)]
    free = simulate(jobs, cluster_from_shape("1x8"), "tiresias-l")
    paid = simulate(jobs, cluster_from_shape("1x8"), "tiresias-l", preempt_cost=10.0)
    finish = {r.job_id: r.finish for r in paid.jobs}
    assert finish["b"] == pytest.approx(next(r.finish for r in free.jobs if r.job_id == "b") + 20)


def test_the_elastic_share_is_seeded_and_leaves_one_gpu_jobs_rigid() -> None:
    specs = [JobSpec(f"j{i}", 1 + i % 8, float(i), 10.0) for i in range(400)]
    options = SimOptions.of(elastic_fraction=0.5, elastic_seed=3)
    made = elastic_specs(specs, options)
    assert made == elastic_specs(specs, options)
    elastic = [s for s in made if s.min_gpus is not None]
    assert all(s.gpus > 1 and s.min_gpus == max(1, s.gpus // 4) for s in elastic)
    assert 0.4 < len(elastic) / sum(s.gpus > 1 for s in specs) < 0.6
    assert elastic_specs(specs, SimOptions()) == specs
