"""The live service and the simulator make the same decisions, in the same order, for the
same small scenario (2D-LAS, one 2-GPU node, a long job preempted twice by short ones): once
through the run book alone, the machines played by the test, and once through a real
coordinator, agent and jobs.

The coordinator runs on its manual clock: attained service grows only when the test advances
it, so the demotion and each arrival happen at the scenario's times however long the
machine takes to start or stop a process, and only the order is compared."""

from __future__ import annotations

import pytest

from coordinator.core.model import JobSpec, Node
from coordinator.service.commands import KillParts, LaunchGang, Signal
from coordinator.service.store import Store
from coordinator.sim.engine import simulate

from .conftest import Cluster, wait_until
from .runbook import Bench

# (job, GPUs, arrival s, duration s): A crosses the 4 GPU-s threshold at t=2 and is demoted;
# B and C (Q1) preempt it at t=3; A resumes at ~5 and is preempted by D at t=7.
SCENARIO = [("j1", 2, 0.0, 6.0), ("j2", 1, 3.0, 2.0), ("j3", 1, 3.0, 2.0), ("j4", 1, 7.0, 1.0)]
STEP = 0.05
#: Live A runs until it is cancelled after its last start, so it can never end on its own
#: between the scenario's events, however slow the machine is.
FOREVER = "1000000"


def simulated_order(policy: str = "tiresias-l") -> list[tuple[str, str]]:
    specs = [JobSpec(j, g, arrival=a, duration=d) for j, g, a, d in SCENARIO]
    result = simulate(specs, [Node("n", (0, 1))], policy, thresholds=(4.0,), keep_decisions=True)
    return [(type(d).__name__.lower(), d.job_id) for _, d in result.decisions]


@pytest.mark.parametrize("policy", ["tiresias-l", "tiresias-g"])
def test_run_book_order_equals_simulated(policy: str) -> None:
    """Each launch runs at once, each preemption is answered by a checkpointed exit, and a
    job completes as soon as it has run its duration (tiresias-g learns from j2 and j3's
    completions, live as in the simulator)."""
    bench = Bench(policy=policy, queue_thresholds=(4.0,))
    bench.node("n", 2)
    durations = {j: d for j, _, _, d in SCENARIO}
    arrivals = sorted(SCENARIO, key=lambda s: s[2])
    running: set[str] = set()
    for tick in range(round(20 / STEP)):
        t = tick * STEP
        while arrivals and arrivals[0][2] <= t + 1e-9:
            job_id, gpus, _, _ = arrivals.pop(0)
            bench.submit(job_id, gpus, t)
        for job_id in sorted(running):
            if bench.sched.job(job_id).total_executed_at(t) >= durations[job_id] - 1e-9:
                running.discard(job_id)
                bench.exit(job_id, "n", "completed", t)
        commands = bench.schedule(t)
        while commands:  # the machines answer at once; the core may decide again
            for c in commands:
                if isinstance(c, LaunchGang):
                    running.add(c.gang.job_id)
                elif isinstance(c, Signal | KillParts):
                    running.discard(c.job_id)
                    bench.exit(c.job_id, "n", "checkpointed", t, codes=(75,))
            commands = bench.take() + bench.schedule(t)
    assert not running and all(bench.state(j) == "completed" for j in durations)
    assert bench.ledger.decisions == simulated_order(policy)


#: The coordinator's options for the scenario (the executor's come on top).
SCENARIO_OPTIONS = (
    "--manual-clock",
    "--policy",
    "tiresias-l",
    "--thresholds",
    "4",
    "--grace",
    "30",
)


def test_live_order_equals_simulated(cluster: Cluster) -> None:
    cluster.start_coordinator(*SCENARIO_OPTIONS)
    cluster.start_agent("n", gpus=2)
    cluster.wait_nodes("n")
    assert live_order(cluster) == [*simulated_order(), ("kill", "j1")]


def live_order(cluster: Cluster) -> list[tuple[str, str]]:
    """Play the scenario on a running coordinator whose one node has 2 GPUs; the decisions
    it logged (start/preempt/kill, job), after checking the simulator's are as expected."""

    def short_job(gpus: int, duration: float) -> str:
        return cluster.submit(
            "--steps", str(round(duration / STEP)), "--step-time", str(STEP), workers=gpus
        )

    def running(job_id: str, restarts: int) -> bool:
        view = cluster.job(job_id)
        return view["state"] == "running" and view["restarts"] == restarts

    assert cluster.submit("--steps", FOREVER, "--step-time", str(STEP), workers=2) == "j1"
    wait_until(lambda: running("j1", 0), 30, "A to start")
    cluster.client.request("advance", seconds=3.0)  # t=3: A has 6 GPU-s, in Q2
    assert [short_job(1, 2.0), short_job(1, 2.0)] == ["j2", "j3"]
    wait_until(
        lambda: cluster.state_of("j2") == cluster.state_of("j3") == "completed", 60, "B and C"
    )
    wait_until(lambda: running("j1", 1), 30, "A to resume")
    cluster.client.request("advance", seconds=2.0)  # t=7 in the scenario's terms
    assert short_job(1, 1.0) == "j4"
    wait_until(lambda: cluster.state_of("j4") == "completed" and running("j1", 2), 60, "D, then A")
    cluster.cli("cancel", "j1")  # the scenario's A would now run to its end
    wait_until(lambda: cluster.state_of("j1") == "cancelled", 60, "A's cancellation")
    audit = Store(cluster.state)  # WAL: readable while the coordinator runs
    live = [(kind, job_id) for _, kind, job_id, _ in audit.decisions()]
    audit.close()
    expected = simulated_order()
    assert expected == [
        ("start", "j1"),
        ("preempt", "j1"),
        ("start", "j2"),
        ("start", "j3"),
        ("start", "j1"),
        ("preempt", "j1"),
        ("start", "j4"),
        ("start", "j1"),
    ]
    return live
