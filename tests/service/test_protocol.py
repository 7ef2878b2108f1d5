"""The wire protocol: every bad message gets an error naming the problem, is counted, and the
coordinator keeps serving. Unit checks of the validator plus a hypothesis fuzz against a live
coordinator on a real socket."""

from __future__ import annotations

import os
import pwd
import re
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator import protocol
from coordinator.service import ports
from coordinator.service.client import Client
from coordinator.service.coordinator import Coordinator, Options

from .conftest import free_port, in_process_coordinator, wait_until


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        (b"\xc1garbage", "not a msgpack message"),
        (msgpack.packb([1, 2]), "must be a map"),
        (msgpack.packb({"v": 1}), "no string 'type'"),
        (msgpack.packb({"type": "frobnicate", "v": 1}), "unknown message type 'frobnicate'"),
        (msgpack.packb({"type": "queue", "v": 7, "id": 1}), "protocol version 7"),
        (msgpack.packb({"type": "queue", "v": 1}), "need an integer 'id'"),
        (msgpack.packb({"type": "cancel", "v": 1, "id": 1}), "missing field 'job_id'"),
        (
            msgpack.packb({"type": "cancel", "v": 1, "id": 1, "job_id": 5}),
            "field 'job_id' must be str, got int",
        ),
        (
            msgpack.packb({"type": "submit", "v": 1, "id": 1, "argv": ["x"], "workers": True}),
            "field 'workers' must be int, got bool",
        ),
        (
            msgpack.packb({"type": "submit", "v": 1, "id": 1, "argv": ["x", 3], "workers": 1}),
            "'argv' must be a list of strings",
        ),
        (
            msgpack.packb({"type": "submit", "v": 1, "id": 1, "argv": ["x"], "workers": 0}),
            "'workers' must be >= 1",
        ),
        (
            msgpack.packb({"type": "report", "v": 1, "job_id": "j1", "skew": 3.0}),
            "'skew' must be in [0, 1]",
        ),
        (
            msgpack.packb(
                {
                    "type": "exited",
                    "v": 1,
                    "id": 1,
                    "node": "n",
                    "job_id": "j",
                    "restart": 0,
                    "outcome": "exploded",
                    "processes": [],
                }
            ),
            "'outcome' must be one of",
        ),
        (  # lost is the coordinator's verdict on a part, never a node's report
            msgpack.packb(
                {
                    "type": "exited",
                    "v": 1,
                    "id": 1,
                    "node": "n",
                    "job_id": "j",
                    "restart": 0,
                    "outcome": "lost",
                    "processes": [],
                }
            ),
            "'outcome' must be one of completed, checkpointed, preempted, failed, killed,",
        ),
        (
            msgpack.packb(
                {
                    "type": "register",
                    "v": 1,
                    "id": 1,
                    "node": "n",
                    "gpus": [{"index": "0"}],
                    "running": [],
                }
            ),
            "'gpus'[0]: field 'index' must be int",
        ),
        (msgpack.packb({"type": "queue", "v": 1, "id": 1})[:-3], "not a msgpack message"),
        (b"\x00" * (protocol.MAX_MESSAGE_BYTES + 1), "exceeds the limit"),
    ],
)
def test_decode_names_the_problem(frame: bytes, problem: str) -> None:
    with pytest.raises(protocol.ProtocolError, match=re.escape(problem)):
        protocol.decode(frame)


def test_roundtrip_of_a_valid_message() -> None:
    frame = protocol.encode("submit", id=3, argv=["train.py", "--lr", "0.1"], workers=2)
    assert protocol.decode(frame)["argv"] == ["train.py", "--lr", "0.1"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    state = tmp_path_factory.mktemp("fuzz")
    options = Options(
        bind=f"ipc://{state}/c.sock",
        state=Path(state),
        metrics_port=free_port(),
        allow_root_jobs=True,
    )
    with in_process_coordinator(options) as coord:
        yield coord


def _bad_count(coord: Coordinator) -> float:
    return coord.metrics.registry.get_sample_value("tiresias_bad_messages_total") or 0.0


def _exchange(coord: Coordinator, frame: bytes) -> dict | None:
    """Send one raw frame; return the reply if one comes within a second."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(coord.address)
    try:
        sock.send(frame)
        if sock.poll(1000):
            return protocol.decode(sock.recv())
        return None
    finally:
        sock.close()


def test_errors_are_replied_and_counted(live: Coordinator) -> None:
    before = _bad_count(live)
    reply = _exchange(live, msgpack.packb({"type": "status", "v": 1, "id": 9, "job_id": "zz"}))
    assert reply == {"type": "error", "v": 1, "id": 9, "error": "status: unknown job id 'zz'"}
    reply = _exchange(
        live,
        msgpack.packb(
            {
                "type": "launch",
                "v": 1,
                "job_id": "j",
                "restart": 0,
                "processes": [],
                "grace": 1,
                "owner": "u",
            }
        ),
    )
    assert reply is not None and "not a message the coordinator accepts" in reply["error"]
    reply = _exchange(live, msgpack.packb({"type": "heartbeat", "v": 1, "id": 1, "node": "x"}))
    assert reply is not None and reply.get("code") == "register"
    assert _bad_count(live) == before + 3


def test_oversize_messages(live: Coordinator) -> None:
    # above the protocol limit but under the socket cap: an error reply
    reply = _exchange(live, b"\x00" * (2 * protocol.MAX_MESSAGE_BYTES))
    assert reply is not None and "exceeds the limit of 1048576 bytes" in reply["error"]
    # above the socket cap: ZeroMQ drops the connection; the service keeps serving
    assert _exchange(live, b"\x00" * (protocol.SOCKET_MAX_BYTES + 1)) is None
    with Client(live.address, timeout=5) as c:
        assert c.request("nodes")["nodes"] == []


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_typed = st.builds(
    lambda t, v, fields: {**fields, "type": t, "v": v},
    st.sampled_from([*sorted(protocol.SCHEMAS), "nope", ""]),
    st.sampled_from([1, 1, 1, 0, 2, "1", None]),
    st.dictionaries(
        st.sampled_from(sorted({f for s in protocol.SCHEMAS.values() for f in s} | {"id"})),
        _values,
        max_size=6,
    ),
)
_frames = st.one_of(
    st.binary(max_size=200),
    _values.map(lambda v: msgpack.packb(v, use_bin_type=True)),
    _typed.map(lambda m: msgpack.packb(m, use_bin_type=True)),
    _typed.map(lambda m: msgpack.packb(m, use_bin_type=True)[:-1]),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(frame=_frames)
def test_fuzz_service_keeps_serving(live: Coordinator, frame: bytes) -> None:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(live.address)
    try:
        sock.send(frame)
        sock.send(protocol.encode("nodes", id=-1))
        while True:  # the reply to our probe must come, whatever the fuzz frame did
            assert sock.poll(5000), "the coordinator stopped answering"
            reply = protocol.decode(sock.recv())
            if reply.get("id") == -1 and reply["type"] == "ok":
                break
            if reply["type"] == "error":
                assert reply["error"]  # every refusal says what is wrong
    finally:
        sock.close()


def test_reported_skew_reaches_the_core_and_status(live: Coordinator) -> None:
    with Client(live.address, timeout=5) as c:
        c.request("register", node="skewnode", gpus=[{"index": 0}], running=[])
        job = c.request("submit", argv=["x.py"], workers=1)["job_id"]
        c.send("report", job_id=job, step=3, tensor_bytes=[100, 300])
        wait_until(
            lambda: c.request("status", job_id=job)["job"]["skew"] is not None,
            5,
            "the report to be absorbed",
        )
        view = c.request("status", job_id=job)["job"]
        assert view["skew"] == 0.75 and view["progress"]["step"] == 3
        assert live.sched.job(job).spec.skew == 0.75


def test_a_jobs_owner_and_name_reach_the_core(live: Coordinator) -> None:
    """--service-groups user,model groups live jobs by them."""
    with Client(live.address, timeout=5) as c:
        c.request("register", node="namenode", gpus=[{"index": 0}], running=[])
        job = c.request("submit", argv=["train.py"], workers=1, name="resnet-sweep")["job_id"]
    spec = live.sched.job(job).spec
    assert (spec.user, spec.model) == (pwd.getpwuid(os.getuid()).pw_name, "resnet-sweep")


def test_metrics_are_served(live: Coordinator) -> None:
    _exchange(live, b"junk")
    url = f"http://127.0.0.1:{live.opts.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    for name in (
        "tiresias_queue_length",
        "tiresias_running_jobs",
        "tiresias_gpus_in_use",
        "tiresias_preemptions_total",
        "tiresias_scheduling_pass_seconds_bucket",
        "tiresias_bad_messages_total",
    ):
        assert name in text, name


def test_jobs_on_this_machine_get_ports_the_os_says_are_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program (or another user's coordinator) may hold a port of --port-base's
    range: a job's servers on a loopback node get a port that is free now; remote nodes get
    the range's next port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = taken.getsockname()[1]
        monkeypatch.setattr(ports, "PORT_RANGE", 1)  # the range is just `held`
        opts = Options(bind=f"ipc://{tmp_path}/c.sock", state=tmp_path / "s")
        opts.port_base = held
        with in_process_coordinator(opts) as coord:
            local = coord.job_port("127.0.0.1")
            assert local != held
            with socket.socket() as s:
                s.bind(("127.0.0.1", local))
            assert coord.job_port("10.9.9.9") == held
