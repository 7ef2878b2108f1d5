"""Typed core events: ``Scheduler.apply`` and the journal's wire form, which replays exactly
and still reads the entries state directories hold from before the events were typed."""

from __future__ import annotations

import json

import msgpack
import pytest

from coordinator.core import (
    Allocation,
    Began,
    Cancel,
    CoreError,
    Event,
    Exited,
    ExitOutcome,
    JobSpec,
    Kill,
    Node,
    NodeDown,
    NodeDrain,
    NodeUp,
    Preempt,
    Retire,
    Schedule,
    Scheduler,
    SetPackLimit,
    Settings,
    Start,
    Submit,
    UpdateCheckpointable,
    UpdateCosts,
    UpdateSkew,
    build_scheduler,
)
from coordinator.core.events import EVENT_TYPES, Pin, Release, from_wire, to_wire

#: Journal entries exactly as coordinators wrote them before events were typed.
OLD_JOURNAL: list[tuple[str, dict[str, object]]] = [
    ("node_up", {"name": "n1", "gpus": [0, 1], "now": 0.0}),
    (
        "submit",
        {
            "spec": {
                "job_id": "j1",
                "gpus": 2,
                "arrival": 1.0,
                "duration": None,
                "skew": None,
                "model": "resnet",
            },
            "now": 1.0,
        },
    ),
    ("schedule", {"now": 1.0}),
    ("checkpointable", {"job_id": "j1", "value": False, "now": 2.0}),
    ("update_skew", {"job_id": "j1", "skew": 0.5}),
    ("packlimit", {"value": 0.3}),
    ("exited", {"job_id": "j1", "now": 3.0, "outcome": "checkpointed"}),
    ("cancel", {"job_id": "j1", "now": 4.0}),
    ("node_down", {"name": "n1", "now": 5.0}),
]


def test_old_journal_entries_read_as_typed_events() -> None:
    assert [from_wire(k, a) for k, a in OLD_JOURNAL] == [
        NodeUp(Node("n1", (0, 1)), 0.0),
        Submit(JobSpec("j1", 2, arrival=1.0, model="resnet"), 1.0),
        Schedule(1.0),
        UpdateCheckpointable("j1", False, 2.0),
        UpdateSkew("j1", 0.5),
        SetPackLimit(0.3),
        Exited("j1", 3.0, ExitOutcome.CHECKPOINTED),
        Cancel("j1", 4.0),
        NodeDown("n1", 5.0),
    ]


def test_every_event_survives_the_journal() -> None:
    events: list[Event] = [
        Schedule(1.5),
        Submit(JobSpec("a", 4, arrival=2.0, duration=9.0, skew=0.2, user="u", vc="v"), 2.0),
        Exited("a", 3.0, ExitOutcome.LOST),
        Exited("a", 3.5, ExitOutcome.COMPLETED, ended=3.2),
        Began("a", 2.5, 3.0),
        Cancel("a", 4.0),
        NodeUp(Node("n", (3, 1), switch="s1"), 5.0),
        NodeDown("n", 6.0),
        NodeDrain("n", True, 6.5),
        UpdateSkew("a", None),
        UpdateCheckpointable("a", True, 7.0),
        Pin("a", 7.5),
        Release("a", 7.5),
        UpdateCosts("a", 12.5, 30.0),
        SetPackLimit(0.7),
        Retire("a"),
    ]
    assert {type(e) for e in events} == set(EVENT_TYPES)
    for event in events:
        kind, args = to_wire(event)
        stored = msgpack.unpackb(msgpack.packb([kind, args]), raw=False)
        assert from_wire(*stored) == event


def test_unknown_or_malformed_entries_are_refused_by_name() -> None:
    with pytest.raises(CoreError, match=r"unknown journal event 'rebalance'.*newer"):
        from_wire("rebalance", {"now": 1.0})
    with pytest.raises(CoreError, match="journal event 'cancel' has bad arguments"):
        from_wire("cancel", {"job": "j1"})


def test_apply_returns_the_decisions_and_replay_rebuilds_the_same_state() -> None:
    """Events applied live, journaled, and replayed on a fresh scheduler give the same
    decisions and the same state, costs and learned PACKLIMIT included."""
    settings = Settings(
        policy="tiresias-l", queue_thresholds=(10.0,), cheap_victims=True, min_run_restores=1.0
    )
    live = build_scheduler(settings)
    journal: list[tuple[str, dict[str, object]]] = []
    made: list[object] = []

    def apply(event: Event) -> list:
        decisions = live.apply(event)
        journal.append(to_wire(event))
        made.extend(decisions)
        return decisions

    assert apply(NodeUp(Node("n", (0, 1)), 0.0)) == []
    apply(Submit(JobSpec("big", 2, arrival=0.0), 0.0))
    (start,) = apply(Schedule(0.0))
    assert isinstance(start, Start) and start.job_id == "big"
    apply(UpdateCosts("big", 4.0, 8.0))
    apply(SetPackLimit(0.25))
    apply(Submit(JobSpec("small", 1, arrival=6.0), 6.0))  # big is in Q1 by now …
    assert apply(Schedule(6.0)) == []  # … but runs at least its restore cost, until 8
    assert apply(Schedule(8.0)) == [Preempt("big")]
    apply(Exited("big", 9.0, ExitOutcome.CHECKPOINTED))
    assert [d.job_id for d in apply(Schedule(9.0))] == ["small"]
    assert apply(Cancel("small", 10.0)) == [Kill("small")]

    replayed = build_scheduler(settings)
    decisions = [replayed.apply(from_wire(kind, args)) for kind, args in journal]
    assert [d for ds in decisions for d in ds] == made
    assert replayed.export_state() == live.export_state()
    assert replayed.placement.packlimit == 0.25
    assert (replayed.job("big").checkpoint_cost, replayed.job("big").restore_cost) == (4.0, 8.0)


def test_service_counts_from_the_real_start_to_the_real_end() -> None:
    """A run that really started after its Start decision and ended before the shell saw
    it (an executor's facts, e.g. Slurm's start and end times) is served only meanwhile;
    a start time before the decision or after now changes nothing beyond those bounds."""
    sched = build_scheduler(Settings(policy="tiresias-l", queue_thresholds=(10.0,)))
    sched.apply(NodeUp(Node("n", (0, 1)), 0.0))
    sched.apply(Submit(JobSpec("a", 2, arrival=0.0), 0.0))
    sched.apply(Schedule(1.0))  # decided at 1
    sched.apply(Began("a", 0.5, 2.0))  # not before the decision
    assert sched.job("a").attained(2.0) == 2 * 1.0
    sched.apply(Began("a", 2.5, 3.0))  # Slurm started it 1.5 s after the decision
    assert sched.job("a").attained(3.0) == 2 * 0.5
    sched.apply(Exited("a", 9.0, ExitOutcome.COMPLETED, ended=8.0))  # seen 1 s late
    assert sched.job("a").executed == 8.0 - 2.5
    b = sched.apply(Submit(JobSpec("b", 1, arrival=10.0), 10.0)) or sched.apply(Schedule(10.0))
    assert [d.job_id for d in b] == ["b"]
    sched.apply(Began("b", 20.0, 11.0))  # never past now
    sched.apply(Exited("b", 12.0, ExitOutcome.COMPLETED))
    assert sched.job("b").executed == 1.0


def test_an_awaited_start_is_served_and_timed_from_its_real_begin() -> None:
    """With ``await_begin`` (Slurm: the released job starts on Slurm's next pass, or much
    later while a node is still cleaning), a started job holds its GPUs but accrues no
    service and has no demotion timer until ``Began``; a snapshot keeps it awaiting, and a
    run stopped before it began has served nothing."""
    settings = Settings(policy="tiresias-l", queue_thresholds=(10.0,), await_begin=True)
    sched = build_scheduler(settings)
    sched.apply(NodeUp(Node("n", (0, 1)), 0.0))
    sched.apply(Submit(JobSpec("a", 2, arrival=0.0), 0.0))
    assert [d.job_id for d in sched.apply(Schedule(1.0))] == ["a"]
    assert sched.next_wakeup(1.0) is None  # no demotion timer while it awaits
    assert sched.apply(Schedule(30.0)) == [] and sched.job("a").queue == 0
    assert sched.job("a").attained(30.0) == 0.0 and sched.free_gpus() == {"n": ()}
    restored = Scheduler.from_state(sched.export_state())
    for s in (sched, restored):
        s.apply(Began("a", 30.0, 31.0))  # Slurm started it at 30
        assert s.job("a").attained(31.0) == 2 * 1.0
        assert s.next_wakeup(31.0) == 35.0  # 10 GPU-s on 2 GPUs, from the begin
    sched.apply(Schedule(35.0))
    assert sched.job("a").queue == 1
    sched.apply(Submit(JobSpec("b", 1, arrival=36.0), 36.0))
    sched.apply(Exited("a", 36.0, ExitOutcome.COMPLETED))
    assert [d.job_id for d in sched.apply(Schedule(36.0))] == ["b"]
    sched.apply(Cancel("b", 50.0))  # never began: nothing served
    sched.apply(Exited("b", 51.0, ExitOutcome.CHECKPOINTED))
    assert sched.job("b").executed == 0.0


@pytest.mark.parametrize("policy", ["las", "gandiva"])
def test_an_awaited_start_has_no_timer_under_service_and_time_slice_policies(
    policy: str,
) -> None:
    """LAS ranks an awaited run by the service it had (no crossing time); Gandiva's slice
    starts at the begin, not the decision."""
    sched = build_scheduler(Settings(policy=policy, await_begin=True))
    sched.apply(NodeUp(Node("n", (0,)), 0.0))
    sched.apply(Submit(JobSpec("a", 1, arrival=0.0), 0.0))
    sched.apply(Schedule(0.0))
    sched.apply(Submit(JobSpec("b", 1, arrival=1.0), 1.0))
    assert sched.apply(Schedule(1.0)) == [] and sched.next_wakeup(1.0) is None
    assert sched.apply(Schedule(500.0)) == []  # still awaiting its begin: it keeps its turn
    sched.apply(Began("a", 500.0, 500.0))
    assert sched.next_wakeup(500.0) is not None


def test_a_drained_node_keeps_its_jobs_and_takes_no_new_ones() -> None:
    """``NodeDrain``: the job running on the node goes on (its service too), its free GPUs
    and those the job frees are offered to nobody, selection does not preempt for them, and
    the node takes jobs again once undrained; a drained node that goes down goes with them."""
    sched = build_scheduler(Settings(policy="tiresias-l"))
    for name in ("a", "b"):
        sched.apply(NodeUp(Node(name, (0, 1)), 0.0))
    sched.apply(Submit(JobSpec("j1", 1, arrival=0.0), 0.0))
    assert sched.apply(Schedule(0.0)) == [Start("j1", Allocation.of({"a": [0]}))]
    sched.apply(NodeDrain("a", True, 1.0))
    sched.apply(NodeDrain("a", True, 1.0))  # again: nothing changes
    assert sched.free_gpus() == {"a": (), "b": (0, 1)}
    for job in ("j2", "j3"):
        sched.apply(Submit(JobSpec(job, 1, arrival=2.0), 2.0))
    starts = sched.apply(Schedule(2.0))  # j2 would fit best on a's free GPU
    assert starts == [
        Start("j2", Allocation.of({"b": [0]})),
        Start("j3", Allocation.of({"b": [1]})),
    ]
    assert sched.job("j1").attained(3.0) == 3.0  # it runs on
    sched.apply(Submit(JobSpec("j4", 2, arrival=3.0), 3.0))
    sched.apply(Exited("j1", 4.0, ExitOutcome.COMPLETED))  # its GPU stays parked
    assert sched.apply(Schedule(4.0)) == [] and sched.free_gpus()["a"] == ()
    sched.apply(NodeDrain("a", False, 5.0))
    assert sched.apply(Schedule(5.0)) == [Start("j4", Allocation.of({"a": [0, 1]}))]
    sched.apply(NodeDrain("a", True, 6.0))
    sched.apply(NodeDown("a", 7.0))
    sched.apply(Exited("j4", 7.0, ExitOutcome.LOST))
    sched.apply(NodeUp(Node("a", (0, 1)), 8.0))  # back, taking jobs
    assert sched.free_gpus()["a"] == (0, 1)
    assert [d.job_id for d in sched.apply(Schedule(8.0))] == ["j4"]


def test_a_drain_survives_a_snapshot_and_older_snapshots_read_undrained() -> None:
    """A restored scheduler keeps the node drained: it places nothing there, parks what its
    job frees, and takes jobs there again once undrained. A snapshot from before drains were
    kept (version 2) reads with every node taking jobs."""
    sched = build_scheduler(Settings())
    sched.apply(NodeUp(Node("a", (0, 1)), 0.0))
    sched.apply(Submit(JobSpec("j1", 1, arrival=0.0), 0.0))
    sched.apply(Schedule(0.0))
    sched.apply(NodeDrain("a", True, 1.0))
    state = json.loads(json.dumps(sched.export_state()))
    restored = Scheduler.from_state(state)
    assert restored.export_state() == state
    assert restored.free_gpus() == {"a": ()}
    restored.apply(Submit(JobSpec("j2", 1, arrival=2.0), 2.0))
    restored.apply(Exited("j1", 3.0, ExitOutcome.COMPLETED))
    assert restored.apply(Schedule(3.0)) == [] and restored.free_gpus() == {"a": ()}
    restored.apply(NodeDrain("a", False, 4.0))
    assert restored.apply(Schedule(4.0)) == [Start("j2", Allocation.of({"a": [0]}))]
    older = {
        **state,
        "version": 2,
        "nodes": [{k: v for k, v in n.items() if k != "drained"} for n in state["nodes"]],
    }
    assert Scheduler.from_state(older).free_gpus() == {"a": (1,)}


def test_apply_refuses_what_is_not_an_event() -> None:
    sched = build_scheduler(Settings())
    with pytest.raises(CoreError, match="not a core event"):
        sched.apply("schedule")  # type: ignore[arg-type]
    with pytest.raises(CoreError, match="placement consolidate has no PACKLIMIT"):
        build_scheduler(Settings(placement="consolidate")).apply(SetPackLimit(0.5))


def test_retired_jobs_leave_the_snapshot() -> None:
    """A finished job stays answerable until the shell retires it; then the snapshot holds
    the active jobs and a count, whatever the number of jobs retired before, and replay of
    the journal with Retire rebuilds the same state."""

    def run(finished: int) -> tuple[bytes, list[tuple[str, dict[str, object]]]]:
        sched = build_scheduler(Settings(policy="tiresias-l", queue_thresholds=(10.0,)))
        journal = []
        for event in [NodeUp(Node("n", (0, 1)), 0.0), Submit(JobSpec("w", 1, arrival=0.0), 0.0)]:
            sched.apply(event)
            journal.append(to_wire(event))
        for i in range(finished):
            t = float(i)
            for event in [
                Submit(JobSpec(f"j{i}", 1, arrival=t), t),
                Schedule(t),
                Exited(f"j{i}", t + 0.5, ExitOutcome.COMPLETED),
                Retire(f"j{i}"),
            ]:
                if isinstance(event, Retire):
                    assert sched.job(event.job_id).state.finished  # answerable until then
                sched.apply(event)
                journal.append(to_wire(event))
        state = sched.export_state()
        assert [j["job_id"] for j in state["jobs"]] == ["w"]
        assert state["retired"] == finished == sched.retired
        replayed = build_scheduler(Settings(policy="tiresias-l", queue_thresholds=(10.0,)))
        for kind, args in journal:
            replayed.apply(from_wire(kind, args))
        assert replayed.export_state() == state
        return msgpack.packb(state), journal

    few, _ = run(10)
    many, journal = run(2000)
    assert len(many) <= len(few) + 16  # counters grow, nothing per job (none learns here)
    sched = build_scheduler(Settings())
    for kind, args in journal[:6]:  # up to Retire("j0")
        sched.apply(from_wire(kind, args))
    with pytest.raises(CoreError, match="unknown job j0"):
        sched.job("j0")
    with pytest.raises(CoreError, match="unknown job j0"):
        sched.apply(Retire("j0"))
    with pytest.raises(CoreError, match="job w is running: cannot retire it"):
        sched.apply(Retire("w"))
