"""Reconciliation and replay details, driven over the real protocol by a scripted agent (a
DEALER speaking the agent's messages) so each case is exact and fast."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from coordinator import protocol
from coordinator.core.events import SetPackLimit, from_wire, to_wire
from coordinator.core.settings import Settings, build_scheduler, restore_scheduler, snapshot
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.store import Store

from .conftest import in_process_coordinator, wait_until


class ScriptedAgent:
    """Registers as ``node`` and records the commands it is sent."""

    def __init__(
        self, address: str, node: str, gpus: int, running: list[dict[str, Any]] | None = None
    ) -> None:
        self.node = node
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(address)
        self.commands: list[dict[str, Any]] = []
        reply = self.request(
            "register", node=node, gpus=[{"index": i} for i in range(gpus)], running=running or []
        )
        assert reply["type"] == "ok", reply

    def request(self, msg_type: str, **fields: Any) -> dict[str, Any]:
        self.sock.send(protocol.encode(msg_type, id=1, **fields))
        while True:
            assert self.sock.poll(5000), f"no reply to {msg_type}"
            msg = protocol.decode(self.sock.recv())
            if msg["type"] in ("ok", "error"):
                return msg
            self.commands.append(msg)

    def command(self, msg_type: str) -> dict[str, Any]:
        """Wait for the next command of ``msg_type``."""

        def got() -> dict[str, Any] | None:
            while self.sock.poll(0):
                self.commands.append(protocol.decode(self.sock.recv()))
            return next((c for c in self.commands if c["type"] == msg_type), None)

        cmd = wait_until(got, 5, f"a {msg_type} command for {self.node}")
        self.commands.remove(cmd)
        return cmd

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def coord(tmp_path: Path) -> Iterator[Coordinator]:
    options = Options(
        bind=f"ipc://{tmp_path}/c.sock", state=tmp_path, heartbeat_timeout=30, allow_root_jobs=True
    )
    with in_process_coordinator(options) as c:
        yield c


def test_register_kills_unexpected_jobs_and_loses_missing_ones(coord: Coordinator) -> None:
    with Client(coord.address) as client:
        agent = ScriptedAgent(coord.address, "n1", 1)
        job = client.request("submit", argv=["x.py"], workers=1)["job_id"]
        launch = agent.command("launch")
        assert launch["job_id"] == job and launch["restart"] == 0
        env = launch["processes"][0]["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["TIRESIAS_JOB_ID"] == job
        # the agent restarts: it runs a job nobody asked for, and no longer runs ours
        agent.close()
        again = ScriptedAgent(coord.address, "n1", 1, running=[{"job_id": "ghost", "restart": 0}])
        kill = again.command("kill")
        assert kill["job_id"] == "ghost"
        relaunch = again.command("launch")  # ours was lost, and is resumed
        assert relaunch["job_id"] == job and relaunch["restart"] == 1
        view = client.request("status", job_id=job)["job"]
        assert view["state"] == "running" and view["restarts"] == 1
        # a resent exit report of the old run is acknowledged and ignored
        stale = again.request(
            "exited", node="n1", job_id=job, restart=0, outcome="failed", processes=[]
        )
        assert stale["type"] == "ok" and stale.get("stale") is True
        done = again.request(
            "exited",
            node="n1",
            job_id=job,
            restart=1,
            outcome="completed",
            processes=[{"role": "chief", "task_index": 0, "code": 0}],
        )
        assert done["type"] == "ok"
        assert client.request("status", job_id=job)["job"]["state"] == "completed"
        again.close()


def test_learned_packlimit_is_journaled_and_snapshotted() -> None:
    settings = Settings(placement="skew")
    sched = build_scheduler(settings)
    sched.apply(from_wire(*to_wire(SetPackLimit(0.3))))
    assert sched.placement.packlimit == 0.3
    assert restore_scheduler(snapshot(sched), settings).placement.packlimit == 0.3


def test_restart_with_other_scheduler_options_is_refused(tmp_path: Path) -> None:
    first = Options(
        bind=f"ipc://{tmp_path}/c.sock",
        state=tmp_path,
        settings=Settings(queue_thresholds=(100.0,)),
    )
    with in_process_coordinator(first) as c:
        ScriptedAgent(c.address, "n1", 1).close()  # journals the node: now there is history
    with pytest.raises(ValueError, match=r"created with thresholds=\[100.0\].*\[200.0\]"):
        Coordinator(Options(state=tmp_path, settings=Settings(queue_thresholds=(200.0,))))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("min_run", 30.0),
        ("min_run_restores", 2.0),
        ("cheap_victims", True),
        ("queue_order", "first-start"),
        ("learn_thresholds", True),
    ],
)
def test_state_from_before_an_option_replays_at_its_default_only(
    tmp_path: Path, option: str, value: object
) -> None:
    """A state directory whose options were recorded before ``option`` existed ran with its
    default: a restart at the default replays it, one that changes it is refused."""
    first = Options(bind=f"ipc://{tmp_path}/c.sock", state=tmp_path)
    with in_process_coordinator(first) as c:
        ScriptedAgent(c.address, "n1", 1).close()
    store = Store(tmp_path)
    with store.tx():
        recorded = store.get_meta("core_options")
        del recorded[option]  # as a coordinator of that time recorded them
        store.set_meta("core_options", recorded)
    store.close()
    Coordinator(Options(state=tmp_path)).store.close()
    with pytest.raises(ValueError, match=rf"created with {option}=.* but this start asks for"):
        Coordinator(Options(state=tmp_path, settings=Settings(**{option: value})))  # type: ignore[arg-type]
