"""The TCP socket tap for real: C and Python clients over loopback, every intercepted call,
several threads, a fork, fd reuse; exact messages and bytes per log2 bucket and peer."""

from __future__ import annotations

import sys
from pathlib import Path

from ibverbs_tap import ProcessProfile

from .helpers import CSRC, HERE, ScheduleServers, cc, expected_rx, expected_tx, tap_run


def _check(profiles: list[ProcessProfile], child_pid: int, ports: list[int]) -> None:
    by_pid = {p.pid: p for p in profiles}
    child = by_pid[child_pid]
    parent = by_pid[child.ppid]
    a, b = (f"127.0.0.1:{p}" for p in ports)

    # Parent: threads 0, 2, 4 and the two fd-reuse connections on A; threads 1, 3 and the
    # post-fork connection on B. Pipes, socketpairs and UDP are not TCP peers.
    assert [p.address for p in parent.peers] == sorted([a, b])
    for address, schedules in ((a, 5), (b, 3)):
        peer = parent.peer(address)
        assert peer is not None and peer.kind == "tcp"
        assert peer.tx.buckets() == expected_tx(schedules), address
        assert peer.rx.buckets() == expected_rx(schedules), address
    # Child: only its own traffic, on the inherited connection to B, in its own profile.
    assert [p.address for p in child.peers] == [b]
    assert child.peers[0].tx.buckets() == expected_tx(1)
    assert child.peers[0].rx.buckets() == expected_rx(1)
    assert parent.dropped_calls == child.dropped_calls == 0


def test_c_client_threads_fork_all_calls(tmp_path: Path, servers: ScheduleServers) -> None:
    exe = cc(tmp_path / "sock_client", CSRC / "sock_client.c", "-pthread", "-ldl")
    proc, profiles = tap_run([exe, *map(str, servers.ports)], tmp_path / "dump.json")
    _check(profiles, int(proc.stdout), servers.ports)


def test_python_client_threads_fork(tmp_path: Path, servers: ScheduleServers) -> None:
    cmd = [sys.executable, HERE / "py_client.py", *map(str, servers.ports)]
    proc, profiles = tap_run(cmd, tmp_path / "dump.json")
    child = int(proc.stdout)
    by_pid = {p.pid: p for p in profiles}
    parent = by_pid[by_pid[child].ppid]
    a, b = (f"127.0.0.1:{p}" for p in servers.ports)
    assert [p.address for p in parent.peers] == sorted([a, b])
    for address, schedules in ((a, 3), (b, 3)):
        peer = parent.peer(address)
        assert peer is not None
        assert peer.tx.buckets() == expected_tx(schedules), address
        assert peer.rx.buckets() == expected_rx(schedules), address
    assert [p.address for p in by_pid[child].peers] == [b]
    assert by_pid[child].peers[0].tx.buckets() == expected_tx(1)
    assert by_pid[child].peers[0].rx.buckets() == expected_rx(1)


def test_wrapper_script_exec_keeps_counting(tmp_path: Path, servers: ScheduleServers) -> None:
    """A shell wrapper that execs the real interpreter: same pid, same profile, two images."""
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "py_client.py"}" "$@"\n')
    wrapper.chmod(0o755)
    proc, profiles = tap_run([wrapper, *map(str, servers.ports)], tmp_path / "dump.json")
    child = int(proc.stdout)
    by_pid = {p.pid: p for p in profiles}
    parent = by_pid[by_pid[child].ppid]
    assert parent.images == 2
    assert parent.cmdline[0] == sys.executable
    peer = parent.peer(f"127.0.0.1:{servers.ports[0]}")
    assert peer is not None and peer.tx.buckets() == expected_tx(3)
