"""Pending reasons and queue positions, read from the scheduler after a pass."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core import (
    POLICY_NAMES,
    ExitOutcome,
    JobSpec,
    JobState,
    Preempt,
    Scheduler,
    make_placement,
)
from coordinator.core.explain import duration_text, explain, explain_jobs
from coordinator.core.history import Event, Timeline
from coordinator.core.replay import Replay
from tests.core.test_properties import PROPS, policy_of, workloads
from tests.core.test_scheduler import sched as scheduler

CP = ExitOutcome.CHECKPOINTED


def sched(policy: str = "tiresias-l", gpus: tuple[int, ...] = (4,), **options: object) -> Scheduler:
    """test_scheduler's, on one 4-GPU node unless told otherwise."""
    return scheduler(policy, gpus, **options)  # type: ignore[arg-type]


def submit(s: Scheduler, job_id: str, gpus: int, now: float = 0.0, **spec: object) -> None:
    s.submit(JobSpec(job_id, gpus, now, **spec), now)  # type: ignore[arg-type]


def test_waiting_for_gpus_names_the_jobs_ahead_and_positions() -> None:
    s = sched()
    submit(s, "j1", 3)
    submit(s, "j2", 2)
    submit(s, "j3", 2)
    s.schedule(0.0)
    why = explain(s, 0.0)
    assert set(why) == {"j2", "j3"}
    assert (why["j2"].position, why["j2"].overall, why["j3"].position) == (1, 1, 2)
    assert why["j2"].reason == "gpus"
    assert why["j2"].text.startswith(
        "waiting for 2 GPUs (1 free): the 1 job ahead of it (Q1: 1) holds or needs 3 of 4"
    )
    # j3 is also behind j2, which takes its turn first once j1 is done
    assert (why["j3"].ahead, why["j3"].ahead_gpus) == (1, 3)
    assert why["j2"].to_dict()["free_gpus"] == 1


def test_demotion_preemption_and_release() -> None:
    """j1 is demoted to Q2 at 100 GPU-s; j2 of Q1 takes its GPUs: while j1 checkpoints j2
    waits for it; afterwards j1 waits in Q2, with a starvation promotion ahead."""
    s = sched(queue_thresholds=(100.0,), promote_knob=2.0)
    submit(s, "j1", 4)
    s.schedule(0.0)
    submit(s, "j2", 4, now=10.0)
    assert s.schedule(10.0) == []
    assert explain(s, 10.0)["j2"].reason == "gpus"
    assert s.schedule(25.0) == [Preempt("j1")]
    why = explain(s, 25.0)["j2"]
    assert (why.reason, why.text) == (
        "releasing",
        "its turn has come: waiting for j1 to checkpoint and free 4 GPUs",
    )
    s.exited("j1", 25.0, CP)
    s.schedule(25.0)
    j1 = explain(s, 85.0)["j1"]
    assert (j1.reason, j1.queue, j1.position) == ("gpus", 1, 1)
    assert j1.promotion_at == 25.0 + 2.0 * 25.0
    assert "in Q2 since its service passed 100 GPU-s (100 GPU-s attained)" in j1.text
    assert "preempted 1m ago" in j1.text
    assert j1.text.endswith("starvation promotion to Q1 in 0s")


def test_a_node_down_leaves_the_cluster_too_small() -> None:
    s = sched(gpus=(2, 2))
    submit(s, "j1", 4)
    s.schedule(0.0)
    assert s.node_down("n1", 5.0) == ["j1"]
    s.exited("j1", 5.0, ExitOutcome.LOST)
    s.schedule(5.0)
    why = explain(s, 5.0)["j1"]
    assert why.reason == "nodes"
    assert why.text.startswith("needs 4 GPUs but the nodes that are up have 2")
    assert "stopped 0s ago" in why.text  # lost, not preempted


@pytest.mark.parametrize(
    ("policy", "j5", "j6"), [("yarn-cs", "placement", "blocked"), ("sf", "placement", "gpus")]
)
def test_strict_placement_and_head_of_line_blocking(policy: str, j5: str, j6: str) -> None:
    """Two nodes with one free GPU each: a 2-GPU job needs them on one node under yarn's
    placement; yarn-cs then blocks the 1-GPU job behind it, sf lets it wait for GPUs only
    when none are left."""
    s = sched(policy, gpus=(2, 2), placement="yarn")
    for job_id, g in (("j1", 1), ("j2", 2), ("j3", 1)):
        submit(s, job_id, g)
    s.schedule(0.0)
    s.exited("j2", 1.0, ExitOutcome.COMPLETED)
    submit(s, "j4", 1, now=1.0)
    s.schedule(1.0)
    s.exited("j1", 2.0, ExitOutcome.COMPLETED)
    submit(s, "j5", 2, now=2.0)
    submit(s, "j6", 3, now=2.0)
    s.schedule(2.0)
    why = explain(s, 2.0)
    assert why["j5"].reason == j5
    assert why["j5"].text == "needs 2 GPUs on one node; the largest free block is 1"
    assert why["j6"].reason == j6
    if j6 == "blocked":
        assert why["j6"].text == "behind j5, which cannot start yet (yarn-cs starts jobs in order)"
    else:
        assert why["j6"].text == "waiting for 3 GPUs (2 free): 2 running jobs hold 2 of 4"


def test_before_a_pass_a_job_that_fits_starts_at_the_next_pass() -> None:
    s = sched(placement="skew")
    submit(s, "j1", 2, skew=0.9)
    why = explain(s, 0.0)["j1"]
    assert why.reason == "next-pass"
    assert why.text == (
        "starts at the next scheduling pass; it will be consolidated (skew 0.90 > PACKLIMIT 0.50)"
    )


def test_a_job_no_node_can_hold_is_told_it_will_be_spread() -> None:
    """4 GPUs on 2x2 nodes cannot be consolidated: the words say what the placement does."""
    s = sched(placement="skew", gpus=(2, 2))
    submit(s, "j1", 4, skew=0.9)
    submit(s, "j2", 2)
    assert explain(s, 0.0)["j1"].text.endswith("it will be spread: no node has 4 GPUs")
    assert explain(s, 0.0)["j2"].text.endswith("it will be consolidated (skew not measured yet)")


def test_minimum_run_time_and_non_checkpointable_jobs_are_named() -> None:
    s = sched(queue_thresholds=(100.0,), min_run=300.0)
    submit(s, "j1", 2)
    submit(s, "j2", 2)
    s.schedule(0.0)
    submit(s, "j3", 4, now=1.0)
    s.schedule(60.0)  # j1 and j2 are in Q2 now, but j3 (Q1) may not take their GPUs yet
    why = explain(s, 60.0)["j3"]
    assert (why.reason, why.text) == (
        "gpus",
        "waiting for 4 GPUs (0 free): j1, j2 may not be preempted for 4m (minimum run time)",
    )
    s = sched(queue_order="first-start")
    submit(s, "j1", 2)
    submit(s, "j2", 2)
    s.schedule(0.0)
    s.update_checkpointable("j2", False, 0.0)
    submit(s, "j3", 4, now=1.0)
    s.schedule(1.0)
    assert explain(s, 1.0)["j3"].text == (
        "waiting for 4 GPUs (0 free): the 2 jobs ahead of it (Q1: 2) hold or need 4 of 4; "
        "j2 cannot be checkpointed, so it keeps its GPUs first"
    )


def test_duration_text() -> None:
    assert [duration_text(x) for x in (44.6, 720, 11_100, 190_000)] == [
        "45s",
        "12m",
        "3h05m",
        "2d04h",
    ]


@pytest.mark.parametrize("policy", POLICY_NAMES)
@PROPS
@given(w=workloads(), min_run=st.sampled_from([0.0, 0.0, 6.0]))
def test_after_every_pass_the_reasons_agree_with_the_next_pass(
    policy: str, w: tuple, min_run: float
) -> None:
    """After the passes of an instant nothing waits for "the next pass", nobody waits for
    GPUs being freed (preempted jobs exit at once here), and positions count the policy's
    order of waiting jobs; also with a minimum run time."""
    nodes, specs, config, placement = w
    config = dataclasses.replace(config, min_run=min_run)
    s = Scheduler(nodes, policy_of(policy), make_placement(placement), config)
    replay = Replay(s, specs)
    for _ in range(5000):
        if replay.done:
            break
        now = replay.now
        replay.step()
        why = explain(s, now)
        waiting = [s.policy.job(k).job_id for k in s.policy.waiting_order()]
        assert list(why) == waiting
        assert all(s.job(j).state is JobState.WAITING for j in why)
        assert [p.overall for p in why.values()] == list(range(1, len(why) + 1))
        assert {p.reason for p in why.values()} <= {"gpus", "blocked", "placement", "nodes"}
        # a page is worded as the whole line words it; a job not waiting has no place
        page = waiting[1::3]
        running = [j.job_id for j in s.jobs() if j.state is JobState.RUNNING][:1]
        paged = explain_jobs(s, now, [*running, *reversed(page)])
        assert list(paged) == page and paged == {j: why[j] for j in page}


def test_timeline_tells_each_job_in_words() -> None:
    s = sched(gpus=(2, 2), queue_thresholds=(100.0,))
    t = Timeline()
    steps = {"j1": 40}
    submit(s, "j1", 4)
    s.schedule(0.0)
    seen = [(e.job_id, e.time, e.text) for e in t.observe(s, 0.0, steps.get)]
    assert seen == [("j1", 0.0, "submitted"), ("j1", 0.0, "started on n0:0,1 n1:0,1")]
    submit(s, "j2", 2, now=10.0)
    s.schedule(10.0)
    assert t.observe(s, 10.0) == [Event("j2", 10.0, "submitted", "submitted")]
    assert s.schedule(25.0) == [Preempt("j1")]
    assert [(e.kind, e.text) for e in t.observe(s, 25.0, steps.get)] == [
        ("demoted", "demoted to Q2: its service passed 100 GPU-s"),
        ("preempted", "preempted at step 40 for j2 (Q1), a higher queue than its Q2"),
    ]
    s.exited("j1", 26.0, CP)
    s.schedule(26.0)
    assert [e.text for e in t.observe(s, 26.0)] == ["started on n0:0,1"]
    assert s.node_down("n0", 30.0) == ["j2"]
    s.exited("j2", 30.0, ExitOutcome.LOST)
    s.schedule(30.0)
    assert [e.text for e in t.observe(s, 30.0)] == [
        "stopped: node n0 went down",
        "restarted on n1:0,1 (restart 1)",
    ]
    s.exited("j2", 40.0, ExitOutcome.COMPLETED)
    s.cancel("j1", 41.0)
    assert [(e.job_id, e.text) for e in t.observe(s, 41.0)] == [
        ("j1", "cancelled"),
        ("j2", "completed after 14s of run time"),
    ]
    fresh = Timeline()
    fresh.prime(s)
    assert fresh.observe(s, 41.0) == []


def test_timeline_says_who_took_the_gpus_under_other_policies() -> None:
    s = sched("srtf")
    t = Timeline()
    submit(s, "j1", 4, duration=100.0)
    s.schedule(0.0)
    t.observe(s, 0.0)
    submit(s, "j2", 4, now=10.0, duration=5.0)
    assert s.schedule(10.0) == [Preempt("j1")]
    assert [e.text for e in t.observe(s, 10.0) if e.kind == "preempted"] == [
        "preempted for j2, ahead of it in srtf's order"
    ]
