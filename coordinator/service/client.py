"""A DEALER connection to the coordinator with request/reply correlation by ``id``.

Used by the CLI, ``tiresias-run`` and the benchmarks; agents keep their own socket because
they also receive unsolicited commands."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import zmq

from coordinator import protocol
from coordinator.service.curve import KEYS_ENV, ClientKeys, user_dir
from tiresias_launch import contract

#: On one machine: a Unix socket, whose peers the coordinator knows by uid (docs/security.md).
DEFAULT_ADDRESS = "ipc:///run/tiresias/coordinator.sock"
ADDRESS_ENV = contract.COORDINATOR


class RequestError(RuntimeError):
    """The coordinator answered with an error, or did not answer in time."""


def default_address() -> str:
    return os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS


def client_keys(directory: str | Path | None, address: str | None = None) -> ClientKeys | None:
    """Keys from ``directory``, else from $TIRESIAS_CURVE_KEYS, else, for a tcp:// address,
    the user's own (made on first use); none for ipc://, where the uid is the identity."""
    directory = directory or os.environ.get(KEYS_ENV)
    if not directory and (address or default_address()).startswith("tcp://"):
        directory = user_dir()
    return ClientKeys.load(Path(directory)) if directory else None


def dealer(ctx: zmq.Context[Any], address: str, keys: ClientKeys | None) -> zmq.Socket[Any]:
    """A DEALER socket connected to ``address`` that never blocks on close."""
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    sock.linger = 0
    if keys is not None:
        keys.apply(sock)
    try:
        sock.connect(address)
    except zmq.ZMQError as e:
        sock.close()
        raise ValueError(
            f"coordinator address {address!r}: {e.strerror} (expected tcp://HOST:PORT)"
        ) from None
    return sock


def _why_silent(address: str) -> str:
    """What to check when ``address`` does not answer."""
    path = address[len("ipc://") :] if address.startswith("ipc://") else None
    if path is not None and not os.path.exists(path):
        return f"there is no socket {path}: is the coordinator running on this machine?"
    if path is not None:
        return "is the coordinator running, and may you enter the socket's directory?"
    return "is it running, and is its server.key the one in your key directory?"


class Client:
    """Blocking request/reply to the coordinator; errors become RequestError."""

    def __init__(
        self,
        address: str | None = None,
        keys: ClientKeys | None = None,
        timeout: float = 10.0,
        ctx: zmq.Context[Any] | None = None,
    ) -> None:
        self.address = address or default_address()
        self.timeout = timeout
        self._ctx = ctx or zmq.Context.instance()
        self._sock = dealer(self._ctx, self.address, keys)
        self._ids = itertools.count(1)

    def request(
        self, msg_type: str, timeout: float | None = None, retries: int = 0, **fields: Any
    ) -> dict[str, Any]:
        """Send one request and return the ``ok`` reply's fields. ``retries``: send it again
        that many times when no reply comes (only for requests safe to repeat, such as a
        submit with a ``key``)."""
        wait = self.timeout if timeout is None else timeout
        for _ in range(retries + 1):
            rid = next(self._ids)
            self._sock.send(protocol.encode(msg_type, id=rid, **fields))
            reply = self._reply(rid, time.monotonic() + wait)
            if reply is not None:
                if reply["type"] == "error":
                    raise RequestError(reply["error"])
                return reply
        raise RequestError(
            f"no reply from the coordinator at {self.address} within {wait:g}s"
            + (f" ({retries + 1} tries)" if retries else "")
            + f" ({_why_silent(self.address)})"
        )

    def _reply(self, rid: int, deadline: float) -> dict[str, Any] | None:
        """The reply to request ``rid``, or None at the deadline."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sock.poll(int(left * 1000)):
                return None
            try:
                reply = protocol.decode(self._sock.recv())
            except protocol.ProtocolError as e:
                raise RequestError(f"bad reply from the coordinator: {e}") from None
            if reply.get("id") == rid:
                return reply
            # else a late reply to an earlier, timed-out request

    def send(self, msg_type: str, **fields: Any) -> None:
        """Fire-and-forget (reports)."""
        self._sock.send(protocol.encode(msg_type, **fields))

    def close(self) -> None:
        self._sock.close(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
