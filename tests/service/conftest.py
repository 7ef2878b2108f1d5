"""Real coordinators, agents and jobs for the service tests: subprocesses on loopback, a
fresh state directory each, and ``wait_until`` instead of sleeps."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from helpers import FAKE_JOB, free_port, wait_until

from coordinator import protocol
from coordinator.service.client import Client, client_keys
from coordinator.service.coordinator import Coordinator, Options


@contextlib.contextmanager
def in_process_coordinator(options: Options) -> Iterator[Coordinator]:
    """A coordinator on a thread of this process, for tests that drive its sockets directly
    or inspect its state; stopped (and checked to be) on exit."""
    coord = Coordinator(options)
    thread = threading.Thread(target=coord.run, daemon=True)
    thread.start()
    assert coord.ready.wait(10)
    try:
        yield coord
    finally:
        coord.stop.set()
        thread.join(5)
    assert not thread.is_alive()


class Cluster:
    """Coordinator and agents as real processes; everything they start dies with them."""

    def __init__(self, tmp: Path, bind_host: str | None = None) -> None:
        """On a Unix socket in ``tmp`` (users known by uid), or on ``bind_host`` over TCP,
        which needs CURVE (``keys``, ``server_keys``)."""
        self.tmp = tmp
        self.address = (
            f"ipc://{tmp}/coordinator.sock"
            if bind_host is None
            else f"tcp://{bind_host}:{free_port()}"
        )
        self.state = tmp / "state"
        self.coordinator: subprocess.Popen[bytes] | None = None
        self.coordinator_args: list[str] = []
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self._client: Client | None = None
        self.keys: Path | None = None  # CURVE key directory clients and agents use
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.python = sys.executable  # the coordinator's interpreter (its jobs' too)

    def start_coordinator(self, *args: str, prefix: list[str] | None = None) -> None:
        if args:
            self.coordinator_args = list(args)
        log = (self.tmp / "coordinator.log").open("ab")
        self.coordinator = subprocess.Popen(
            [
                *(prefix or []),
                self.python,
                "-m",
                "coordinator.service.cli",
                "--bind",
                self.address,
                "--state",
                str(self.state),
                "--allow-root-jobs",  # the tests run as root
                *self.coordinator_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        wait_until(
            lambda: self.client.request("nodes", timeout=0.5) is not None,
            15,
            "the coordinator to answer",
        )

    def start_agent(
        self,
        name: str,
        gpus: int = 2,
        *extra: str,
        prefix: list[str] | None = None,
        address: str | None = None,
        label: str | None = None,
    ) -> None:
        """An agent for node ``name``; ``label`` (default: the name) keys its process, log
        and work directory, so that two agents may claim one name."""
        label = label or name
        log = (self.tmp / f"agent-{label}.log").open("ab")
        self.agents[label] = subprocess.Popen(
            [
                *(prefix or []),
                sys.executable,
                "-m",
                "coordinator.executors.agents.cli",
                "--coordinator",
                address or self.address,
                "--gpus",
                str(gpus),
                "--name",
                name,
                "--workdir",
                str(self.tmp / "agents" / label),
                "--heartbeat",
                "0.2",
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )

    def wait_nodes(self, *names: str, timeout: float = 15) -> None:
        def up() -> bool:
            nodes = {n["name"]: n for n in self.client.request("nodes")["nodes"]}
            return all(n in nodes and nodes[n]["connected"] for n in names)

        wait_until(up, timeout, f"nodes {names} to register")

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.address, client_keys(self.keys, self.address), timeout=5)
        return self._client

    def reset_client(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "coordinator.cli",
                args[0],
                "--coordinator",
                self.address,
                *args[1:],
            ],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=30,
        )
        if check and out.returncode != 0:
            raise AssertionError(f"tiresias {' '.join(args)} failed: {out.stderr}")
        return out

    def submit(self, *job_args: str, workers: int = 1) -> str:
        out = self.cli("submit", "--json", "--workers", str(workers), str(FAKE_JOB), *job_args)
        return str(json.loads(out.stdout)["job_id"])

    def job(self, job_id: str) -> dict[str, Any]:
        return self.client.request("status", job_id=job_id)["job"]

    def state_of(self, job_id: str) -> str:
        return str(self.job(job_id)["state"])

    def logs(self, job_id: str) -> str:
        files = self.client.request("logs", job_id=job_id, limit=1 << 18)["files"]
        return "".join(files[k]["data"] for k in sorted(files))

    def kill_coordinator(self) -> None:
        assert self.coordinator is not None
        self.coordinator.send_signal(signal.SIGKILL)
        self.coordinator.wait()
        self.reset_client()

    def kill_agent(self, name: str) -> None:
        self.agents[name].send_signal(signal.SIGKILL)
        self.agents[name].wait()

    def close(self) -> None:
        self.reset_client()
        for p in [*self.agents.values(), self.coordinator]:
            if p is not None and p.poll() is None:
                p.terminate()
        for p in [*self.agents.values(), self.coordinator]:
            if p is not None:
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def dump_logs(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.tmp.glob("*.log"))
        )


class FakeCoordinator:
    """A ROUTER speaking the coordinator's side to one real agent process."""

    def __init__(self, tmp: Path, prefix: list[str] | None = None) -> None:
        self.sock = self._bind(f"ipc://{tmp}/fake-coordinator.sock")
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.workdir = tmp / "agent"
        self.log = tmp / "agent.log"
        self.proc = subprocess.Popen(
            [
                *(prefix or []),
                sys.executable,
                "-m",
                "coordinator.executors.agents.cli",
                *("--coordinator", self.address, "--gpus", "2", "--name", "n1"),
                *("--workdir", str(self.workdir), "--heartbeat", "0.2"),
            ],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.route = b""
        self.inbox: list[dict[str, Any]] = []
        self.busy = False

    @staticmethod
    def _bind(address: str) -> zmq.Socket:
        sock = zmq.Context.instance().socket(zmq.ROUTER)
        sock.linger = 0
        sock.bind(address)
        return sock

    def restart(self) -> None:
        """A new coordinator on the same address that knows no node yet."""
        self.sock.close()
        self.sock = self._bind(self.address)
        self.route = b""
        self.inbox.clear()

    def _pump(self) -> None:
        """Receive everything; answer requests like a coordinator does, unless ``busy``:
        register → ok; other agent requests → ok from a registered route, else an error
        asking to register."""
        while self.sock.poll(0):
            route, frame = self.sock.recv_multipart()
            msg = protocol.decode(frame)
            self.inbox.append(msg)
            if self.busy or "id" not in msg:
                continue
            if msg["type"] == "register":
                self.route = route
            if route == self.route:
                self.sock.send_multipart([route, protocol.ok(msg["id"])])
            else:
                error = protocol.error(msg["id"], "register first", code="register")
                self.sock.send_multipart([route, error])

    def expect(self, pred: Any, what: str) -> dict[str, Any]:
        def got() -> dict[str, Any] | None:
            self._pump()
            return next((m for m in self.inbox if pred(m)), None)

        msg = wait_until(got, 15, what)
        self.inbox.remove(msg)
        return msg

    def send(self, frame: bytes) -> None:
        self.sock.send_multipart([self.route, frame])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.sock.close()


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.close()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(c.dump_logs())


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Remember each phase's report so fixtures can print service logs on failure."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
