"""Role labels of a Tiresias gang's processes match the gang's own names (its logs'
``chief-0``, ``worker-1``), whatever TF_CONFIG calls them."""

from __future__ import annotations

import os
import socket

import pytest

from coordinator.gang import GangRequest, plan
from ibverbs_tap import roles
from ibverbs_tap.roles import gang_addresses, own_role


def _ports(_node: str) -> int:
    _ports.next = getattr(_ports, "next", 41000) + 1  # type: ignore[attr-defined]
    return _ports.next  # type: ignore[attr-defined]


def test_an_allreduce_rank_0_is_the_chief_and_its_peers_say_so() -> None:
    """A PyTorch (or MultiWorkerMirrored) gang: TF_CONFIG's worker 0 is the gang's chief-0."""
    request = GangRequest(("train.py",), workers=2)
    specs = plan(request, "j1", {"a": [0], "b": [0]}, None, "/ckpt", 0, _ports)
    assert [(s.role, s.task_index) for s in specs] == [("chief", 0), ("worker", 1)]
    rank0, rank1 = (dict(s.env) for s in specs)
    assert (own_role(rank0), own_role(rank1)) == ("chief0", "worker1")
    assert set(gang_addresses(rank1)) == {"chief0", "worker1"}


def test_a_ps_job_keeps_tf_configs_names() -> None:
    request = GangRequest(("train.py",), workers=2, ps=1)
    specs = plan(request, "j1", {"a": [0, 1]}, None, "/ckpt", 0, _ports)
    names = {own_role(dict(s.env)) for s in specs}
    assert names == {"chief0", "ps0", "worker0", "worker1"}
    assert set(gang_addresses(dict(specs[0].env))) == {"chief0", "ps0", "worker0", "worker1"}


def test_a_socket_the_tcp_table_skipped_is_looked_for_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/proc/net/tcp is no snapshot: a socket that stays open can be missing from one read
    (another socket before it closed). Its owner is still found by reading again."""
    server = socket.create_server(("127.0.0.1", 0))
    with server, socket.create_connection(server.getsockname()) as client:
        mine = client.getsockname()
        reads: list[int] = []
        real = roles._tcp_sockets

        def skips_it_once() -> dict[str, tuple[str, int]]:
            read = real()
            reads.append(len(read))
            return {k: v for k, v in read.items() if v != mine} if len(reads) == 1 else read

        monkeypatch.setattr(roles, "_tcp_sockets", skips_it_once)
        assert roles.socket_owners([mine])[mine] == os.getpid()
        assert len(reads) == 2
        reads.clear()
        assert mine not in roles.socket_owners()  # nothing wanted: one read, as it came
        assert len(reads) == 1
