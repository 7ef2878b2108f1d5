"""Who sent a message, from what the transport proves (docs/security.md).

- ``ipc://``: the kernel's peer credentials of the Unix socket (``SO_PEERCRED``, which
  libzmq puts in each message's ``Peer-Address`` as ``host:uid:gid:pid``). Nothing to set up,
  nothing to steal: the uid is the OS user.
- ``tcp://``: CURVE. The operator's key directory maps public keys to names
  (``users/NAME.key``, ``agents/NAME.key``); the ZAP handler turns the client's key into the
  ``User-Id`` of its messages. Unknown keys get in as nobody, for the one message nobody may
  send: a job runtime's ``report`` with its job's token.
- Plain TCP proves nothing, so the coordinator does not serve it.
"""

from __future__ import annotations

import os
import pwd
import socket
from dataclasses import dataclass
from pathlib import Path

import zmq

#: ``User-Id`` prefixes the ZAP handler gives CURVE peers (``keys.KeyRegistry``).
USER = "user:"
AGENT = "agent:"
#: ``Peer.node`` of a peer that may register any node name (root, or the coordinator's user).
ANY_NODE = "*"


@dataclass(frozen=True)
class Peer:
    """What a connection may do. ``user``: the OS/key user it acts as (None: no client
    requests); ``node``: the node it may speak for as an agent (None: not an agent);
    ``admin``: may act on every job."""

    user: str | None = None
    node: str | None = None
    admin: bool = False

    def describe(self) -> str:
        if self.user is not None:
            return f"user {self.user!r}"
        if self.node is not None:
            return f"agent {self.node!r}"
        return "an unauthenticated connection"


NOBODY = Peer()


def user_name(uid: int) -> str:
    """The login name of ``uid``, or the number itself for a uid without a passwd entry."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def is_root_user(name: str) -> bool:
    """Whether jobs of user ``name`` would run with uid 0."""
    try:
        return pwd.getpwnam(name).pw_uid == 0
    except KeyError:
        return name == "root"


def ipc_peer(frame: zmq.Frame, admins: frozenset[str]) -> Peer:
    """The OS user at the other end of a Unix socket: root and the coordinator's own user
    may also act as agents (they can run anything on this machine anyway)."""
    try:
        uid = int(str(frame.get("Peer-Address")).rsplit(":", 3)[1])
    except (zmq.ZMQError, ValueError, IndexError):
        return NOBODY
    name = user_name(uid)
    trusted = uid in (0, os.geteuid())
    return Peer(user=name, node=ANY_NODE if trusted else None, admin=trusted or name in admins)


def curve_peer(frame: zmq.Frame, admins: frozenset[str]) -> Peer:
    """A CURVE peer by the name the ZAP handler gave its key."""
    try:
        user_id = str(frame.get("User-Id"))
    except zmq.ZMQError:
        return NOBODY
    if user_id.startswith(USER):
        name = user_id[len(USER) :]
        return Peer(user=name, admin=name in admins or is_root_user(name))
    if user_id.startswith(AGENT):
        return Peer(node=user_id[len(AGENT) :])
    return NOBODY


def check_bind(address: str, curve: bool) -> None:
    """Refuse an address whose peers the coordinator could not identify."""
    if address.startswith("ipc://"):
        if len(address) - len("ipc://") >= zmq.IPC_PATH_MAX_LEN:
            raise ValueError(
                f"--bind {address}: a socket path has at most {zmq.IPC_PATH_MAX_LEN - 1} "
                f"bytes; choose a shorter one"
            )
        if curve:
            raise ValueError(
                f"--bind {address}: CURVE keys are for tcp://; on one machine ipc:// "
                f"identifies users by their uid without keys"
            )
        return
    if address.startswith("tcp://"):
        if not curve:
            raise ValueError(
                f"--bind {address}: plain TCP carries no identity, so anyone who reaches the "
                f"port could run jobs as anyone; bind ipc://PATH on one machine, or give "
                f"--curve-keys DIR for tcp:// (see docs/security.md)"
            )
        return
    raise ValueError(f"--bind {address}: expected ipc://PATH or tcp://HOST:PORT")


def ipc_path(address: str) -> str | None:
    return address[len("ipc://") :] if address.startswith("ipc://") else None


def claim_socket(path: Path) -> None:
    """Make the directory of an ipc:// socket, and refuse one where others could replace
    the socket with their own, or where a live coordinator already listens (binding would
    silently take its socket away)."""
    directory = path.parent
    directory.mkdir(mode=0o711, parents=True, exist_ok=True)
    st = directory.stat()
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        raise ValueError(
            f"socket directory {directory} is writable by other users, who could replace the "
            f"socket; use a directory only you (or root) may write"
        )
    if path.exists():
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
            except OSError:
                return  # left by a coordinator that is gone: binding replaces it
        raise OSError(f"cannot serve on ipc://{path}: another coordinator is serving there")
