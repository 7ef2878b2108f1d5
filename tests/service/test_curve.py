"""CURVE: with keys configured, only clients and agents holding an authorized key get in."""

from __future__ import annotations

import subprocess
import sys

import pytest
import zmq.auth

from coordinator.service.client import Client, RequestError
from coordinator.service.keys import KEYS_ENV, ClientKeys

from .conftest import Cluster, wait_until


def test_curve_refuses_unauthorized_clients_and_agents(cluster: Cluster) -> None:
    keys = cluster.tmp / "keys"
    out = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "keys", "generate", str(keys)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "wrote CURVE keys" in out.stdout
    cluster.keys = keys
    cluster.start_coordinator("--curve-keys", str(keys))

    with Client(cluster.address, ClientKeys.load(keys), timeout=5) as good:
        assert good.request("nodes")["nodes"] == []
    with Client(cluster.address, None, timeout=1.5) as plain, pytest.raises(RequestError):
        plain.request("nodes")
    # a well-formed keypair the coordinator has never authorized
    rogue_dir = cluster.tmp / "rogue"
    rogue_dir.mkdir()
    _public, secret = zmq.auth.create_certificates(str(rogue_dir), "client")
    rogue = ClientKeys(*zmq.auth.load_certificate(secret), ClientKeys.load(keys).server_public)
    with Client(cluster.address, rogue, timeout=1.5) as c, pytest.raises(RequestError):
        c.request("nodes")

    cluster.start_agent("intruder", 1)  # no keys
    cluster.start_agent("member", 1, "--curve-keys", str(keys))
    cluster.wait_nodes("member")
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator.cli",
            "nodes",
            "--json",
            "--coordinator",
            cluster.address,
            "--curve-keys",
            str(keys),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"member"' in cli.stdout and "intruder" not in cli.stdout
    assert cluster.agents["intruder"].poll() is None  # it keeps knocking, unheard

    # a job's runtime reports through the same keys (the agent hands it the key directory)
    cluster.env[KEYS_ENV] = str(keys)  # for `tiresias submit`
    job = cluster.submit("--steps", "5", "--step-time", "0.05")
    wait_until(lambda: cluster.state_of(job) == "completed", 30, "the keyed job to complete")
    wait_until(
        lambda: cluster.job(job)["progress"].get("iterations", 0) > 0,
        10,
        "the job's progress reports to arrive through CURVE",
    )
