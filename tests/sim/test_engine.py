"""The simulation loop over the real core: exact event times, preemption and packing costs,
determinism, and invariants on random traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core import POLICY_NAMES
from coordinator.core.model import JobSpec, Preempt, Start
from coordinator.sim import engine
from coordinator.sim.cluster import cluster_from_shape
from coordinator.sim.engine import SimResult, simulate
from coordinator.sim.profiles import PROFILES, profile
from coordinator.sim.traces import load_trace, resolve_trace

PHILLY = resolve_trace("philly")


def spec(
    job_id: str, gpus: int, arrival: float, duration: float, model: str | None = None
) -> JobSpec:
    known = profile(model)
    return JobSpec(job_id, gpus, arrival, duration, skew=known.skew if known else None, model=model)


def jct(result: SimResult, job_id: str) -> float:
    return next(j.jct for j in result.jobs if j.job_id == job_id)


def test_srtf_preemption_exact_times() -> None:
    """B (2 s) arrives while A (10 s) runs on the only GPU: SRTF preempts A at t=1."""
    jobs = [spec("a", 1, 0.0, 10.0), spec("b", 1, 1.0, 2.0)]
    free = simulate(jobs, cluster_from_shape("1x1"), "srtf")
    assert (jct(free, "a"), jct(free, "b")) == (12.0, 2.0)
    assert [j.preemptions for j in free.jobs] == [1, 0]
    assert free.jobs[0].queueing == 2.0  # waited while b ran
    assert free.utilization == 1.0


def test_preempt_cost_holds_gpus_and_delays_resume() -> None:
    """Checkpoint 0.5 s keeps the GPU busy (b starts at 1.5); restore 0.5 s adds to a's run."""
    jobs = [spec("a", 1, 0.0, 10.0), spec("b", 1, 1.0, 2.0)]
    costly = simulate(
        jobs, cluster_from_shape("1x1"), "srtf", preempt_cost=0.5, keep_decisions=True
    )
    starts = [(t, d.job_id) for t, d in costly.decisions if isinstance(d, Start)]
    assert starts == [(0.0, "a"), (1.5, "b"), (3.5, "a")]
    assert costly.events == 5  # 2 arrivals, 1 checkpoint end, 2 completions
    assert (jct(costly, "a"), jct(costly, "b")) == (13.0, 2.5)


def test_model_preempt_cost_uses_profile() -> None:
    vgg = PROFILES["vgg16"]
    jobs = [spec("a", 1, 0.0, 100.0, "vgg16"), spec("b", 1, 1.0, 2.0, "vgg16")]
    result = simulate(jobs, cluster_from_shape("1x1"), "srtf", preempt_cost="model")
    assert jct(result, "a") == pytest.approx(102.0 + vgg.checkpoint_s + vgg.restore_s)


def test_packing_slowdown_only_for_skewed_jobs_across_machines() -> None:
    jobs = [spec("vgg", 4, 0.0, 10.0, "vgg16"), spec("resnet", 4, 0.0, 10.0, "resnet50")]
    nodes = cluster_from_shape("2x2")  # 4 GPUs need both machines
    slow = simulate(
        jobs,
        nodes,
        "tiresias-l",
        packing_slowdown=2.0,
        packlimit=0.5,
    )
    assert sorted((j.job_id, j.finish - j.first_start) for j in slow.jobs) == [
        ("resnet", 10.0),
        ("vgg", 20.0),
    ]
    one_machine = simulate(
        jobs, cluster_from_shape("1x4"), "tiresias-l", packing_slowdown=2.0, packlimit=0.5
    )
    assert {j.finish - j.first_start for j in one_machine.jobs} == {10.0}


def test_oversize_job_is_skipped_and_counted() -> None:
    jobs = [spec("big", 5, 0.0, 1.0), spec("ok", 4, 0.0, 1.0)]
    ticks: list[int] = []
    result = simulate(jobs, cluster_from_shape("1x4"), "tiresias-l", progress=ticks.append)
    assert sum(ticks) == 2  # the progress bar reaches its total
    assert [j.job_id for j in result.jobs] == ["ok"]
    assert [job_id for job_id, _ in result.skipped] == ["big"]


def test_needs_durations() -> None:
    with pytest.raises(ValueError, match="true duration"):
        simulate([JobSpec("x", 1, 0.0)], cluster_from_shape("1x1"), "tiresias-l")


def test_deterministic() -> None:
    specs = load_trace(Path(__file__).resolve().parents[2] / "examples/traces/figure7.csv").specs
    runs = [
        simulate(specs, cluster_from_shape("1x2"), "las", interval=1.0, keep_decisions=True)
        for _ in range(2)
    ]
    assert runs[0].decisions and runs[0].decisions == runs[1].decisions
    assert [(j.job_id, j.finish) for j in runs[0].jobs] == [
        (j.job_id, j.finish) for j in runs[1].jobs
    ]


jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from([1, 1, 1, 2, 4, 8]),
        st.integers(0, 500),  # arrival
        st.integers(0, 2000),  # duration
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure reproduces
    suppress_health_check=[HealthCheck.too_slow],
)
@given(rows=jobs_strategy, policy=st.sampled_from(POLICY_NAMES), cost=st.sampled_from([None, 3.0]))
def test_every_job_completes_and_jct_covers_duration(
    rows: list[tuple[int, int, int]], policy: str, cost: float | None
) -> None:
    specs = [spec(str(i), g, float(a), float(d)) for i, (g, a, d) in enumerate(rows)]
    result = simulate(specs, cluster_from_shape("2x4"), policy, preempt_cost=cost)
    assert sorted(j.job_id for j in result.jobs) == sorted(s.job_id for s in specs)
    for j in result.jobs:
        assert j.first_start is not None and j.first_start >= j.arrival
        assert j.jct >= j.duration - 1e-6
        assert 0.0 <= j.queueing <= j.jct - j.duration + 1e-6
    assert result.utilization <= 1.0 + 1e-9


def test_philly_slice_tiresias_beats_fifo_like_baseline() -> None:
    specs = load_trace(PHILLY, limit=1500).specs
    nodes = cluster_from_shape("4x8")
    las = simulate(specs, nodes, "tiresias-l")
    yarn = simulate(specs, nodes, "yarn-cs")
    assert len(las.jobs) == len(yarn.jobs) == len(specs) - len(las.skipped)
    assert sum(j.jct for j in las.jobs) < sum(j.jct for j in yarn.jobs)


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@pytest.mark.slow  # a whole-trace replay (about 20 s)
@given(rows=jobs_strategy, policy=st.sampled_from(POLICY_NAMES))
def test_a_pass_without_preemptions_leaves_nothing_to_do(
    rows: list[tuple[int, int, int]], policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop skips the confirming pass after a pass that only started jobs; check that
    such a pass would indeed have returned nothing."""
    real = engine.build_scheduler

    def checked(*args: object) -> object:
        sched = real(*args)  # type: ignore[arg-type]
        schedule = sched.schedule

        def twice(now: float) -> list:
            decisions = schedule(now)
            if not any(isinstance(d, Preempt) for d in decisions):
                assert schedule(now) == []
            return decisions

        sched.schedule = twice  # type: ignore[method-assign]
        return sched

    monkeypatch.setattr(engine, "build_scheduler", checked)
    specs = [spec(str(i), g, float(a), float(d)) for i, (g, a, d) in enumerate(rows)]
    assert len(simulate(specs, cluster_from_shape("2x4"), policy).jobs) == len(specs)
