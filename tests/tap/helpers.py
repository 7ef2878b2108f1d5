"""Helpers for the ibverbs-tap tests: compiling C test programs, loopback servers that speak
the clients' fixed schedule, and running commands under ``ibverbs-tap run``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ibverbs_tap.profile import ProcessProfile

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
TAP_CSRC = HERE.parents[1] / "ibverbs_tap" / "csrc"

# The clients' schedule (csrc/sock_client.c, py_client.py): each size REPS times, each
# message answered by an ACK-byte reply.
SIZES = (1, 100, 1000, 5000, 70000)
REPS = 2
ACK = 8


def expected_tx(schedules: int) -> list[tuple[int, int, int]]:
    """(bucket, messages, bytes) the client sends in ``schedules`` schedules."""
    return [(n.bit_length() - 1, REPS * schedules, REPS * schedules * n) for n in SIZES]


def expected_rx(schedules: int) -> list[tuple[int, int, int]]:
    count = REPS * len(SIZES) * schedules
    return [(ACK.bit_length() - 1, count, count * ACK)]


def cc(out: Path, *args: str | os.PathLike[str]) -> Path:
    """Compiles with warnings as errors; the test fails with the compiler's message."""
    cmd = ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def _recv_exactly(conn: socket.socket, n: int) -> bool:
    got = 0
    while got < n:
        chunk = conn.recv(min(n - got, 1 << 16))
        if not chunk:
            return False
        got += len(chunk)
    return True


class _LoopbackServers:
    """Listening sockets on loopback, each connection handled by ``serve`` in its own thread
    until EOF."""

    def __init__(self, count: int) -> None:
        self.socks = []
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            self.socks.append(s)
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()
        self.ports = [s.getsockname()[1] for s in self.socks]

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            self.serve(conn)

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        for s in self.socks:
            s.close()


class ScheduleServers(_LoopbackServers):
    """Every connection is served the schedule until EOF."""

    def serve(self, conn: socket.socket) -> None:
        while True:
            for _ in range(REPS):
                for n in SIZES:
                    if not _recv_exactly(conn, n):
                        return
                    conn.sendall(b"a" * ACK)


def tap_run(
    cmd: Sequence[str | os.PathLike[str]], out: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[ProcessProfile]]:
    """Runs ``cmd`` under ``ibverbs-tap run --out``; returns the result and the profiles."""
    proc = subprocess.run(
        [sys.executable, "-m", "ibverbs_tap.cli", "run", "--out", str(out), "--", *map(str, cmd)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return proc, [ProcessProfile.from_dict(p) for p in data["processes"]]


class SinkServer(_LoopbackServers):
    """Reads and discards everything until EOF."""

    def serve(self, conn: socket.socket) -> None:
        while conn.recv(1 << 16):
            pass


def tap_popen(
    cmd: Sequence[str | os.PathLike[str]], *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Starts ``ibverbs-tap run [extra…] -- cmd`` with pipes on stdin and stdout."""
    return subprocess.Popen(
        [sys.executable, "-m", "ibverbs_tap.cli", "run", *extra, "--", *map(str, cmd)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def tap_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ibverbs_tap.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
