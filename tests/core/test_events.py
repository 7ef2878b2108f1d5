"""Typed core events: ``Scheduler.apply`` and the journal's wire form, which replays exactly
and still reads the entries state directories hold from before the events were typed."""

from __future__ import annotations

import msgpack
import pytest

from coordinator.core import (
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
    NodeUp,
    Preempt,
    Schedule,
    SetPackLimit,
    Settings,
    Start,
    Submit,
    UpdateCheckpointable,
    UpdateCosts,
    UpdateSkew,
    build_scheduler,
)
from coordinator.core.events import EVENT_TYPES, from_wire, to_wire

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
        UpdateSkew("a", None),
        UpdateCheckpointable("a", True, 7.0),
        UpdateCosts("a", 12.5, 30.0),
        SetPackLimit(0.7),
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


def test_apply_refuses_what_is_not_an_event() -> None:
    sched = build_scheduler(Settings())
    with pytest.raises(CoreError, match="not a core event"):
        sched.apply("schedule")  # type: ignore[arg-type]
    with pytest.raises(CoreError, match="placement consolidate has no PACKLIMIT"):
        build_scheduler(Settings(placement="consolidate")).apply(SetPackLimit(0.5))
