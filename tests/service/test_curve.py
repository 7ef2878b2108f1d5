"""CURVE over tcp://: one key per user and per agent, filed by the operator under the name it
speaks for. Unknown keys and plain connections get nowhere; an agent speaks only for its own
node; a job's runtime reports with its job's token."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from coordinator import protocol
from coordinator.service.client import Client, RequestError
from coordinator.service.curve import ClientKeys

from .conftest import Cluster, wait_until

pytestmark = pytest.mark.slow  # starts real processes


def keys(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "keys", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def member(operator: Path, home: Path, kind: str, name: str) -> Path:
    """A client key directory whose key the operator files as user/agent ``name``."""
    keys("init", str(home), "--server-key", str(operator / "server.key"))
    assert (home / "client.key_secret").stat().st_mode & 0o077 == 0
    keys(f"add-{kind}", str(operator), name, str(home / "client.key"))
    return home


@pytest.fixture
def curve_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    """A coordinator on TCP with CURVE, and the operator's key directory; the test's client
    is user root."""
    cluster = Cluster(tmp_path, bind_host="127.0.0.1")
    operator = tmp_path / "operator"
    assert "server keypair" in keys("generate", str(operator))
    cluster.keys = member(operator, tmp_path / "root-keys", "user", "root")
    cluster.env["TIRESIAS_CURVE_KEYS"] = str(cluster.keys)  # for `tiresias submit`
    try:
        cluster.start_coordinator("--curve-keys", str(operator))
        yield cluster, operator
    finally:
        cluster.close()


def raw(cluster: Cluster, key_dir: Path | None, msg_type: str, **fields: object) -> dict:
    """One request on a fresh connection with the keys in ``key_dir`` (None: a throwaway
    keypair the operator never filed); the reply, which must come."""
    if key_dir is None:
        public, secret = zmq.curve_keypair()
        assert cluster.keys is not None
        server = ClientKeys.load(cluster.keys).server_public
        client_keys = ClientKeys(public, secret, server)
    else:
        client_keys = ClientKeys.load(key_dir)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    client_keys.apply(sock)
    sock.connect(cluster.address)
    try:
        sock.send(protocol.encode(msg_type, id=1, **fields))
        assert sock.poll(5000), f"no reply to {msg_type}"
        return protocol.decode(sock.recv())
    finally:
        sock.close()


def test_keys_say_who_connects(curve_cluster: tuple[Cluster, Path], tmp_path: Path) -> None:
    cluster, operator = curve_cluster
    assert cluster.client.request("nodes")["nodes"] == []
    with Client(cluster.address, None, timeout=1.5) as plain, pytest.raises(RequestError):
        plain.request("nodes")  # no CURVE at all: the handshake never completes
    unknown = raw(cluster, None, "nodes")
    assert unknown["type"] == "error" and "unauthenticated" in unknown["error"]

    agent_keys = member(operator, tmp_path / "agent-keys", "agent", "member")
    rogue_keys = tmp_path / "rogue-keys"
    keys("init", str(rogue_keys), "--server-key", str(operator / "server.key"))
    cluster.start_agent("member", 1, "--curve-keys", str(agent_keys))
    cluster.start_agent("impostor", 1, "--curve-keys", str(agent_keys))  # member's key
    cluster.start_agent("rogue", 1, "--curve-keys", str(rogue_keys))  # a key nobody filed
    cluster.wait_nodes("member")
    register = {"gpus": [{"index": 0}], "running": []}
    for key_dir, node in ((rogue_keys, "rogue"), (agent_keys, "impostor"), (None, "x")):
        reply = raw(cluster, key_dir, "register", node=node, **register)
        assert reply["type"] == "error" and f"may not speak for node '{node}'" in reply["error"]
    # a user's key is not an agent's
    reply = raw(cluster, cluster.keys, "register", node="member", **register)
    assert reply["type"] == "error" and "user 'root' may not speak" in reply["error"]

    job = cluster.submit("--steps", "100000", "--step-time", "0.05")
    wait_until(
        lambda: cluster.job(job)["progress"].get("step"),
        30,
        "the job's runtime to report through CURVE with its token",
    )
    names = {n["name"] for n in cluster.client.request("nodes")["nodes"]}
    assert names == {"member"}
    # an agent refused for its identity (a key filed for another node, or for none) gives up
    # after a few tries, saying why, with exit code 2
    for node in ("impostor", "rogue"):
        assert cluster.agents[node].wait(60) == 2, node
        said = (cluster.tmp / f"agent-{node}.log").read_text()
        assert "\ntiresias-agent: " in said and "may not" in said, said[-1000:]

    # nobody but the job itself (by its token), its owner or an admin reports on it
    for token in (None, "guess"):
        fields = {"job_id": job, "step": 10**9} | ({"token": token} if token else {})
        assert raw(cluster, None, "report", **fields)["type"] == "error"
    # an agent may not end a job on a node not its own, and its own node never ran it
    exited = {"job_id": job, "restart": 0, "outcome": "completed", "processes": []}
    spare = member(operator, tmp_path / "spare-keys", "agent", "spare")
    reply = raw(cluster, spare, "exited", node="member", **exited)
    assert reply["type"] == "error" and "may not speak for node 'member'" in reply["error"]
    # a user other than the owner may look, not touch
    bob = member(operator, tmp_path / "bob-keys", "user", "bob")
    reply = raw(cluster, bob, "cancel", job_id=job)
    assert reply["type"] == "error" and "belongs to 'root'" in reply["error"]
    reply = raw(cluster, bob, "logs", job_id=job)
    assert reply["type"] == "error" and "belongs to 'root'" in reply["error"]
    assert raw(cluster, bob, "status", job_id=job)["job"]["owner"] == "root"
    assert cluster.state_of(job) == "running"
    assert cluster.job(job)["progress"]["step"] < 10**9
    assert cluster.client.request("cancel", job_id=job)["state"] in ("preempting", "cancelled")
    wait_until(lambda: cluster.state_of(job) == "cancelled", 20, "the owner's cancel")


def test_tcp_without_curve_is_refused(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator.service.cli",
            "--bind",
            "tcp://127.0.0.1:5599",
            "--state",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "plain TCP carries no identity" in out.stderr


def test_keys_commands_say_what_they_made_in_json(tmp_path: Path) -> None:
    made = json.loads(keys("generate", str(tmp_path / "operator"), "--json"))
    assert Path(made["directory"]) == tmp_path / "operator"
    assert Path(made["server_key"]).read_text() == (tmp_path / "operator/server.key").read_text()
    home = tmp_path / "alice"
    public = json.loads(keys("init", str(home), "--server-key", made["server_key"], "--json"))
    assert Path(public["public_key"]) == home / "client.key"
    added = json.loads(keys("add-user", made["directory"], "alice", public["public_key"], "--json"))
    assert added["name"] == "alice"
    assert Path(added["key"]).read_text() == (home / "client.key").read_text()
