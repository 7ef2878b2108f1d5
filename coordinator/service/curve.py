"""CURVE keys for ``tcp://`` (docs/security.md): one keypair per user and per agent.

The operator's directory (``tiresias keys generate DIR``, the coordinator's ``--curve-keys``)
holds the server keypair and the public keys it lets in, each under the name it speaks for:
``users/NAME.key`` (a user) and ``agents/NAME.key`` (the agent of node NAME). A client's
directory (``~/.config/tiresias`` unless ``--curve-keys`` or ``$TIRESIAS_CURVE_KEYS`` says
otherwise) holds its own keypair, made on first use with 0600 files, and the server's
public ``server.key``.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
import zmq.auth.thread
from zmq.utils import z85

from coordinator.service.identity import AGENT, USER

SERVER = "server"
CLIENT = "client"
USERS = "users"
AGENTS = "agents"
#: Environment variable naming the client key directory (CLI, agents).
KEYS_ENV = "TIRESIAS_CURVE_KEYS"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


def user_dir() -> Path:
    """Where a user's own keys live by default."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "tiresias"


def _private_dir(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)


def _keypair(directory: Path, name: str) -> Path:
    """``name.key`` and ``name.key_secret`` in ``directory``; the secret is 0600 from birth."""
    _private_dir(directory)
    old = os.umask(0o077)
    try:
        _public, secret = zmq.auth.create_certificates(str(directory), name)
    finally:
        os.umask(old)
    return Path(secret)


def generate(directory: Path) -> Path:
    """The operator's directory: a server keypair and empty ``users/`` and ``agents/``."""
    if (directory / f"{SERVER}.key_secret").exists():
        raise ValueError(f"{directory} already holds a server key; not overwriting it")
    _keypair(directory, SERVER)
    for sub in (USERS, AGENTS):
        (directory / sub).mkdir(exist_ok=True)
    return directory


def init_client(directory: Path, server_key: Path | None = None) -> Path:
    """Make ``directory``'s client keypair unless it exists (and copy the server's public
    key in, when given); return the public key file to hand to the operator."""
    if not (directory / f"{CLIENT}.key_secret").exists():
        _keypair(directory, CLIENT)
    if server_key is not None:
        _load(server_key, secret=False)  # refuse anything that is not a key file
        shutil.copy(server_key, directory / f"{SERVER}.key")
    return directory / f"{CLIENT}.key"


def add(directory: Path, kind: str, name: str, public_key: Path) -> Path:
    """Let ``public_key`` in as user (``kind`` = users) or agent (agents) ``name``."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"{name!r}: a name is letters, digits, '.', '_' and '-' (at most 64)")
    _load(public_key, secret=False)  # refuse anything that is not a key file
    if not (directory / f"{SERVER}.key_secret").exists():
        raise ValueError(f"{directory} holds no server key (run `tiresias keys generate`)")
    target = directory / kind / f"{name}.key"
    target.parent.mkdir(exist_ok=True)
    shutil.copy(public_key, target)
    target.chmod(0o644)
    return target


def _load(path: Path, secret: bool) -> tuple[bytes, bytes | None]:
    if not path.exists():
        raise FileNotFoundError(f"CURVE key file {path} does not exist (see docs/security.md)")
    try:
        public, private = zmq.auth.load_certificate(str(path))
    except (ValueError, OSError) as e:
        raise ValueError(f"{path} is not a CURVE key file: {e}") from None
    if secret and private is None:
        raise ValueError(f"{path} holds no secret key")
    return public, private


@dataclass(frozen=True)
class ClientKeys:
    """What a connecting socket needs: its own keypair and the server's public key."""

    public: bytes
    secret: bytes
    server_public: bytes

    @classmethod
    def load(cls, directory: Path) -> ClientKeys:
        """The keys in ``directory``, making the client keypair on first use."""
        init_client(directory)
        server = directory / f"{SERVER}.key"
        if not server.exists():
            raise FileNotFoundError(
                f"no {server}: copy the coordinator's public server.key there (the operator "
                f"has it), and send the operator {directory / f'{CLIENT}.key'} to add"
            )
        public, secret = _load(directory / f"{CLIENT}.key_secret", secret=True)
        server_public, _ = _load(server, secret=False)
        assert secret is not None
        return cls(public, secret, server_public)

    def apply(self, sock: zmq.Socket[Any]) -> None:
        sock.curve_publickey = self.public
        sock.curve_secretkey = self.secret
        sock.curve_serverkey = self.server_public


def apply_server(sock: zmq.Socket[Any], directory: Path) -> None:
    """Make ``sock`` a CURVE server with the keypair in ``directory``."""
    public, secret = _load(directory / f"{SERVER}.key_secret", secret=True)
    sock.curve_publickey = public
    sock.curve_secretkey = secret
    sock.curve_server = True


def server_public(directory: Path) -> bytes:
    return _load(directory / f"{SERVER}.key", secret=False)[0]


def identities(directory: Path) -> dict[bytes, str]:
    """Z85 public key → the ``User-Id`` its connections get (``user:NAME``/``agent:NAME``)."""
    names: dict[bytes, str] = {}
    for sub, prefix in ((USERS, USER), (AGENTS, AGENT)):
        for path in sorted((directory / sub).glob("*.key")):
            try:
                public, _ = zmq.auth.load_certificate(str(path))
            except (ValueError, OSError):
                continue
            names[public] = prefix + path.stem
    return names


class Authenticator(zmq.auth.thread.ThreadAuthenticator):
    """ZAP: every CURVE client gets in (the handshake still proves it holds its key); its
    messages carry the name its public key is filed under, or none. The directory is read on
    every handshake, so ``tiresias keys add-*`` takes effect without a restart."""

    def __init__(self, ctx: zmq.Context[Any], directory: Path) -> None:
        super().__init__(ctx)
        self.directory = directory

    def start(self) -> None:
        super().start()
        self.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)

    def curve_user_id(self, client_public_key: bytes) -> str:
        return identities(self.directory).get(z85.encode(client_public_key), "anonymous")
