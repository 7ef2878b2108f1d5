"""A stalled coordinator (SIGSTOP, then SIGCONT) judges node liveness by the time it ran:
it reads the heartbeats queued meanwhile before declaring any node down, and the time it was
stopped is no node's silence, so a healthy gang keeps running."""

from __future__ import annotations

import signal
import time

from coordinator.executors.agents.fleet import AgentFleet

from .conftest import Cluster, wait_until
from .test_faults import FOREVER, agent_log

TIMEOUT = 2.0


def _fleet_with(node: str, seen: float) -> AgentFleet:
    fleet = AgentFleet(lambda route, frame: None, TIMEOUT)
    fleet.on_register(b"r", {"node": node, "gpus": [{"index": 0}], "running": []}, seen)
    return fleet


def test_stalled_time_is_no_nodes_silence() -> None:
    fleet = _fleet_with("a", 100.0)
    fleet.stalled(15.0)  # stopped from 100 to 115
    assert not fleet.overdue(116.0) and fleet.poll(116.0) == []
    silent = fleet.poll(115.0 + TIMEOUT + 0.1)  # silent for longer than the timeout while up
    assert [e.node for e in silent] == ["a"]  # type: ignore[attr-defined]


def test_unstalled_silence_is_judged() -> None:
    fleet = _fleet_with("a", 100.0)
    assert fleet.overdue(100.0 + TIMEOUT + 0.1)


def test_gang_survives_a_stopped_coordinator(cluster: Cluster) -> None:
    cluster.start_coordinator("--heartbeat-timeout", str(TIMEOUT))
    cluster.start_agent("a", gpus=1)
    cluster.start_agent("b", gpus=1)
    cluster.wait_nodes("a", "b")
    job = cluster.submit("--steps", FOREVER, "--step-time", "0.05", workers=2)
    wait_until(lambda: "step 5" in agent_log(cluster, "a", job), 20, "the gang to train")
    assert cluster.job(job)["placement"].keys() == {"a", "b"}
    coordinator = cluster.coordinator
    assert coordinator is not None
    coordinator.send_signal(signal.SIGSTOP)
    try:
        time.sleep(4 * TIMEOUT)  # the fault itself: stopped for four heartbeat timeouts
    finally:
        coordinator.send_signal(signal.SIGCONT)
    cluster.reset_client()
    view = cluster.job(job)  # answered after the loop has judged the nodes again
    cluster.wait_nodes("a", "b")
    view = cluster.job(job)
    assert view["state"] == "running" and view["restarts"] == 0, view
    log = (cluster.tmp / "coordinator.log").read_text()
    # stopped between loop turns it says so; stopped inside one, the backlog read first
    assert "declaring it down" not in log, log[-2000:]
    cluster.cli("cancel", job)
