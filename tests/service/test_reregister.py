"""Agents find their coordinator again after it was busy, restarted, or both: a frozen
coordinator (SIGSTOP, longer than the agent's reconnect timeout) that then resumes, is
killed and restarted, or a dead one restarted after the agents gave up on it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from helpers import wait_until

from .conftest import Cluster, FakeCoordinator

pytestmark = pytest.mark.slow  # starts real processes


def _reconnects(cluster: Cluster, name: str) -> int:
    return (cluster.tmp / f"agent-{name}.log").read_text().count("reconnecting")


@pytest.mark.parametrize("case", ["busy-then-resume", "busy-then-restart", "down-then-restart"])
def test_agents_register_again(cluster: Cluster, case: str) -> None:
    cluster.start_coordinator("--heartbeat-timeout", "30")
    cluster.start_agent("a")
    cluster.wait_nodes("a")
    job = cluster.submit("--steps", "100000", "--step-time", "0.05")
    wait_until(lambda: cluster.state_of(job) == "running", 15, "the job to run")
    coordinator = cluster.coordinator
    assert coordinator is not None
    before = _reconnects(cluster, "a")
    if case == "down-then-restart":
        cluster.kill_coordinator()
    else:
        coordinator.send_signal(signal.SIGSTOP)
    # the agent gives up on the silent coordinator (5 s) and reconnects
    wait_until(lambda: _reconnects(cluster, "a") > before, 20, "the agent to reconnect")
    if case == "busy-then-resume":
        coordinator.send_signal(signal.SIGCONT)
    else:
        if case == "busy-then-restart":
            cluster.kill_coordinator()
        cluster.start_coordinator()
    cluster.wait_nodes("a", timeout=20)
    # the job kept its place: still running on the same node, not lost and restarted
    view = cluster.job(job)
    assert view["state"] == "running" and view["restarts"] == 0, view
    assert cluster.client.request("cancel", job_id=job)["state"] in ("preempting", "cancelled")


def test_register_lost_in_a_busy_coordinator_is_sent_again(tmp_path: Path) -> None:
    """The coordinator took the agent's messages but answered none (busy), so the agent
    reconnected and registered; then it restarted without having read that register. The
    restarted one refuses the heartbeats: the agent must register again."""
    fake = FakeCoordinator(tmp_path)
    try:
        fake.expect(lambda m: m["type"] == "register", "the first register")
        fake.expect(lambda m: m["type"] == "heartbeat", "a heartbeat")
        fake.busy = True
        fake.expect(lambda m: m["type"] == "register", "a register after the agent gave up")
        fake.restart()
        fake.busy = False
        fake.expect(lambda m: m["type"] == "register", "a register to the restarted one")
        fake.expect(lambda m: m["type"] == "heartbeat" and fake.route, "answered heartbeats")
        assert fake.proc.poll() is None
    finally:
        fake.close()
