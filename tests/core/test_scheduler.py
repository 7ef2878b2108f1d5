"""Scheduler behaviour on small hand-made scenarios."""

from __future__ import annotations

import json
import math

import pytest

from coordinator.core import (
    PLACEMENT_NAMES,
    POLICY_NAMES,
    CoreError,
    ExitOutcome,
    JobSpec,
    JobState,
    Kill,
    Node,
    Preempt,
    Scheduler,
    SchedulerConfig,
    ServiceDistribution,
    Start,
    make_placement,
    make_policy,
)
from coordinator.core.free import FreeCounts

CP = ExitOutcome.CHECKPOINTED


def sched(
    policy: str = "tiresias-l",
    gpus: tuple[int, ...] = (2,),
    placement: str = "consolidate",
    **config: object,
) -> Scheduler:
    nodes = [Node(f"n{i}", tuple(range(g))) for i, g in enumerate(gpus)]
    return Scheduler(
        nodes, make_policy(policy), make_placement(placement), SchedulerConfig(**config)
    )  # type: ignore[arg-type]


def spec(
    job_id: str,
    gpus: int,
    arrival: float = 0.0,
    duration: float | None = 100.0,
    skew: float | None = None,
) -> JobSpec:
    return JobSpec(job_id, gpus, arrival, duration, skew)


def started(decisions: list) -> list[str]:
    return [d.job_id for d in decisions if isinstance(d, Start)]


def preempted(decisions: list) -> list[str]:
    return [d.job_id for d in decisions if isinstance(d, Preempt)]


def settle(s: Scheduler, now: float) -> list:
    """Passes at ``now`` with preempted jobs exiting at once, like the simulator."""
    out = []
    while decisions := s.schedule(now):
        out += decisions
        for job_id in preempted(decisions):
            s.exited(job_id, now, CP)
    return out


# ---- requests the core refuses ------------------------------------------------------------


def test_submit_validation() -> None:
    s = sched(gpus=(2, 2))
    s.submit(spec("a", 1), 0)
    with pytest.raises(CoreError, match="duplicate job id a"):
        s.submit(spec("a", 1), 0)
    with pytest.raises(CoreError, match="job b asks for 0 GPUs"):
        s.submit(spec("b", 0), 0)
    with pytest.raises(CoreError, match="job c asks for 5 GPUs but the cluster has 4"):
        s.submit(spec("c", 5), 0)
    settle(s, 0)
    s.exited("a", 1, ExitOutcome.COMPLETED)
    with pytest.raises(CoreError, match="duplicate"):
        s.submit(spec("a", 1), 1)  # finished ids stay taken
    with pytest.raises(CoreError, match="needs the true duration"):
        sched("srtf").submit(spec("x", 1, duration=None), 0)
    with pytest.raises(CoreError, match="backwards"):
        s.schedule(0.5)
    with pytest.raises(CoreError, match="unknown job"):
        s.job("zz")
    with pytest.raises(CoreError, match="not running"):
        s.exited("a", 2, ExitOutcome.COMPLETED)


def test_oversized_check_can_be_disabled_for_an_empty_cluster() -> None:
    s = Scheduler([], config=SchedulerConfig(reject_oversized=False))
    s.submit(spec("a", 4), 0)
    assert s.schedule(0) == [] and s.next_wakeup(0) is None
    s.node_up(Node("n", (0, 1, 2, 3)), 1)
    assert started(s.schedule(1)) == ["a"]


def test_factories_name_the_valid_choices() -> None:
    with pytest.raises(CoreError, match="unknown policy 'fifo'; valid: tiresias-l, tiresias-g"):
        make_policy("fifo")
    with pytest.raises(CoreError, match="bad parameters for policy 'sf'"):
        make_policy("sf", quantum=3)
    with pytest.raises(CoreError, match="valid: consolidate, spread, yarn, skew"):
        make_placement("packed")
    assert set(POLICY_NAMES) == {
        "tiresias-l",
        "tiresias-g",
        "las",
        "yarn-cs",
        "best-effort",
        "sf",
        "srtf",
        "srsf",
        "gandiva",
    }
    assert set(PLACEMENT_NAMES) == {"consolidate", "spread", "yarn", "skew"}
    for bad in (
        {"queue_thresholds": (10.0, 5.0)},
        {"queue_thresholds": (0.0,)},
        {"promote_knob": 0},
        {"interval": -1.0},
        {"queue_order": "lifo"},
        {"min_run": -1.0},
        {"min_run_restores": math.inf},
    ):
        with pytest.raises(CoreError):
            SchedulerConfig(**bad)  # type: ignore[arg-type]
    assert SchedulerConfig().queues == 5


# ---- starts, queues, demotion and promotion ---------------------------------------------


def test_start_takes_all_gpus_and_fifo_within_queue() -> None:
    s = sched(gpus=(2,))
    s.submit(spec("a", 2), 0)
    [start] = s.schedule(0)
    assert start == Start("a", start.allocation) and start.allocation.count == 2
    assert s.job("a").state is JobState.RUNNING and s.free_gpus() == {"n0": ()}
    s.submit(spec("b", 1, arrival=1), 1)
    # same queue: the started job keeps its GPUs, the newcomer waits (no head-of-queue churn)
    assert s.schedule(1) == []
    assert s.next_wakeup(1) == 3250.0 / 2  # a's demotion: default Q_1^hi = 3,250 GPU-s


def test_demotion_at_exact_crossing_then_preemption() -> None:
    s = sched(gpus=(2,), queue_thresholds=(100.0,))
    s.submit(spec("a", 2), 0)
    settle(s, 0)
    s.submit(spec("b", 1, arrival=10), 10)
    assert settle(s, 10) == []
    assert s.next_wakeup(10) == 50.0  # 100 GPU-s / 2 GPUs
    assert settle(s, 49.5) == [] and s.job("a").queue == 0
    out = settle(s, 50.0)
    assert preempted(out) == ["a"] and started(out) == ["b"]
    a = s.job("a")
    assert a.queue == 1 and a.executed == 50.0 and a.attained(50.0) == 100.0
    assert a.state is JobState.WAITING and a.restarts == 1 and a.preemptions == 1


def test_starvation_promotion_resets_service_and_wait() -> None:
    s = sched(gpus=(2,), queue_thresholds=(100.0,), promote_knob=1.0, queue_order="first-start")
    s.submit(spec("a", 2), 0)
    settle(s, 0)
    s.submit(spec("b", 1, arrival=10), 10)
    settle(s, 10)
    settle(s, 50.0)  # a demoted and preempted; waits from 50 with t_J = 50
    assert s.next_wakeup(50.0) == 100.0  # δ ≥ 1 × 50 (before b's demotion at 150)
    out = settle(s, 100.0)
    a = s.job("a")
    assert a.promotions == 1 and a.queue == 0 and a.executed == 0.0
    # back in queue 0, a (first started at 0) is ahead of b (first started at 50)
    assert preempted(out) == ["b"] and started(out) == ["a"]
    assert a.total_executed == 50.0  # never reset: JCT and oracles use it


@pytest.mark.parametrize(
    ("order", "at_1500"),
    [("first-start", (["b"], ["a"])), ("running-first", ([], []))],
)
def test_queue_order_decides_whether_a_preempted_job_evicts_its_queue(
    order: str, at_1500: tuple[list[str], list[str]]
) -> None:
    # a (2 GPUs) is demoted at 500 and preempted for b; b is demoted to a's queue at 1500.
    s = sched(gpus=(2,), queue_thresholds=(1000.0,), queue_order=order)
    s.submit(spec("a", 2, duration=None), 0)
    settle(s, 0)
    s.submit(spec("b", 1, arrival=10, duration=None), 10)
    out = settle(s, 500.0)
    assert (preempted(out), started(out)) == (["a"], ["b"])
    out = settle(s, 1500.0)
    assert s.job("b").queue == 1 == s.job("a").queue
    # first-start: a started first, so it evicts the running b; running-first: b keeps on
    assert (preempted(out), started(out)) == at_1500


@pytest.mark.parametrize(
    ("config", "costs", "preempted_at"),
    [
        ({}, (0.0, 0.0), 50.0),
        ({"min_run": 80.0}, (0.0, 0.0), 80.0),
        ({"min_run_restores": 2.0}, (1.0, 40.0), 80.0),
        ({"min_run": 60.0, "min_run_restores": 2.0}, (1.0, 40.0), 80.0),
    ],
)
def test_minimum_run_time_delays_preemption(
    config: dict[str, float], costs: tuple[float, float], preempted_at: float
) -> None:
    # a (2 GPUs) is demoted at 50 below the waiting b; its guard may hold b off until 80
    s = sched(gpus=(2,), queue_thresholds=(100.0,), **config)
    s.submit(spec("a", 2, duration=None), 0)
    s.update_costs("a", *costs)
    settle(s, 0)
    s.submit(spec("b", 1, arrival=10, duration=None), 10)
    assert settle(s, 10) == []
    state = json.loads(json.dumps(s.export_state()))  # the guard and costs survive a restore
    s = Scheduler.from_state(state, make_policy("tiresias-l"), make_placement("consolidate"))
    assert s.next_wakeup(10) == 50.0
    out = settle(s, 50.0)
    if preempted_at > 50.0:
        assert out == [] and s.job("a").queue == 1
        assert s.next_wakeup(50.0) == preempted_at  # the guard's end
        out = settle(s, preempted_at)
    assert (preempted(out), started(out)) == (["a"], ["b"])


@pytest.mark.parametrize(("restore", "preempted_at"), [(40.0, 80.0), (10.0, 50.0)])
def test_costs_measured_while_running_set_that_run_s_minimum(
    restore: float, preempted_at: float
) -> None:
    """Live, the runtime measures its restore after the start: the guard of the run under
    way follows (start + 2 × restore), whether that is longer or shorter than before."""
    s = sched(gpus=(2,), queue_thresholds=(100.0,), min_run_restores=2.0)
    s.submit(spec("a", 2, duration=None), 0)
    s.update_costs("a", 0.0, 30.0)  # modelled before the start: guarded until 60
    settle(s, 0)
    s.submit(spec("b", 1, arrival=10, duration=None), 10)
    assert settle(s, 10) == [] and s.guards() == {"a": 60.0}
    s.update_costs("a", 1.0, restore)  # measured by the run
    assert s.guards() == {"a": 2 * restore}
    if preempted_at > 50.0:
        assert settle(s, 50.0) == []
    out = settle(s, preempted_at)
    assert (preempted(out), started(out)) == (["a"], ["b"])


@pytest.mark.parametrize(("cheap", "victim"), [(False, "x"), (True, "y")])
def test_cheap_victims_preempts_the_cheapest_running_job_of_a_queue(
    cheap: bool, victim: str
) -> None:
    s = sched(gpus=(2,), queue_thresholds=(100.0,), cheap_victims=cheap)
    for name, at, cost in (("y", 0.0, 1.0), ("x", 1.0, 10.0)):
        s.submit(spec(name, 1, arrival=at, duration=None), at)
        s.update_costs(name, cost, cost)
        settle(s, at)
    settle(s, 150.0)  # both demoted to queue 1; x started later
    s.submit(spec("z", 1, arrival=200, duration=None), 200)
    out = settle(s, 200.0)
    assert (preempted(out), started(out)) == ([victim], ["z"])
    with pytest.raises(CoreError, match="restore cost must be >= 0"):
        s.update_costs("x", 1.0, -1.0)


def test_no_promotion_when_knob_is_infinite() -> None:
    s = sched(gpus=(2,), queue_thresholds=(100.0,), promote_knob=math.inf)
    s.submit(spec("a", 2), 0)
    settle(s, 0)
    s.submit(spec("b", 1, arrival=10), 10)
    settle(s, 50.0)
    assert s.next_wakeup(50.0) == 150.0  # only b's own demotion


def test_multiple_queues_demote_one_by_one() -> None:
    s = sched(gpus=(1,), queue_thresholds=(10.0, 30.0))
    s.submit(spec("a", 1), 0)
    settle(s, 0)
    assert s.next_wakeup(0) == 10.0
    settle(s, 10.0)
    assert s.job("a").queue == 1 and s.next_wakeup(10.0) == 30.0
    settle(s, 45.0)  # passes may come late: the crossing is still applied
    assert s.job("a").queue == 2 and s.next_wakeup(45.0) is None


# ---- cancel, exit outcomes, nodes ---------------------------------------------------------


def test_cancel_and_kill() -> None:
    s = sched(gpus=(2,))
    s.submit(spec("a", 2), 0)
    s.submit(spec("b", 2), 0)
    settle(s, 0)
    assert s.cancel("b", 1) == [] and s.job("b").state is JobState.CANCELLED
    assert s.cancel("a", 2) == [Kill("a")]
    assert s.job("a").state is JobState.PREEMPTING and s.free_gpus() == {"n0": ()}
    assert s.job("a").total_executed == 2.0  # service stops at the kill
    s.exited("a", 3, CP)
    assert s.job("a").state is JobState.CANCELLED and s.free_gpus() == {"n0": (0, 1)}
    assert s.cancel("a", 4) == []
    assert [j.job_id for j in s.jobs()] == ["b", "a"]


def test_exit_outcomes() -> None:
    s = sched(gpus=(4,))
    for j in "abc":
        s.submit(spec(j, 1), 0)
    settle(s, 0)
    s.exited("a", 5, ExitOutcome.COMPLETED)
    s.exited("b", 5, ExitOutcome.FAILED)
    s.exited("c", 5, ExitOutcome.LOST)
    assert [s.job(j).state for j in "abc"] == [
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.WAITING,
    ]
    assert s.job("a").finish == 5 and s.job("c").restarts == 1
    assert [j.job_id for j in s.jobs()] == ["c", "a", "b"]  # active first
    assert started(settle(s, 6)) == ["c"]


def test_node_down_and_up() -> None:
    s = sched(gpus=(2, 2))
    s.submit(spec("big", 4), 0)
    s.submit(spec("small", 1), 0)
    assert started(settle(s, 0)) == ["big"]
    assert s.node_down("n1", 5) == ["big"]
    big = s.job("big")
    assert big.state is JobState.PREEMPTING and big.total_executed == 5
    assert s.free_gpus() == {"n0": ()}  # n1 is gone; n0 stays busy until the exit
    s.exited("big", 6, ExitOutcome.LOST)
    assert big.state is JobState.WAITING and big.restarts == 1
    assert started(settle(s, 6)) == ["small"]  # big cannot fit now; small can
    with pytest.raises(CoreError, match="not up"):
        s.node_down("n1", 7)
    s.node_up(Node("n1", (0, 1)), 7)
    with pytest.raises(CoreError, match="already up"):
        s.node_up(Node("n1", (0, 1)), 7)
    s.exited("small", 8, ExitOutcome.COMPLETED)
    assert started(settle(s, 8)) == ["big"]


# ---- baselines -------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "starts"), [("yarn-cs", []), ("best-effort", ["c"])])
def test_head_of_line_blocking(policy: str, starts: list[str]) -> None:
    s = sched(policy, gpus=(4,), placement="yarn")
    s.submit(spec("a", 3), 0)
    assert started(settle(s, 0)) == ["a"]
    s.submit(spec("b", 2, arrival=1), 1)
    s.submit(spec("c", 1, arrival=2), 2)
    assert started(settle(s, 2)) == starts
    s.exited("a", 3, ExitOutcome.COMPLETED)
    assert started(settle(s, 3)) == ["b"] + (["c"] if not starts else [])


@pytest.mark.parametrize(("policy", "placement"), [("sf", "consolidate"), ("yarn-cs", "yarn")])
def test_a_minimum_run_time_ends_under_policies_that_never_preempt(
    policy: str, placement: str
) -> None:
    """A guard that no pass drops made next_wakeup name a past time for ever: the live
    coordinator then ran a pass on every loop turn and a replay never ended."""
    s = sched(policy, gpus=(2,), placement=placement, min_run=10.0)
    s.submit(spec("a", 2), 0)
    s.submit(spec("b", 2), 0)
    assert started(settle(s, 0)) == ["a"]
    assert settle(s, 20) == []
    wake = s.next_wakeup(20)
    assert wake is None or wake > 20


def test_smallest_first_is_not_preemptive() -> None:
    s = sched("sf", gpus=(2,))
    s.submit(spec("a", 2), 0)
    s.submit(spec("b", 1), 0)
    s.submit(spec("c", 2), 0)
    assert started(settle(s, 0)) == ["b"]
    s.submit(spec("d", 1, arrival=1), 1)
    assert started(settle(s, 1)) == ["d"]
    s.exited("b", 2, ExitOutcome.COMPLETED)
    s.exited("d", 2, ExitOutcome.COMPLETED)
    assert started(settle(s, 2)) == ["a"]  # a and c tie on size: arrival, then id


def test_srtf_preempts_for_shorter_remaining() -> None:
    s = sched("srtf", gpus=(1,))
    s.submit(spec("long", 1, duration=100), 0)
    settle(s, 0)
    s.submit(spec("short", 1, arrival=10, duration=50), 10)
    assert settle(s, 10) == [Preempt("long"), Start("short", s.job("short").allocation)]
    s.submit(spec("mid", 1, arrival=20, duration=45), 20)  # 45 > 40 left of short
    assert settle(s, 20) == []


def test_gandiva_time_slices() -> None:
    s = Scheduler([Node("n", (0,))], make_policy("gandiva", quantum=10.0))
    for j in "ab":
        s.submit(spec(j, 1), 0)
    turns = []
    now = 0.0
    for _ in range(4):
        turns += started(settle(s, now))
        now = s.next_wakeup(now)
    assert turns == ["a", "b", "a", "b"] and now == 40.0
    s.cancel("b", now)
    s.exited("b", now, CP)
    assert s.next_wakeup(now) is None  # alone: no more slicing


def test_las_crossings_are_exact() -> None:
    s = Scheduler([Node("n", (0,))], make_policy("las", quantum=3.0))
    s.submit(spec("a", 1), 0)
    settle(s, 0)
    s.submit(spec("b", 1, arrival=5), 5)
    assert preempted(settle(s, 5)) == ["a"]  # a leads b by 5 GPU-s > its 3 s quantum
    # b's service minus its quantum reaches a's 5 GPU-s at 13; a arrived first: tie to a
    assert s.next_wakeup(5) == 13.0
    assert settle(s, 12.9) == []
    assert started(settle(s, 13.0)) == ["a"]
    # a (5 GPU-s) must now get strictly ahead of b (8 GPU-s) by its quantum: just after 19
    t = s.next_wakeup(13.0)
    assert t is not None and 19.0 < t < 19.0 + 1e-9
    assert settle(s, 19.0) == []
    assert started(settle(s, t)) == ["b"]
    with pytest.raises(CoreError, match="quantum"):
        make_policy("las", quantum=0)


def test_las_with_interval_reevaluates_at_ticks_only() -> None:
    s = sched("las", gpus=(1,), interval=2.0)
    s.submit(spec("a", 1), 0)
    settle(s, 0)
    s.submit(spec("b", 1, arrival=0.5), 0.5)
    assert settle(s, 0.5) == []  # a's priority is its service at the last tick: 0, a tie
    assert s.next_wakeup(0.5) == 2.0  # only ticks wake the policy
    d = settle(s, 2.0)
    assert preempted(d) == ["a"] and started(d) == ["b"]  # a had 2 GPU-s at the tick
    s.submit(spec("c", 1, arrival=3.0), 3.0)
    assert settle(s, 3.0) == []  # b started at the tick: 0 GPU-s until the next one
    d = settle(s, 4.0)
    assert preempted(d) == ["b"] and started(d) == ["c"]  # a 2, b 2, c 0
    d = settle(s, 6.0)
    assert preempted(d) == ["c"] and started(d) == ["a"]  # all at 2: a arrived first
    s.submit(spec("d", 1, arrival=7.0), 7.0)
    d = settle(s, 7.0)  # a newcomer preempts between ticks: a had 2 GPU-s at tick 6
    assert preempted(d) == ["a"] and started(d) == ["d"]
    forced = Scheduler(
        [Node("n", (0,))],
        make_policy("las", quantum=3.0, crossings=True),
        config=SchedulerConfig(interval=2.0),
    )
    forced.submit(spec("a", 1), 0)
    settle(forced, 0)
    forced.submit(spec("b", 1, arrival=0.5), 0.5)
    assert settle(forced, 0.5) == []  # a is within its 3 s lead
    assert forced.next_wakeup(0.5) == 2.0  # the tick comes before the crossing at 3.0
    t = forced.next_wakeup(2.5)  # a must lead strictly (b lost the tie): just after 3.0
    assert t is not None and 3.0 < t < 3.0 + 1e-9


# ---- placement ----------------------------------------------------------------------------


def place(
    placement: str,
    free: dict[str, int],
    gpus: int,
    skew: float | None = None,
    switches: dict[str, str] | None = None,
    size: int = 4,
) -> dict[str, int] | None:
    from coordinator.core.model import Job

    nodes = {n: Node(n, tuple(range(size)), (switches or {}).get(n)) for n in free}
    return make_placement(placement, packlimit=0.5).choose(
        Job(spec("j", gpus, skew=skew)), FreeCounts.of(free, nodes)
    )


def test_placements() -> None:
    free = {"a": 4, "b": 2, "c": 3}
    assert place("consolidate", free, 2) == {"b": 2}  # best fit on one node
    assert place("consolidate", free, 6) == {"a": 4, "b": 2}  # two nodes, exact last piece
    assert place("spread", free, 4) == {"b": 2, "c": 2}  # fill fragments first
    assert place("yarn", free, 4) == {"a": 4}
    assert place("yarn", {"a": 3, "b": 3}, 4) is None  # fits one node in size: wait for one
    assert place("yarn", {"a": 4, "b": 4, "c": 3}, 6) == {"a": 4, "b": 2}  # whole free nodes
    assert place("yarn", {"a": 4, "b": 3, "c": 3}, 6) is None
    assert place("consolidate", free, 10) is None
    assert place("skew", free, 4, skew=0.9) == {"a": 4}
    assert place("skew", free, 4, skew=0.2) == {"b": 2, "c": 2}
    assert place("skew", free, 4, skew=None) == {"a": 4}  # unknown skew: consolidate
    from coordinator.core.model import Job

    hetero = {"big": Node("big", (0, 1, 2, 3)), "s1": Node("s1", (0, 1)), "s2": Node("s2", (0, 1))}
    yarn = make_placement("yarn")
    # 3 GPUs fit the big node's size: wait for it rather than take the two small ones
    assert (
        yarn.choose(Job(spec("j", 3)), FreeCounts.of({"big": 0, "s1": 2, "s2": 2}, hetero)) is None
    )
    assert yarn.choose(Job(spec("j", 5)), FreeCounts.of({"big": 4, "s1": 2, "s2": 1}, hetero)) == {
        "big": 4,
        "s1": 1,
    }
    sw = {"a": "s1", "b": "s2", "c": "s2"}
    assert place("consolidate", {"a": 3, "b": 2, "c": 2}, 4, switches=sw) == {"b": 2, "c": 2}


def test_update_skew_changes_placement() -> None:
    s = Scheduler(
        [Node("n0", (0, 1, 2, 3)), Node("n1", (0, 1))],
        make_policy("tiresias-l"),
        make_placement("skew", packlimit=0.5),
    )
    s.submit(spec("a", 2, skew=0.9), 0)
    assert s.schedule(0)[0].allocation.nodes == ("n1",)  # best fit
    s.submit(spec("b", 2), 0)
    s.update_skew("b", 0.1)
    assert s.job("b").spec.skew == 0.1
    assert s.schedule(0)[0].allocation.to_wire() == {"n0": [0, 1]}


# ---- persistence ----------------------------------------------------------------------------


def test_state_round_trip_mid_run() -> None:
    cfg = {"queue_thresholds": (10.0,), "promote_knob": 2.0}
    s = sched(gpus=(2, 2), **cfg)
    for i, g in enumerate([2, 1, 2, 1, 3]):
        s.submit(spec(f"j{i}", g, arrival=i), i)
        settle(s, i)
    s.node_down("n1", 4.5)
    state = json.loads(json.dumps(s.export_state()))
    r = Scheduler.from_state(state, make_policy("tiresias-l"), make_placement("consolidate"))
    assert r.export_state() == s.export_state()
    assert r.next_wakeup(5) == s.next_wakeup(5)
    for x in (s, r):
        for job in x.jobs():
            if job.state is JobState.PREEMPTING:
                x.exited(job.job_id, 5, ExitOutcome.LOST)
        x.node_up(Node("n1", (0, 1)), 5)
    for t in (5.0, 12.0, 30.0, 60.0):
        assert settle(r, t) == settle(s, t)
    assert r.export_state() == s.export_state()


def test_restore_defaults_to_the_exported_plug_ins() -> None:
    s = Scheduler([Node("n", (0, 1))], make_policy("srsf"), make_placement("spread"))
    s.submit(spec("a", 1), 0)
    settle(s, 0)
    r = Scheduler.from_state(json.loads(json.dumps(s.export_state())))
    assert (r.policy.name, r.placement.name) == ("srsf", "spread")
    assert r.export_state() == s.export_state()
    with pytest.raises(CoreError, match="version"):
        Scheduler.from_state({"version": 0})


def test_gittins_policy_learns_and_refiles_waiting_jobs() -> None:
    dist = ServiceDistribution(rebuild_fraction=0.0)  # merge every completion at once
    s = Scheduler(
        [Node("n", (0,))],
        make_policy("tiresias-g", distribution=dist),
        config=SchedulerConfig(queue_thresholds=(100.0,)),
    )
    for j in "abc":
        s.submit(spec(j, 1), 0)
    assert started(settle(s, 0)) == ["a"]
    assert [k[1] for k in s.policy.waiting_order()] == [0.0, 0.0]  # no history: index 0
    s.exited("a", 10, ExitOutcome.COMPLETED)
    assert dist.samples == [10.0]
    assert started(settle(s, 10)) == ["b"]
    assert [k[1] for k in s.policy.waiting_order()] == [-0.1]  # G(0, 100) = 1/10 now
    with pytest.raises(CoreError, match="variant"):
        make_policy("tiresias-g", variant="paper")


@pytest.mark.parametrize("interval", [0.0, 2.0])
def test_gittins_index_of_running_jobs_moves_at_ticks_with_an_interval(interval: float) -> None:
    """Most jobs finish within 1 GPU-s, so a job that has run 1.5 s has a low index. Without an
    interval a running job is ranked by its service when its run began (the guard against
    thrashing): a keeps G(0), a tie with b that a wins as the running job, at the unrelated
    arrival at 1.5 as at every pass. With one, a keeps its index of the last tick (G(0) until
    the tick at 2), then b preempts it: the paper's Figure 7 model."""
    dist = ServiceDistribution([1.0, 1.0, 1.0, 100.0])
    s = Scheduler(
        [Node("n", (0,))],
        make_policy("tiresias-g", distribution=dist, learn=False),
        config=SchedulerConfig(queue_thresholds=(1000.0,), interval=interval),
    )
    s.submit(spec("a", 1), 0)
    assert started(settle(s, 0)) == ["a"]
    s.submit(spec("b", 1, arrival=0.5), 0.5)
    assert settle(s, 0.5) == []  # a at 0.5 GPU-s is as likely to finish soon as b
    s.submit(spec("c", 1, arrival=1.5), 1.5)
    assert settle(s, 1.5) == []
    d = settle(s, 2.0)
    if interval:
        assert preempted(d) == ["a"] and started(d) == ["b"]
    else:
        assert d == []


def test_pass_looks_only_at_jobs_that_can_matter() -> None:
    """Finished jobs and waiting jobs behind a full cluster cost nothing in a pass."""
    s = sched(gpus=(8,))
    for i in range(200):  # history
        s.submit(spec(f"old{i}", 8, arrival=i), i)
        settle(s, i)
        s.exited(f"old{i}", i + 0.5, ExitOutcome.COMPLETED)
    for i in range(8):
        s.submit(spec(f"run{i}", 1, arrival=300), 300)
    settle(s, 300)
    for i in range(300):
        s.submit(spec(f"wait{i}", 1 + i % 3, arrival=301), 301)
    looked: list[str] = []
    job_of = s.policy.job
    s.policy.job = lambda key: looked.append(key[-1]) or job_of(key)  # type: ignore[method-assign]
    assert s.schedule(302) == []
    assert looked == ["wait0"]  # the best waiting job does not fit: nothing else can


@pytest.mark.parametrize("order", ["running-first", "first-start"])
def test_a_job_that_cannot_be_checkpointed_is_the_last_victim_of_its_queue(order: str) -> None:
    """a and b share Q2; b (started after a) would be the victim, but it cannot be
    checkpointed, so the newcomer takes a's GPU; the preempted a does not take b's, and the
    next newcomer takes the GPU of c, the other checkpointable job in Q2."""
    s = sched(gpus=(2,), queue_thresholds=(10.0,), queue_order=order)
    s.submit(spec("a", 1, duration=None), 0)
    s.submit(spec("b", 1, arrival=0.5, duration=None), 0.5)
    settle(s, 0.5)
    s.update_checkpointable("b", False, 1.0)
    assert [s.job(j).queue for j in "ab"] == [0, 0]
    s.submit(spec("c", 1, arrival=20, duration=None), 20)
    assert [s.job(j).queue for j in "ab"] == [1, 1]
    out = settle(s, 20)
    assert (preempted(out), started(out)) == (["a"], ["c"])
    assert s.job("b").state is JobState.RUNNING and s.job("a").state is JobState.WAITING
    s.submit(spec("d", 1, arrival=30, duration=None), 30)  # c has just reached Q2 too
    out = settle(s, 30)
    assert (preempted(out), started(out)) == (["c"], ["d"])  # again not b

    control = sched(gpus=(2,), queue_thresholds=(10.0,), queue_order=order)
    control.submit(spec("a", 1, duration=None), 0)
    control.submit(spec("b", 1, arrival=0.5, duration=None), 0.5)
    settle(control, 0.5)
    control.submit(spec("c", 1, arrival=20, duration=None), 20)
    assert preempted(settle(control, 20)) == ["b"]  # the later start, when both can be


def test_checkpointability_survives_a_snapshot() -> None:
    s = sched()
    s.submit(spec("a", 1), 0)
    settle(s, 0)
    s.update_checkpointable("a", False, 1.0)
    restored = Scheduler.from_state(s.export_state(), make_policy("tiresias-l"))
    assert restored.job("a").checkpointable is False


def learning(seed: list[float], gpus: int = 30) -> Scheduler:
    policy = make_policy("tiresias-l", distribution=ServiceDistribution(seed))
    config = SchedulerConfig(queue_thresholds=(36000.0,), learn_thresholds=True)
    return Scheduler([Node("n", tuple(range(gpus)))], policy, make_placement("consolidate"), config)


def test_learned_thresholds_replace_the_configured_ones() -> None:
    s = learning([3000.0] * 90 + [100000.0] * 10)  # a job past 3,000 GPU-s is a long one
    s.submit(spec("a", 1, duration=None), 0)
    settle(s, 0)
    assert s.policy.thresholds == (3000.0,)  # type: ignore[attr-defined]
    assert s.next_wakeup(0) == 3000.0  # not at the configured 36,000
    few = learning([3000.0] * 90 + [100000.0] * 9)  # 99 samples: not enough to learn from
    few.schedule(0)
    assert few.policy.thresholds == (36000.0,)  # type: ignore[attr-defined]


def test_relearning_never_reshuffles_a_running_job() -> None:
    # history: every job ran 50,000 GPU-s, so one FIFO queue (no threshold)
    s = learning([50000.0] * 100)
    for name in ["big", *(f"s{i}" for i in range(25))]:
        s.submit(spec(name, 1, duration=None), 0)
    settle(s, 0)
    assert s.policy.thresholds == ()  # type: ignore[attr-defined]
    for i in range(25):  # 25 jobs of 4,000 GPU-s: a job past 4,000 is now a long one
        s.exited(f"s{i}", 4000.0, ExitOutcome.COMPLETED)
    s.submit(spec("late", 1, arrival=4000, duration=None), 4000)
    settle(s, 4000.0)
    assert s.policy.thresholds == (4000.0,)  # type: ignore[attr-defined]
    big = s.job("big")  # at 4,000 GPU-s, but it keeps its queue while it runs
    assert big.state is JobState.RUNNING and big.queue == 0
    assert s.next_wakeup(4000.0) == 8000.0  # late's demotion; big has none in this run
    assert s.cancel("late", 4000.0) == [Kill("late")]
    s.exited("late", 4000.0, CP)
    state = json.loads(json.dumps(s.export_state()))
    r = Scheduler.from_state(state, make_policy("tiresias-l"), make_placement("consolidate"))
    assert r.policy.thresholds == (4000.0,) and r.next_wakeup(4000.0) is None  # type: ignore[attr-defined]
    r.submit(spec("w", 30, arrival=5000, duration=None), 5000)
    out = settle(r, 5000.0)  # a 30-GPU newcomer outranks nobody of queue 0 that runs
    assert out == [] and r.job("big").queue == 0
