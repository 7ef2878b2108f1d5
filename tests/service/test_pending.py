"""Why a job waits, where it stands in line, and its history, from a real coordinator on its
manual clock (so demotion, preemption and promotion happen at the scenario's times), through
the real CLI; and the simulator tells the same reasons for the same events."""

from __future__ import annotations

import json

from coordinator.core.model import JobSpec, Node
from coordinator.sim.engine import simulate

from .conftest import Cluster, wait_until

FOREVER = "1000000"
STEP = "0.05"
FOREVER_ARGS = ("--steps", FOREVER, "--step-time", STEP)


def simulated_reasons() -> dict[str, list[tuple[float, int, str, str]]]:
    """The scenario in the simulator: j1 (2 GPUs) and j2 (1 GPU) at t=0 on one 2-GPU node,
    4 GPU-s threshold, PROMOTEKNOB 10."""
    specs = [JobSpec("j1", 2, 0.0, 100.0), JobSpec("j2", 1, 0.0, 100.0)]
    result = simulate(
        specs,
        [Node("n", (0, 1))],
        "tiresias-l",
        thresholds=(4.0,),
        promote_knob=10.0,
        explain=True,
    )
    return {r.job_id: r.reasons for r in result.jobs}


def test_reasons_positions_and_history_live_and_simulated(cluster: Cluster) -> None:
    cluster.start_coordinator(
        "--manual-clock", "--policy", "tiresias-l", "--thresholds", "4", "--promote-knob", "10"
    )
    cluster.start_agent("n", gpus=2)
    cluster.wait_nodes("n")
    sim = simulated_reasons()

    assert cluster.submit("--steps", FOREVER, "--step-time", STEP, workers=2) == "j1"
    wait_until(lambda: cluster.state_of("j1") == "running", 30, "j1 to start")
    assert cluster.submit("--steps", FOREVER, "--step-time", STEP) == "j2"
    wait_until(lambda: cluster.job("j2")["pending"] is not None, 30, "j2 to be explained")
    pending = cluster.job("j2")["pending"]
    assert (pending["queue"], pending["position"], pending["overall"]) == (0, 1, 1)
    assert (pending["reason"], pending["ahead"], pending["ahead_gpus"]) == ("gpus", 1, 2)
    assert pending["text"] == sim["j2"][0][3]
    assert pending["text"] == (
        "waiting for 1 GPU (0 free): the 1 job ahead of it (Q1: 1) holds or needs 2 of 2"
    )
    queue = cluster.cli("queue").stdout
    assert "LINE" in queue and "why waiting:" in queue
    assert f"j2  Q1 #1, 1st overall: {pending['text']}" in queue
    listed = json.loads(cluster.cli("queue", "--json").stdout)["jobs"]  # the first screen
    assert [j["pending"] for j in listed if j["job_id"] == "j2"] == [pending]
    every = json.loads(cluster.cli("queue", "--json", "--all").stdout)
    assert [j["pending"] for j in every if j["job_id"] == "j2"] == [pending]

    # t=2: j1 reaches 4 GPU-s, is demoted to Q2, and j2 (Q1) takes its GPUs
    cluster.client.request("advance", seconds=2.0)
    wait_until(lambda: cluster.state_of("j2") == "running", 60, "j2 to start")
    wait_until(lambda: cluster.state_of("j1") == "waiting", 60, "j1 to checkpoint")
    j1 = cluster.job("j1")
    assert (j1["pending"]["reason"], j1["pending"]["queue"]) == ("gpus", 1)
    assert j1["pending"]["promotion_at"] == 2.0 + 10 * 2.0
    assert j1["pending"]["text"] == sim["j1"][0][3]
    assert "in Q2 since its service passed 4 GPU-s (4 GPU-s attained)" in j1["pending"]["text"]
    assert "starvation promotion to Q1 in 20s" in j1["pending"]["text"]
    assert [e["kind"] for e in j1["history"]] == ["submitted", "started", "demoted", "preempted"]
    preempted = j1["history"][-1]["text"]
    assert preempted.startswith("preempted") and preempted.endswith(
        " for j2 (Q1), a higher queue than its Q2"
    )

    # t=22: starvation promotion brings j1 back to Q1; j2, demoted to Q2 at t=6, yields
    cluster.client.request("advance", seconds=20.0)
    wait_until(
        lambda: cluster.state_of("j1") == "running" and cluster.state_of("j2") == "waiting",
        60,
        "j1's promotion and j2's preemption",
    )
    promoted, restarted = cluster.job("j1")["history"][-2:]
    assert (promoted["kind"], restarted["kind"]) == ("promoted", "restarted")
    assert promoted["text"] == "promoted to Q1: it had waited 10× as long as it ran"
    j2 = cluster.job("j2")
    assert [(t, q, r) for t, q, r, _ in sim["j2"]] == [(0.0, 0, "gpus"), (22.0, 1, "gpus")]
    assert (j2["pending"]["reason"], j2["pending"]["queue"]) == ("gpus", 1)
    assert j2["pending"]["text"] == sim["j2"][1][3]
    assert "starvation promotion to Q1 in 3m" in j2["pending"]["text"]
    assert [e["kind"] for e in j2["history"]] == [
        "submitted",
        "started",
        "demoted",
        "preempted",
    ]
    text = cluster.cli("status", "j2").stdout
    assert f"waiting    Q2 #1, 1st overall: {j2['pending']['text']}" in text
    assert "history:" in text and text.rstrip().endswith(" for j1 (Q1), a higher queue than its Q2")
    assert "  demoted to Q2: its service passed 4 GPU-s" in text


def test_placement_and_blocking_reasons_live(cluster: Cluster) -> None:
    """yarn-cs with yarn's strict placement on two 2-GPU nodes, one GPU free on each: a
    2-GPU job needs them on one node, and the 1-GPU job behind it is blocked."""
    cluster.start_coordinator("--policy", "yarn-cs")
    for node in ("a", "b"):
        cluster.start_agent(node, gpus=2)
    cluster.wait_nodes("a", "b")

    def running(job_id: str) -> None:
        wait_until(lambda: cluster.state_of(job_id) == "running", 30, f"{job_id} to start")

    for job_id, workers in (("j1", 1), ("j2", 2), ("j3", 1)):  # j1 and j3 on a, j2 on b
        assert cluster.submit(*FOREVER_ARGS, workers=workers) == job_id
        running(job_id)
    cluster.cli("cancel", "j2")
    wait_until(lambda: cluster.state_of("j2") == "cancelled", 30, "j2's end")
    assert cluster.submit(*FOREVER_ARGS) == "j4"  # on b
    running("j4")
    cluster.cli("cancel", "j1")
    wait_until(lambda: cluster.state_of("j1") == "cancelled", 30, "j1's end")
    assert cluster.submit(*FOREVER_ARGS, workers=2) == "j5"
    assert cluster.submit(*FOREVER_ARGS) == "j6"
    wait_until(lambda: cluster.job("j6")["pending"] is not None, 30, "j6 to be explained")
    j5, j6 = cluster.job("j5")["pending"], cluster.job("j6")["pending"]
    assert (j5["reason"], j5["text"]) == (
        "placement",
        "needs 2 GPUs on one node; the largest free block is 1",
    )
    assert (j6["reason"], j6["position"]) == ("blocked", 2)
    assert j6["text"] == "behind j5, which cannot start yet (yarn-cs starts jobs in order)"


def test_after_a_restart_jobs_wait_for_the_nodes_to_register_again(cluster: Cluster) -> None:
    cluster.start_coordinator("--heartbeat-timeout", "120")
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    assert cluster.submit(*FOREVER_ARGS) == "j1"
    wait_until(lambda: cluster.state_of("j1") == "running", 30, "j1 to start")
    assert cluster.submit(*FOREVER_ARGS) == "j2"
    cluster.kill_agent("a")
    cluster.kill_coordinator()
    cluster.start_coordinator()
    pending = cluster.job("j2")["pending"]
    assert pending["reason"] == "restart"
    assert pending["text"].startswith(
        "nothing is scheduled until node a registers again after the coordinator's restart "
        "(at most 120 s); then: waiting for 1 GPU (0 free)"
    ), pending["text"]
