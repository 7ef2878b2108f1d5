"""Bounds at the edge: one bad message or one bad job never takes an agent or the coordinator
down. Bad input is refused where it enters, with an error naming the problem; what gets past
(a launch an agent cannot run) ends as that job's failure, with the reason."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from coordinator import protocol
from coordinator.service.client import Client, RequestError
from coordinator.service.coordinator import Coordinator, Options
from coordinator.service.identity import user_name

from .conftest import FakeCoordinator, in_process_coordinator, wait_until


def _msg(t: str, **fields: Any) -> bytes:
    return msgpack.packb({"type": t, "v": 1, "id": 1, **fields}, use_bin_type=True)


def _submit(**fields: Any) -> bytes:
    return _msg("submit", **{"argv": ["x.py"], "workers": 1, **fields})


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"k": value}
    return value


def _report(**fields: Any) -> bytes:
    return msgpack.packb({"type": "report", "v": 1, "job_id": "j1", **fields})


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        (_submit(env={"A=B": "x"}), "'A=B' is not a valid variable name"),
        (_submit(env={"A\0": "x"}), "is not a valid variable name"),
        (_submit(env={"": "x"}), "'' is not a valid variable name"),
        (_submit(env={"A": "x\0y"}), "the value of 'A' contains a NUL"),
        (_submit(argv=["x.py", "a\0b"]), "'argv' must not contain NUL"),
        (_submit(cwd="/tmp\0x"), "'cwd' must not contain NUL"),
        (_report(iter_time=-1.0), "'iter_time' must be a finite number >= 0, got -1.0"),
        (_report(iter_time=math.nan), "'iter_time' must be a finite number, got nan"),
        # magnitudes and depth: what no job could send, refused before it is stored
        (_report(iter_time=1e308), "'iter_time' holds 1e+308, beyond"),
        (_report(iter_time=2e9), "'iter_time' must be at most 1e+09, got 2000000000.0"),
        (_report(gpu_time=1e308), "'gpu_time' holds 1e+308, beyond ±9007199254740992"),
        (_report(gpu_time=1e14), "'gpu_time' must be at most 1e+13"),
        (_report(step=2**64 - 1), "'step' holds 18446744073709551615, beyond"),
        (_report(warmup={"seconds": -1e308}), "'warmup' holds -1e+308, beyond"),
        (_report(warmup={"seconds": -1.0}), "'warmup.seconds' must be a number >= 0"),
        (_report(warmup={"build": 1e10}), "'warmup.build' must be at most 1e+09"),
        (_report(checkpoint={"step": "x"}), "'checkpoint.step' must be a number >= 0"),
        (_report(checkpoint=_nested(500)), "'checkpoint' is nested deeper than 8 levels"),
        (_submit(env=_nested(9)), "'env' is nested deeper than 8 levels"),
        (_submit(duration=1e12), "'duration' must be at most 1e+09"),
        (_msg("preempt", job_id="j1", restart=0, signal="SIGTERM", grace=1e10), "at most"),
        (_report(gpu_time=math.inf), "'gpu_time' must be a finite number"),
        (_report(step=-3), "'step' must be a finite number >= 0"),
        (_report(checkpoint={"saved": math.nan}), "'checkpoint' must not contain NaN"),
        (_report(checkpoint={"a": [math.inf]}), "'checkpoint' must not contain NaN"),
        (_msg("logs", job_id="j1", offsets={"n/a.log": -1}), "byte offsets must be >= 0"),
        (_msg("logs", job_id="j1", limit=-1), "'limit' must be a finite number >= 0"),
        (_msg("advance", seconds=math.nan), "'seconds' must be a finite number"),
        (_msg("status", job_id="../../etc"), "'job_id' must be 1 to 128 letters"),
        (_msg("fetch_logs", job_id="j1", job_key="x" * 300, req=1, offsets={}, limit=1), "128"),
        # found by the fuzz run: a name field a type does not declare, of another type
        (_msg("queue", job_key={"a": 1}), "'job_key' must be 1 to 128 letters"),
        (_msg("nodes", job_id=7), "'job_id' must be 1 to 128 letters"),
        (
            msgpack.packb({"type": "queue", "v": 1.0, "id": 1}),
            "protocol version 1.0 not supported",
        ),
        (
            msgpack.packb({"type": "queue", "v": True, "id": 1}),
            "protocol version True not supported",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_edge_refuses_with_the_reason(frame: bytes, problem: str) -> None:
    with pytest.raises(protocol.ProtocolError, match=re.escape(problem)):
        protocol.decode(frame)


# --- the coordinator ---------------------------------------------------------------------


@pytest.fixture
def coord(tmp_path: Path) -> Iterator[Coordinator]:
    options = Options(
        bind=f"ipc://{tmp_path}/c.sock", state=tmp_path, max_job_size=64, allow_root_jobs=True
    )
    with in_process_coordinator(options) as c:
        yield c


def _register(client: Client, node: str, gpus: int) -> None:
    client.request("register", node=node, gpus=[{"index": i} for i in range(gpus)], running=[])


def test_submit_bounds_the_job_size(coord: Coordinator) -> None:
    with Client(coord.address, timeout=5) as client:
        _register(client, "n1", 4)
        with pytest.raises(RequestError, match=r"'ps' is 1000000000, over .* limit of 64"):
            client.request("submit", argv=["x.py"], workers=1, ps=10**9)
        with pytest.raises(RequestError, match=r"'workers' is 65, over .* limit of 64"):
            client.request("submit", argv=["x.py"], workers=65)
        with pytest.raises(RequestError, match="asks for 5 GPUs but the cluster has 4; nothing"):
            client.request("submit", argv=["x.py"], workers=5)
        # a job that fits still goes through, and nothing refused was created
        assert client.request("submit", argv=["x.py"], workers=4, ps=64)["job_id"] == "j1"
        assert [j["job_id"] for j in client.request("queue")["jobs"]] == ["j1"]


def test_undeliverable_launch_is_refused_at_submit(coord: Coordinator) -> None:
    big = "x" * 300_000
    with Client(coord.address, timeout=5) as client:
        _register(client, "n1", 4)
        with pytest.raises(RequestError, match=r"launch of \d+ bytes for one node, over the"):
            client.request("submit", argv=["x.py"], workers=4, env={"BIG": big})
        # the same environment on one worker fits in one message
        assert client.request("submit", argv=["x.py"], workers=1, env={"BIG": big})["job_id"]


def test_multipart_message_gets_an_error_reply(coord: Coordinator) -> None:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(coord.address)
    try:
        sock.send_multipart([protocol.encode("queue", id=7), b"extra"])
        assert sock.poll(5000), "no reply to a multipart message"
        reply = protocol.decode(sock.recv())
        assert reply["type"] == "error" and reply["id"] == 7
        assert "a message is one frame; got 2" in reply["error"]
    finally:
        sock.close()


def test_a_message_that_breaks_validation_is_refused_and_the_coordinator_serves_on(
    coord: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in checking one message (the fuzz run found one) answers that message with an
    error instead of ending the coordinator's thread."""
    checked = protocol.decode

    def broken(frame: bytes) -> dict[str, Any]:
        msg = checked(frame)
        if msg["type"] == "nodes":
            raise TypeError("a checker bug")
        return msg

    monkeypatch.setattr(protocol, "decode", broken)
    with Client(coord.address, timeout=5) as client:
        with pytest.raises(RequestError, match="internal error checking it: a checker bug"):
            client.request("nodes")
        assert client.request("queue")["jobs"] == []


def test_a_failing_exit_is_applied_all_or_nothing(
    coord: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exit whose bookkeeping fails half-way leaves no trace; the resent one applies."""
    from .test_reconcile import ScriptedAgent

    with Client(coord.address, timeout=5) as client:
        agent = ScriptedAgent(coord.address, "n1", 2)
        job = client.request("submit", argv=["x.py"], workers=2, name="m")["job_id"]
        agent.command("launch")
        client.send("report", job_id=job, restart=0, iter_time=0.5, skew=0.5)
        wait_until(lambda: client.request("status", job_id=job)["job"]["skew"] == 0.5, 5, "skew")

        def broken(*_: object) -> None:
            raise RuntimeError("injected failure while learning PACKLIMIT")

        exit_msg = {
            "node": "n1",
            "job_id": job,
            "restart": 0,
            "outcome": "completed",
            "processes": [{"role": "chief", "task_index": 0, "code": 0}],
        }
        monkeypatch.setattr(coord.store, "add_observation", broken)
        reply = agent.request("exited", **exit_msg)
        assert reply["type"] == "error" and "injected failure" in reply["error"]
        view = client.request("status", job_id=job)["job"]
        assert view["state"] == "running" and coord.book.records[job].run.parts == {"n1": None}
        monkeypatch.undo()
        assert agent.request("exited", **exit_msg)["type"] == "ok"
        assert client.request("status", job_id=job)["job"]["state"] == "completed"
        assert client.request("nodes")["nodes"][0]["used"] == 0
        agent.close()


# --- the agent ---------------------------------------------------------------------------


def _launch(job_id: str, **spec: Any) -> bytes:
    process = {"role": "chief", "task_index": 0, "argv": ["/bin/true"], "env": {}, "gpus": [0]}
    fields = {"job_id": job_id, "restart": 0, "processes": [{**process, **spec}], "grace": 1}
    fields["owner"] = user_name(os.geteuid())  # the agent's own user: no uid change
    return msgpack.packb({"type": "launch", "v": 1, **fields}, use_bin_type=True)


@pytest.mark.slow  # starts a process
def test_agent_survives_every_bad_launch_and_reports_it_failed(tmp_path: Path) -> None:
    fake = FakeCoordinator(tmp_path)
    try:
        fake.expect(lambda m: m["type"] == "register", "the agent to register")
        # ENOSPC writing the log: the log file is /dev/full
        logdir = fake.workdir / "logs" / "full"
        logdir.mkdir(parents=True)
        (logdir / "chief-0.log").symlink_to("/dev/full")
        cases = {
            "eq": (_launch("eq", env={"A=B": "x"}), "not a valid variable name"),
            "nul": (_launch("nul", argv=["/bin/true", "a\0b"]), "must not contain NUL"),
            "cwd": (_launch("cwd", cwd=str(tmp_path / "missing")), "No such file"),
            "full": (_launch("full"), "No space left on device"),
            "big": (_launch("big", env={"X": "y" * (2 << 20)}), "exceeds the limit"),
        }
        for frame, _ in cases.values():
            fake.send(frame)
        for job_id, (_, reason) in cases.items():
            exited = fake.expect(
                lambda m, j=job_id: m["type"] == "exited" and m["job_id"] == j,
                f"the agent to report {job_id} failed",
            )
            assert exited["outcome"] == "failed", exited
            assert exited["processes"][0]["code"] == 127
            assert reason in exited["processes"][0]["log_tail"], exited
        # bad log requests: no crash, and a good one is still answered
        for offsets, limit in (({"chief-0.log": -5}, 100), ({}, -1), ({}, 1 << 40)):
            frame = msgpack.packb(
                {"type": "fetch_logs", "v": 1, "job_id": "cwd", "req": 9}
                | {"offsets": offsets, "limit": limit}
            )
            fake.send(frame)
        fake.send(protocol.encode("fetch_logs", job_id="cwd", req=10, offsets={}, limit=1000))
        data = fake.expect(lambda m: m["type"] == "log_data" and m["req"] == 10, "log data")
        assert "No such file" in data["files"]["chief-0.log"]["data"]
        assert fake.proc.poll() is None, "the agent died"
        fake.expect(lambda m: m["type"] == "heartbeat", "a heartbeat after all that")
    finally:
        fake.close()


def test_a_retried_submit_is_the_same_job(coord: Coordinator) -> None:
    """The reply to a submit is lost (its client is gone); the retry with the same key gets
    the job that was created, not a second one."""
    with Client(coord.address, timeout=5) as client:
        _register(client, "n1", 1)
        lost = zmq.Context.instance().socket(zmq.DEALER)
        lost.linger = 0
        lost.connect(coord.address)
        lost.send(protocol.encode("submit", id=1, argv=["x.py"], workers=1, key="k-1"))
        wait_until(lambda: client.request("queue")["jobs"], 5, "the first submit")
        lost.close()
        again = client.request("submit", argv=["x.py"], workers=1, key="k-1")
        assert again == {"type": "ok", "v": 1, "id": again["id"], "job_id": "j1", "duplicate": True}
        assert client.request("submit", argv=["x.py"], workers=1, key="k-2")["job_id"] == "j2"
        assert [j["job_id"] for j in client.request("queue")["jobs"]] == ["j1", "j2"]
