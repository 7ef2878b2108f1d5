"""Multi-host: agents in their own network namespaces (veth pairs on a private bridge, 10.x
addresses that exist only inside this test) reach the coordinator, run one job across both
"hosts", and the job's reports and logs travel back, all over CURVE with a key per user and
per agent. Without root it runs on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Cluster, wait_until
from .test_curve import keys, member


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[tuple[str, dict[str, list[str]], dict[str, str]]]:
    """(coordinator address host, node → command prefix, node → its address)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        yield "127.0.0.1", {"a": [], "b": []}, {"a": "127.0.0.1", "b": "127.0.0.1"}
        return
    tag = f"tr{os.getpid() % 100000}"
    net = f"10.213.{os.getpid() % 250 + 1}"
    bridge = f"{tag}br"
    made: list[str] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        made.append(bridge)
        _ip("addr", "add", f"{net}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        prefixes, addresses = {}, {}
        for i, node in enumerate(("a", "b"), start=2):
            ns, host_end, ns_end = f"{tag}{node}", f"{tag}{node}h", f"{tag}{node}n"
            _ip("netns", "add", ns)
            made.append(f"netns:{ns}")
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", host_end, "master", bridge)
            _ip("link", "set", host_end, "up")
            _ip("link", "set", ns_end, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{net}.{i}/24", "dev", ns_end)
            _ip("-n", ns, "link", "set", ns_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            prefixes[node] = ["ip", "netns", "exec", ns]
            addresses[node] = f"{net}.{i}"
        yield f"{net}.1", prefixes, addresses
    finally:
        for thing in reversed(made):
            if thing.startswith("netns:"):
                subprocess.run(["ip", "netns", "del", thing[6:]], capture_output=True)
            else:
                subprocess.run(["ip", "link", "del", thing], capture_output=True)


@pytest.mark.netns
def test_job_across_two_hosts(
    tmp_path: Path, hosts: tuple[str, dict[str, list[str]], dict[str, str]]
) -> None:
    bind, prefixes, addresses = hosts
    cluster = Cluster(tmp_path, bind_host=bind)
    operator = tmp_path / "operator"
    keys("generate", str(operator))
    cluster.keys = member(operator, tmp_path / "user", "user", "root")
    cluster.env["TIRESIAS_CURVE_KEYS"] = str(cluster.keys)
    try:
        cluster.start_coordinator("--heartbeat-timeout", "5", "--curve-keys", str(operator))
        for node, prefix in prefixes.items():
            node_keys = member(operator, tmp_path / f"agent-{node}", "agent", node)
            cluster.start_agent(
                node, 1, "--host", addresses[node], "--curve-keys", str(node_keys), prefix=prefix
            )
        cluster.wait_nodes("a", "b")
        nodes = {n["name"]: n["host"] for n in cluster.client.request("nodes")["nodes"]}
        assert nodes == addresses
        job = cluster.submit("--steps", "30", "--step-time", "0.05", workers=2)
        wait_until(
            lambda: cluster.job(job)["progress"].get("step"),
            20,
            "a progress report from inside a namespace",
        )
        wait_until(lambda: cluster.state_of(job) == "completed", 30, "the job to complete")
        assert cluster.job(job)["nodes_ever"] == ["a", "b"]
        logs = cluster.client.request("logs", job_id=job)["files"]
        assert sorted(logs) == ["a/chief-0.log", "b/worker-1.log"]
        assert all("done after 30 steps" in f["data"] for f in logs.values())
    finally:
        cluster.close()
