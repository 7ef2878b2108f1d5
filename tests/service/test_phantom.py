"""No phantom runs: a second agent started under a node name that is connected is refused
(and gives up with exit 2 and the reason), so it can never take the node's jobs; over ipc,
and over TCP with CURVE where both agents hold the node's key."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import wait_until

from .conftest import Cluster
from .test_curve import keys, member

pytestmark = pytest.mark.slow  # starts real processes


@pytest.mark.parametrize("transport", ["ipc", "curve"])
def test_a_second_agent_under_a_connected_name_is_refused(tmp_path: Path, transport: str) -> None:
    extra: tuple[str, ...] = ()
    if transport == "curve":
        cluster = Cluster(tmp_path, bind_host="127.0.0.1")
        operator = tmp_path / "operator"
        keys("generate", str(operator))
        cluster.keys = member(operator, tmp_path / "root-keys", "user", "root")
        cluster.env["TIRESIAS_CURVE_KEYS"] = str(cluster.keys)
        extra = ("--curve-keys", str(member(operator, tmp_path / "a-keys", "agent", "a")))
        coordinator_args: tuple[str, ...] = ("--curve-keys", str(operator))
    else:
        cluster = Cluster(tmp_path)
        coordinator_args = ()
    try:
        cluster.start_coordinator("--heartbeat-timeout", "2", *coordinator_args)
        cluster.start_agent("a", 1, *extra)
        cluster.wait_nodes("a")
        job = cluster.submit("--steps", "100000", "--step-time", "0.05")
        wait_until(lambda: cluster.job(job)["progress"].get("step"), 30, "the job to report")
        cluster.start_agent("a", 1, *extra, label="twin")
        twin = cluster.agents["twin"]
        assert twin.wait(timeout=60) == 2  # refused a few times, then it gives up
        assert "is already connected" in (tmp_path / "agent-twin.log").read_text()
        view = cluster.job(job)
        assert view["state"] == "running" and view["restarts"] == 0, view
        step = view["progress"]["step"]
        wait_until(
            lambda: cluster.job(job)["progress"]["step"] > step, 30, "the job to go on training"
        )
        nodes = cluster.client.request("nodes")["nodes"]
        assert [(n["name"], n["connected"]) for n in nodes] == [("a", True)]
        assert cluster.client.request("cancel", job_id=job)["state"] in ("preempting", "cancelled")
        wait_until(lambda: cluster.state_of(job) == "cancelled", 20, "the cancel")
    finally:
        cluster.close()
