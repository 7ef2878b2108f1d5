"""Bounded fuzz of every message type against real services under a memory cap: a
coordinator and an agent (``prlimit --as``), each fed schema-shaped messages with hostile
values (NaN, infinities, negative and huge numbers, NUL, '=' in names, wrong types, missing
fields, unknown types). After every message the service must still answer (0 hangs); at the
end both are alive (0 crashes) and their resident memory grew by less than ``RSS_GROWTH``."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator import protocol

from .conftest import Cluster, FakeCoordinator

#: Address-space cap of each service process: a runaway allocation fails instead of growing.
MEMORY_CAP = 2 << 30
RSS_GROWTH = 96 << 20
CAPPED = ["prlimit", f"--as={MEMORY_CAP}", "--"]
EXAMPLES = 300

_ints = st.one_of(
    st.integers(-3, 5),
    st.sampled_from([-1, 10**9, 2**31, 2**63 - 1, 2**64 - 1, -(2**63)]),
)
_floats = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e308, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
)
_texts = st.one_of(
    st.sampled_from(["j1", "j2", "j3", "n1", "a", "", "A=B", "x\0y", "SIGTERM", "SIGKILL"]),
    st.text(max_size=12),
    st.text(min_size=3000, max_size=3000, alphabet="xyz"),
)
_junk = st.one_of(st.none(), st.booleans(), _ints, _floats, _texts, st.binary(max_size=8))
_MAPS: dict[str, st.SearchStrategy[Any]] = {
    "env": st.dictionaries(_texts, _texts, max_size=3),
    "offsets": st.dictionaries(_texts, _ints, max_size=3),
    "files": st.dictionaries(_texts, st.dictionaries(_texts, _junk, max_size=3), max_size=2),
}
_NESTED = {
    "gpus": protocol.GPU_ITEM,
    "running": protocol.RUNNING_ITEM,
    "processes": {**protocol.PROCESS_SPEC, **protocol.PROCESS_EXIT},
}
_BY_TYPE: dict[type | None, st.SearchStrategy[Any]] = {
    type(None): st.none(),
    bool: st.booleans(),
    int: _ints,
    float: _floats,
    str: _texts,
}


def _value(name: str, types: tuple[type | None, ...]) -> st.SearchStrategy[Any]:
    """Mostly a value of the field's own types (hostile ones included), so that messages
    get past the first check and reach deeper ones; sometimes anything at all."""
    own: list[st.SearchStrategy[Any]] = []
    for t in types:
        if t is list:
            item = _message_body(_NESTED[name]) if name in _NESTED else _texts
            own.append(st.lists(item, min_size=1, max_size=3))
        elif t is dict:
            own.append(_MAPS.get(name, st.dictionaries(_texts, _junk, max_size=3)))
        else:
            own.append(_BY_TYPE[type(None) if t is None else t])
    typed = st.one_of(*own)
    return st.one_of(typed, typed, typed, _junk)


_ABSENT = object()


def _message_body(schema: dict[str, protocol.Field]) -> st.SearchStrategy[dict[str, Any]]:
    fields = {
        name: _value(name, types) if required else st.one_of(st.just(_ABSENT), _value(name, types))
        for name, (types, required) in schema.items()
    }
    return st.fixed_dictionaries(fields).map(
        lambda d: {k: v for k, v in d.items() if v is not _ABSENT}
    )


_PROC = {"role": "chief", "task_index": 0, "argv": ["/bin/true"], "env": {}, "gpus": [0]}
#: A valid message of each type: mutating one or two of its fields reaches the checks and
#: code paths behind the first one (a random message rarely gets past the schema).
TEMPLATES: dict[str, dict[str, Any]] = {
    "submit": {"argv": ["train.py", "--lr", "0.1"], "workers": 1, "ps": 0, "env": {"A": "b"}},
    "status": {"job_id": "j1"},
    "queue": {"all": True},
    "nodes": {},
    "cancel": {"job_id": "j1"},
    "logs": {"job_id": "j1", "offsets": {"n1/chief-0.log": 0}, "limit": 100},
    "advance": {"seconds": 1.0},
    "register": {"node": "fz", "gpus": [{"index": 0}], "running": []},
    "heartbeat": {"node": "fz"},
    "exited": {
        "node": "fz",
        "job_id": "j1",
        "restart": 0,
        "outcome": "completed",
        "processes": [{"role": "chief", "task_index": 0, "code": 0}],
    },
    "log_data": {"node": "fz", "req": 1, "files": {}},
    "report": {"job_id": "j1", "restart": 0, "step": 3, "iter_time": 0.1, "skew": 0.5},
    "launch": {"job_id": "j9", "restart": 0, "processes": [_PROC], "grace": 1.0},
    "preempt": {"job_id": "j9", "restart": 0, "signal": "SIGTERM", "grace": 1.0},
    "kill": {"job_id": "j9", "restart": 0},
    "fetch_logs": {"job_id": "j9", "req": 1, "offsets": {}, "limit": 100},
    "ok": {},
    "error": {"error": "no"},
}


def _mutated(t: str) -> st.SearchStrategy[dict[str, Any]]:
    """The template of ``t`` with one or two fields replaced by a hostile value of their own
    type, by anything, or removed."""
    schema = protocol.SCHEMAS[t]
    if not schema:
        return st.just({})
    names = sorted(schema)
    field = st.sampled_from(names).flatmap(
        lambda n: st.tuples(st.just(n), st.one_of(_value(n, schema[n][0]), st.just(_ABSENT)))
    )
    change = st.lists(field, min_size=1, max_size=2).map(dict)
    return change.map(
        lambda c: {k: v for k, v in {**TEMPLATES[t], **c}.items() if v is not _ABSENT}
    )


def _messages(types: list[str]) -> st.SearchStrategy[bytes]:
    def pack(m: tuple[str, dict[str, Any], Any]) -> bytes:
        t, body, rid = m
        return msgpack.packb(
            {**body, "type": t, "v": 1, "id": rid if isinstance(rid, int) else 5},
            use_bin_type=True,
        )

    typed = st.one_of(
        *(st.tuples(st.just(t), _message_body(protocol.SCHEMAS[t]), _junk) for t in types)
    ).map(pack)
    near = st.one_of(*(st.tuples(st.just(t), _mutated(t), st.integers(1, 9)) for t in types)).map(
        pack
    )
    return st.one_of(near, near, near, typed, st.binary(max_size=64))


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class Counter:
    sent = 0
    started = 0.0
    refusals: ClassVar[set[str]] = set()


@pytest.fixture(scope="module")
def capped_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("fuzz"))
    cluster.start_coordinator("--heartbeat-timeout", "30", prefix=CAPPED)
    cluster.start_agent("n1", 2, prefix=CAPPED)
    cluster.wait_nodes("n1")
    yield cluster
    cluster.close()


def _probe(sock: zmq.Socket, probe_id: int) -> None:
    """Wait for the answer to a ``nodes`` request sent after the fuzz frames; every error
    on the way must say what was wrong."""
    sock.send(protocol.encode("nodes", id=probe_id))
    while True:
        assert sock.poll(10_000), "the coordinator stopped answering"
        reply = protocol.decode(sock.recv())
        if reply["type"] == "error":
            assert reply["error"]
            Counter.refusals.add(reply["error"].split(":")[0])
        if reply.get("id") == probe_id and reply["type"] == "ok":
            return


@pytest.fixture(scope="module")
def coordinator_before(capped_cluster: Cluster) -> Iterator[int]:
    assert capped_cluster.coordinator is not None
    pid = capped_cluster.coordinator.pid
    before = _rss(pid)
    Counter.started = time.monotonic()
    yield before
    seconds = time.monotonic() - Counter.started
    print(
        f"coordinator fuzz: {Counter.sent} messages, {Counter.sent / seconds:.0f}/s, "
        f"{len(Counter.refusals)} kinds of refusal"
    )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(frames=st.lists(_messages(sorted(protocol.SCHEMAS)), min_size=1, max_size=4))
def test_fuzz_coordinator(
    capped_cluster: Cluster, coordinator_before: int, frames: list[bytes]
) -> None:
    sock = _fuzzer(capped_cluster.address)
    for frame in frames:
        sock.send(frame)
    Counter.sent += len(frames)
    _probe(sock, -7)


_SOCKETS: dict[str, zmq.Socket] = {}


def _fuzzer(address: str) -> zmq.Socket:
    """One connection for the whole run (a registered fuzzer then speaks as an agent)."""
    if address not in _SOCKETS:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(address)
        _SOCKETS[address] = sock
    return _SOCKETS[address]


def test_coordinator_and_agent_survived_within_memory(
    capped_cluster: Cluster, coordinator_before: int
) -> None:
    """Runs after the fuzz (file order)."""
    assert capped_cluster.coordinator is not None
    assert capped_cluster.coordinator.poll() is None, capped_cluster.dump_logs()
    assert capped_cluster.agents["n1"].poll() is None, capped_cluster.dump_logs()
    capped_cluster.wait_nodes("n1")
    grown = _rss(capped_cluster.coordinator.pid) - coordinator_before
    print(f"coordinator RSS grew by {grown / 2**20:.1f} MiB")
    assert grown < RSS_GROWTH
    assert "Traceback" not in (capped_cluster.tmp / "coordinator.log").read_text()


# --- the agent, fed what only a coordinator sends -------------------------------------------

_TO_AGENT = ["launch", "preempt", "kill", "fetch_logs", "ok", "error"]


def _harmless(frame: bytes) -> bytes:
    """A fuzzed launch runs nothing real: every program is under /nonexistent."""
    try:
        msg = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:
        return frame
    if isinstance(msg, dict) and isinstance(msg.get("processes"), list):
        for p in msg["processes"]:
            if isinstance(p, dict) and isinstance(p.get("argv"), list):
                p["argv"] = ["/nonexistent/program", *p["argv"]]
        return msgpack.packb(msg, use_bin_type=True)
    return frame


@pytest.fixture(scope="module")
def capped_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeCoordinator, int]]:
    fake = FakeCoordinator(tmp_path_factory.mktemp("fuzz-agent"), prefix=CAPPED)
    fake.expect(lambda m: m["type"] == "register", "the agent to register")
    before = _rss(fake.proc.pid)
    yield fake, before
    fake.close()


@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@pytest.mark.slow  # an agent under a long fuzz run
@given(frames=st.lists(_messages(_TO_AGENT), min_size=1, max_size=4))
def test_fuzz_agent(capped_agent: tuple[FakeCoordinator, int], frames: list[bytes]) -> None:
    fake, _ = capped_agent
    for frame in frames:
        fake.send(_harmless(frame))
    req = 10**6 + len(fake.inbox)
    fake.send(protocol.encode("fetch_logs", job_id="none", req=req, offsets={}, limit=10))
    fake.expect(lambda m: m["type"] == "log_data" and m["req"] == req, "the agent to answer")
    fake.inbox.clear()


def test_agent_survived_within_memory(capped_agent: tuple[FakeCoordinator, int]) -> None:
    fake, before = capped_agent
    assert fake.proc.poll() is None, fake.log.read_text()[-3000:]
    grown = _rss(fake.proc.pid) - before
    print(f"agent RSS grew by {grown / 2**20:.1f} MiB")
    assert grown < RSS_GROWTH
    assert "Traceback" not in fake.log.read_text()
