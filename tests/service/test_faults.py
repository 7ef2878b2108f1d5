"""Faults, each real: kill -9 of the coordinator, a dead agent, a job ignoring preemption.

Jobs that must outlive a fault run "forever" (FOREVER steps) and are cancelled at the end, so
no test depends on how fast the machine restarts a coordinator or an agent."""

from __future__ import annotations

import time

from .conftest import Cluster, wait_until

FOREVER = "1000000"


def agent_log(cluster: Cluster, node: str, job_id: str, name: str = "chief-0") -> str:
    """The log under the job's key (``<job id>-<state instance>``), read without asking the
    coordinator (it may be down)."""
    paths = (cluster.tmp / "agents" / node / "logs").glob(f"{job_id}-*/{name}.log")
    return "".join(p.read_text() for p in paths)


def test_coordinator_kill9_and_restart_loses_nothing(cluster: Cluster) -> None:
    # a small snapshot interval so that recovery uses a snapshot and a journal tail
    cluster.start_coordinator(
        "--thresholds", "1000", "--heartbeat-timeout", "3", "--snapshot-every", "4"
    )
    cluster.start_agent("a", gpus=2)
    cluster.start_agent("b", gpus=2)
    cluster.wait_nodes("a", "b")
    steady = cluster.submit("--steps", FOREVER, "--step-time", "0.05", workers=2)
    quick = cluster.submit("--steps", "30", "--step-time", "0.1")
    blocked = cluster.submit("--steps", "20", "--step-time", "0.05", workers=2)
    wait_until(
        lambda: cluster.state_of(steady) == "running" and cluster.state_of(quick) == "running",
        15,
        "two jobs to run",
    )
    assert cluster.state_of(blocked) == "waiting"
    before = {j: cluster.job(j) for j in (steady, quick, blocked)}
    quick_node = next(iter(before[quick]["placement"]))

    cluster.kill_coordinator()
    # the quick job finishes while nobody listens; its agent must keep the report
    wait_until(
        lambda: "done after 30 steps" in agent_log(cluster, quick_node, quick),
        15,
        "the quick job to finish while the coordinator is down",
    )
    cluster.start_coordinator()
    cluster.wait_nodes("a", "b")

    after = cluster.job(steady)
    assert after["state"] == "running" and after["restarts"] == 0
    assert after["placement"] == before[steady]["placement"]
    assert after["attained"] >= before[steady]["attained"]
    assert after["queue"] == before[steady]["queue"]
    wait_until(lambda: cluster.state_of(quick) == "completed", 10, "the quick job's report")
    assert cluster.job(quick)["restarts"] == 0
    wait_until(lambda: cluster.state_of(blocked) == "running", 15, "the waiting job to start")
    wait_until(lambda: cluster.state_of(blocked) == "completed", 40, "the waiting job to end")
    assert cluster.state_of(steady) == "running"
    cluster.cli("cancel", steady)
    wait_until(lambda: cluster.state_of(steady) == "cancelled", 15, "the cancellation")
    for job_id in before:  # none ran twice: one start per process, no restart
        view = cluster.job(job_id)
        assert cluster.logs(job_id).count("start at step") == view["workers"], job_id
        assert view["restarts"] == 0


def test_agent_death_resumes_job_elsewhere_from_checkpoint(cluster: Cluster) -> None:
    cluster.start_coordinator("--heartbeat-timeout", "2.5", "--grace", "3")
    cluster.start_agent("a", gpus=1)
    cluster.start_agent("b", gpus=1)
    cluster.wait_nodes("a", "b")
    job = cluster.submit(
        "--steps", FOREVER, "--step-time", "0.05", "--checkpoint-every", "10", workers=2
    )
    wait_until(lambda: "saved step 20" in agent_log(cluster, "a", job), 20, "two checkpoints")
    cluster.start_agent("c", gpus=2)
    cluster.wait_nodes("c")
    cluster.kill_agent("a")

    wait_until(lambda: cluster.job(job)["restarts"] == 1, 15, "the job to be resumed")
    wait_until(lambda: "start at step" in agent_log(cluster, "c", job), 30, "the resumed run")
    view = cluster.job(job)
    assert view["state"] == "running" and "c" in view["nodes_ever"]
    resumed = agent_log(cluster, "c", job)
    start = int(resumed.split("start at step ")[-1].split()[0])
    assert start >= 20 and start % 10 == 0, resumed
    # the survivor on b was stopped when a was lost, before the job resumed
    assert "restart 1" in agent_log(cluster, "c", job) + agent_log(cluster, "c", job, "worker-1")
    nodes = {n["name"] for n in cluster.client.request("nodes")["nodes"]}
    assert "a" not in nodes
    cluster.cli("cancel", job)


def test_preempted_job_ignoring_the_signal_is_killed_at_the_deadline(cluster: Cluster) -> None:
    grace = 1.5
    # Q1 holds 2 GPU-s: the short job stays ahead of the demoted one on a loaded machine
    cluster.start_coordinator(
        "--thresholds", "2", "--grace", str(grace), "--heartbeat-timeout", "3"
    )
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    stubborn = cluster.submit("--steps", FOREVER, "--step-time", "0.05", "--ignore-signal")
    wait_until(lambda: cluster.job(stubborn)["queue"] == 1, 15, "the demotion")
    short = cluster.submit("--steps", "2", "--step-time", "0.05")
    t0 = time.monotonic()
    wait_until(lambda: cluster.job(stubborn)["state"] == "preempting", 10, "the preemption")
    wait_until(lambda: cluster.state_of(short) != "waiting", 15, "the short job to start")
    waited = time.monotonic() - t0
    assert waited >= grace * 0.8, f"GPU reused after {waited:.2f}s, before the grace period"
    log = agent_log(cluster, "a", stubborn)
    assert "got SIGTERM" in log and "checkpointed" not in log
    wait_until(lambda: cluster.state_of(short) == "completed", 15, "the short job to finish")
    view = cluster.job(stubborn)
    assert view["restarts"] == 1 and view["preemptions"] == 1
    cluster.cli("cancel", stubborn)
