"""The live service and the simulator make the same decisions, in the same order, for the
same small scenario (2D-LAS, one 2-GPU node, a long job preempted twice by short ones).

Timing differs (process start-up, checkpoints), so the scenario keeps every event at least a
second away from any other it could swap with, and only the order is compared."""

from __future__ import annotations

import time

from coordinator.core.model import JobSpec, Node
from coordinator.service.store import Store
from coordinator.sim.engine import simulate

from .conftest import Cluster, wait_until

# (job, GPUs, arrival s, duration s): A crosses the 4 GPU-s threshold at t=2 and is demoted;
# B and C (Q1) preempt it at t=3; A resumes at ~5 and is preempted by D at t=7.
SCENARIO = [("j1", 2, 0.0, 6.0), ("j2", 1, 3.0, 2.0), ("j3", 1, 3.0, 2.0), ("j4", 1, 7.0, 1.0)]
STEP = 0.05


def simulated_order() -> list[tuple[str, str]]:
    specs = [JobSpec(j, g, arrival=a, duration=d) for j, g, a, d in SCENARIO]
    result = simulate(
        specs, [Node("n", (0, 1))], "tiresias-l", thresholds=(4.0,), keep_decisions=True
    )
    return [(type(d).__name__.lower(), d.job_id) for _, d in result.decisions]


def test_live_order_equals_simulated(cluster: Cluster) -> None:
    cluster.start_coordinator("--policy", "tiresias-l", "--thresholds", "4", "--grace", "5")
    cluster.start_agent("n", gpus=2)
    cluster.wait_nodes("n")
    t0 = time.monotonic()
    for job_id, gpus, arrival, duration in SCENARIO:
        wait_until(
            lambda a=arrival: time.monotonic() - t0 >= a, arrival + 5, "arrival time", interval=0.01
        )  # the workload's own schedule, not a synchronisation
        got = cluster.submit(
            "--steps", str(round(duration / STEP)), "--step-time", str(STEP), workers=gpus
        )
        assert got == job_id
    wait_until(
        lambda: all(cluster.state_of(j) == "completed" for j, *_ in SCENARIO),
        40,
        "every job to complete",
    )
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
    assert live == expected
