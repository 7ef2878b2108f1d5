"""Invariants on random workloads, for every policy and placement."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core import (
    PLACEMENT_NAMES,
    POLICY_NAMES,
    ExitOutcome,
    JobSpec,
    JobState,
    Node,
    Policy,
    Scheduler,
    SchedulerConfig,
    ServiceDistribution,
    make_placement,
    make_policy,
)
from coordinator.core.replay import Replay

SEED = [4.0, 8.0, 12.0, 40.0, 100.0]


def policy_of(name: str) -> Policy:
    if name == "tiresias-g":
        return make_policy(name, distribution=ServiceDistribution(SEED))
    if name in ("las", "gandiva"):
        return make_policy(name, quantum=3.0)
    return make_policy(name)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Node], list[JobSpec], SchedulerConfig, str]:
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    nodes = [Node(f"n{i}", tuple(range(g)), f"s{i % 2}") for i, g in enumerate(sizes)]
    total = sum(sizes)
    n = draw(st.integers(1, 10))
    specs = [
        JobSpec(
            f"j{i}",
            draw(st.integers(1, total)),
            float(draw(st.integers(0, 30))),
            float(draw(st.integers(1, 40))),
            draw(st.sampled_from([None, 0.2, 0.9])),
        )
        for i in range(n)
    ]
    config = SchedulerConfig(
        queue_thresholds=draw(st.sampled_from([(10.0,), (5.0, 30.0), (1000.0,)])),
        promote_knob=draw(st.sampled_from([float("inf"), 1.0, 4.0])),
        interval=draw(st.sampled_from([0.0, 0.0, 7.0])),
    )
    return nodes, specs, config, draw(st.sampled_from(PLACEMENT_NAMES))


def check_invariants(s: Scheduler) -> None:
    """Allocations of jobs holding GPUs are disjoint and give each job all its GPUs; with the
    free GPUs they are exactly the GPUs of the nodes that are up."""
    held: list[tuple[str, int]] = []
    for job in s.jobs():
        if job.state in (JobState.RUNNING, JobState.PREEMPTING):
            assert job.allocation is not None and job.allocation.count == job.gpus
            held += [(n, g) for n, gs in job.allocation.gpus for g in gs]
        else:
            assert job.allocation is None
    up = s.free_gpus()
    free = [(n, g) for n, gs in up.items() for g in gs]
    assert len(set(held)) == len(held) and not set(held) & set(free)
    held_up = [(n, g) for n, g in held if n in up]  # a failed node took its GPUs along
    assert len(held_up) + len(free) == s._gpus.capacity  # the GPUs a pass hands out


def run(
    nodes: list[Node],
    specs: list[JobSpec],
    config: SchedulerConfig,
    policy: str,
    placement: str,
    swap_at: int | None = None,
    on_step: Callable[[Scheduler], None] = check_invariants,
) -> tuple[Replay, list]:
    s = Scheduler(nodes, policy_of(policy), make_placement(placement), config)
    replay = Replay(s, specs)
    log = []
    for step in range(5000):
        if replay.done:
            return replay, log
        if step == swap_at:
            state = json.loads(json.dumps(replay.sched.export_state()))
            replay.sched = Scheduler.from_state(state, policy_of(policy), make_placement(placement))
        log.append((replay.now, replay.step()))
        on_step(replay.sched)
        sorted(
            replay.sched.policy.key(j, replay.now)
            for j in replay.sched.jobs()
            if not j.state.finished
        )  # every active job can be ranked (shells do)
    raise AssertionError("workload did not finish")


PROPS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("policy", POLICY_NAMES)
@PROPS
@given(w=workloads())
def test_random_workloads(policy: str, w: tuple) -> None:
    nodes, specs, config, placement = w
    replay, log = run(nodes, specs, config, policy, placement)
    for sp in specs:  # every job completes, no faster than its duration
        assert replay.sched.job(sp.job_id).state is JobState.COMPLETED
        assert replay.finish[sp.job_id] - sp.arrival >= sp.duration - 1e-9
    # same input, same output
    assert run(nodes, specs, config, policy, placement)[1] == log
    # a scheduler restored from its exported state makes the same decisions
    swap = len(log) // 2
    assert run(nodes, specs, config, policy, placement, swap_at=swap)[1] == log


@pytest.mark.parametrize("policy", [p for p in POLICY_NAMES if p != "tiresias-g"])
@PROPS
@given(w=workloads())
def test_incremental_orders_match_fresh_keys(policy: str, w: tuple) -> None:
    """After every pass the policy's incrementally kept orders equal a full re-sort of every
    candidate's key at that time: timers and tick re-filing (Gandiva slices, LAS with an
    interval, queue crossings) never leave a stale key behind. (tiresias-g is left out: it
    skips the index of running jobs whose place cannot matter.)"""
    nodes, specs, config, placement = w
    s = Scheduler(nodes, policy_of(policy), make_placement(placement), config)
    replay = Replay(s, specs)
    while not replay.done:
        now = replay.now
        replay.step()
        p = s.policy
        active = [j for j in s.jobs() if not j.state.finished]
        waiting = sorted(p.key(j, now) for j in active if j.state is JobState.WAITING)
        assert p.waiting_order() == waiting
        if p.preemptive:
            keys, gpus = p.running_order(now)
            running = [j for j in active if j.state is JobState.RUNNING]
            assert keys == sorted(p.key(j, now) for j in running)
            assert gpus == [p.job(k).gpus for k in keys]


@pytest.mark.parametrize("policy", POLICY_NAMES)
@settings(max_examples=20, deadline=None)
@given(gpus=st.integers(1, 4), arrival=st.integers(0, 50), duration=st.integers(1, 10**5))
def test_lone_job_runs_uninterrupted(policy: str, gpus: int, arrival: int, duration: int) -> None:
    specs = [JobSpec("only", gpus, float(arrival), float(duration))]
    replay, _ = run(
        [Node("n", (0, 1, 2, 3))], specs, SchedulerConfig(promote_knob=1.0), policy, "consolidate"
    )
    assert replay.finish["only"] - arrival == duration
    assert replay.sched.job("only").preemptions == 0


@pytest.mark.parametrize("policy", ["tiresias-l", "las", "yarn-cs", "gandiva"])
@PROPS
@given(
    w=workloads(), failures=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2)), max_size=4)
)
def test_node_failures(policy: str, w: tuple, failures: list[tuple[int, int]]) -> None:
    """Nodes fail between steps and come back at once (after the shell has reported the
    affected jobs LOST); GPUs stay consistent and every job still completes."""
    nodes, specs, config, placement = w
    replay = Replay(Scheduler(nodes, policy_of(policy), make_placement(placement), config), specs)
    fail_at = {step: nodes[k % len(nodes)] for step, k in failures}
    for step in range(5000):
        if replay.done:
            break
        node = fail_at.get(step)
        if node is not None:
            s, now = replay.sched, replay.now
            for job_id in s.node_down(node.name, now):
                check_invariants(s)
                s.exited(job_id, now, ExitOutcome.LOST)
                assert s.job(job_id).restarts >= 1
            s.node_up(node, now)
        replay.step()
        check_invariants(replay.sched)
    assert replay.done
