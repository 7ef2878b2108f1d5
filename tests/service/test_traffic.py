"""Measured per-PS traffic reaches placement: the node agent runs a parameter-server job's
processes under ibverbs-tap and reports the bytes each PS carried; the coordinator's profiler
stage turns them into S_J when the job's runtime reported no tensor sizes."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator import protocol
from coordinator.cli.tables import format_job
from coordinator.gang import free_local_port
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.identity import user_name
from tiresias_launch import contract

from .conftest import FakeCoordinator, in_process_coordinator, wait_until

pytestmark = pytest.mark.slow  # starts real processes

#: A parameter server: accept the workers' connections and drain them.
PS = """
import socket, sys, threading
srv = socket.create_server(("127.0.0.1", int(sys.argv[1])))
def drain(c):
    while c.recv(1 << 16):
        pass
while True:
    threading.Thread(target=drain, args=(srv.accept()[0],), daemon=True).start()
"""
#: A worker that pushes 3 MB of gradients to ps0 for every 1 MB to ps1, then keeps running.
WORKER = """
import json, os, socket, threading, time
ps = json.loads(os.environ["TF_CONFIG"])["cluster"]["ps"]
def connect(address):
    host, port = address.rsplit(":", 1)
    while True:
        try:
            return socket.create_connection((host, int(port)))
        except ConnectionRefusedError:
            time.sleep(0.05)
ps0, ps1 = connect(ps[0]), connect(ps[1])
for _ in range(3):
    ps0.sendall(b"g" * (1 << 20))
ps1.sendall(b"g" * (1 << 20))
print("pushed", flush=True)
threading.Event().wait()
"""


def _process(role: str, index: int, code: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    return {
        "role": role,
        "task_index": index,
        "argv": [sys.executable, "-c", code, *args],
        "env": {**env, contract.ROLE: role, contract.TASK_INDEX: str(index)},
        "gpus": [] if role == "ps" else [0],
    }


def test_the_agent_measures_a_ps_jobs_traffic_per_ps(tmp_path: Path) -> None:
    fake = FakeCoordinator(tmp_path)
    try:
        fake.expect(lambda m: m["type"] == "register", "the agent to register")
        ports = [free_local_port(), free_local_port()]
        ps = [f"127.0.0.1:{p}" for p in ports]
        env = {
            contract.MODE: "ps",
            contract.NUM_PS: "2",
            contract.JOB_TOKEN: "secret",
            "TF_CONFIG": json.dumps({"cluster": {"ps": ps, "chief": ["127.0.0.1:1"]}}),
        }
        processes = [
            _process("chief", 0, WORKER, env),
            _process("ps", 0, PS, env, str(ports[0])),
            _process("ps", 1, PS, env, str(ports[1])),
        ]
        fake.send(
            protocol.encode(
                "launch",
                job_id="j1",
                restart=0,
                processes=processes,
                grace=1.0,
                owner=user_name(os.geteuid()),
            )
        )

        def pushed_all(m: dict[str, Any]) -> bool:
            counts = m.get("ps_bytes") or {}
            return m["type"] == "report" and counts.get(ps[1], 0) >= 1 << 20

        report = fake.expect(pushed_all, "a measurement of all the pushed bytes")
        assert (report["job_id"], report["restart"], report["node"]) == ("j1", 0, "n1")
        assert report["token"] == "secret"  # the job's token: the coordinator accepts it
        assert set(report["ps_bytes"]) == set(ps)
        assert report["ps_bytes"][ps[0]] == 3 * report["ps_bytes"][ps[1]] == 3 << 20
        fake.send(protocol.encode("kill", job_id="j1", restart=0))
        fake.expect(lambda m: m["type"] == "exited", "the job to be killed")
    finally:
        fake.close()


@pytest.fixture
def coord(tmp_path: Path) -> Iterator[Coordinator]:
    opts = Options(bind=f"ipc://{tmp_path}/c.sock", state=tmp_path, allow_root_jobs=True)
    with in_process_coordinator(opts) as c:
        yield c


def test_measured_traffic_is_the_skew_of_a_job_whose_runtime_reports_no_tensor_sizes(
    coord: Coordinator,
) -> None:
    with Client(coord.address, timeout=5) as c:
        c.request("register", node="a", gpus=[{"index": 0}, {"index": 1}], running=[])
        job = c.request("submit", argv=["train.py"], workers=2, ps=2)["job_id"]

        def skew() -> float | None:
            return c.request("status", job_id=job)["job"]["skew"]

        def source() -> str | None:
            return c.request("status", job_id=job)["job"]["skew_source"]

        def agent_measured(node: str, ps0: int, ps1: int) -> None:
            ps_bytes = {"10.0.0.1:2222": ps0, "10.0.0.2:2222": ps1}
            c.send("report", job_id=job, restart=0, node=node, ps_bytes=ps_bytes)

        agent_measured("a", 300, 100)  # the busiest PS carried 3/4 of the bytes
        wait_until(lambda: skew() == 0.75, 5, "the measured S_J")
        assert coord.sched.job(job).spec.skew == 0.75  # placement sees it
        assert source() == "measured"
        detail = format_job(c.request("status", job_id=job)["job"])
        assert "skew S_J   0.750 measured by ibverbs-tap" in detail
        agent_measured("b", 100, 100)  # the job's other node: (300+100) / 600
        wait_until(lambda: skew() == pytest.approx(2 / 3), 5, "both nodes' traffic")
        # once the runtime reports tensor sizes, they decide (round-robin: 500 vs 100)
        c.send("report", job_id=job, restart=0, step=5, tensor_bytes=[100, 100, 400])
        wait_until(lambda: skew() == pytest.approx(5 / 6), 5, "the tensor sizes' S_J")
        assert source() == "tensors"
        agent_measured("a", 900, 100)
        c.send("report", job_id=job, restart=0, step=6)  # after the measurement, in order
        wait_until(lambda: c.request("status", job_id=job)["job"]["progress"]["step"] == 6, 5)
        assert skew() == pytest.approx(5 / 6)
        assert coord.sched.job(job).spec.skew == pytest.approx(5 / 6)
        assert source() == "tensors"


def test_a_job_is_spread_or_packed_by_the_skew_measured_from_its_traffic(
    coord: Coordinator,
) -> None:
    """The measured S_J decides the next placement: even traffic (S_J 0.5, not above the
    default PACKLIMIT 0.5) spreads the job, filling the fuller node first; 3:1 traffic packs
    it again. Nodes of 3 and 1 GPUs make the two choices differ for a 2-GPU job."""
    from .test_reconcile import ScriptedAgent

    agents = {n: ScriptedAgent(coord.address, n, g) for n, g in (("a", 3), ("b", 1))}
    with Client(coord.address, timeout=5) as c:
        job = c.request("submit", argv=["train.py"], workers=2, ps=2)["job_id"]

        def placement() -> dict[str, list[int]] | None:
            return c.request("status", job_id=job)["job"]["placement"]

        def run(restart: int, ps0: int, ps1: int) -> dict[str, list[int]]:
            """The run's placement, after its nodes measured ps0:ps1 bytes (S_J is then the
            busier PS's share) and it was preempted (checkpointed) on every node."""
            where = wait_until(placement, 5, f"restart {restart} to start")
            for node in where:
                agents[node].command("launch")
            ps_bytes = {"10.0.0.1:2222": ps0, "10.0.0.2:2222": ps1}
            c.send("report", job_id=job, restart=restart, node=next(iter(where)), ps_bytes=ps_bytes)
            skew = max(ps0, ps1) / (ps0 + ps1)
            wait_until(lambda: c.request("status", job_id=job)["job"]["skew"] == skew, 5)
            for node in where:
                exited = {"node": node, "job_id": job, "restart": restart, "processes": []}
                assert (
                    agents[node].request("exited", outcome="checkpointed", **exited)["type"] == "ok"
                )
            wait_until(lambda: c.request("status", job_id=job)["job"]["restarts"] > restart, 5)
            return where

        assert list(run(0, 100, 100)) == ["a"]  # S_J unknown: consolidated
        assert c.request("status", job_id=job)["job"]["skew"] == 0.5
        assert sorted(run(1, 300, 100)) == ["a", "b"]  # S_J 0.5: spread
        assert c.request("status", job_id=job)["job"]["skew"] == 0.75
        assert list(wait_until(placement, 5, "restart 2 to start")) == ["a"]  # S_J 0.75: packed
        # once the job is done for good, the stage keeps nothing of it
        agents["a"].command("launch")
        done = {"node": "a", "job_id": job, "restart": 2, "outcome": "completed", "processes": []}
        assert job in coord.skew_estimator
        assert agents["a"].request("exited", **done)["type"] == "ok"
        wait_until(lambda: job not in coord.skew_estimator, 5, "the stage to forget the job")
    for agent in agents.values():
        agent.close()
