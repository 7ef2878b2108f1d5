"""CURVE key handling: one server keypair, one client keypair, and a directory of authorized
client public keys. ``tiresias keys generate DIR`` writes this layout; the coordinator, agents,
CLI and job runtimes all find their keys in it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

SERVER = "server"
CLIENT = "client"
AUTHORIZED = "authorized"
#: Environment variable naming the key directory for clients (CLI, agents, job runtimes).
KEYS_ENV = "TIRESIAS_CURVE_KEYS"


def generate(directory: Path) -> Path:
    """Create server and client keypairs in ``directory`` and authorize the client key."""
    directory.mkdir(parents=True, exist_ok=True)
    authorized = directory / AUTHORIZED
    authorized.mkdir(exist_ok=True)
    zmq.auth.create_certificates(str(directory), SERVER)
    public, _ = zmq.auth.create_certificates(str(directory), CLIENT)
    shutil.copy(public, authorized / Path(public).name)
    for secret in directory.glob("*.key_secret"):
        secret.chmod(0o600)
    return directory


def _load(path: Path, secret: bool) -> tuple[bytes, bytes | None]:
    if not path.exists():
        raise FileNotFoundError(
            f"CURVE key file {path} does not exist (run `tiresias keys generate {path.parent}`)"
        )
    public, private = zmq.auth.load_certificate(str(path))
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
        public, secret = _load(directory / f"{CLIENT}.key_secret", secret=True)
        server_public, _ = _load(directory / f"{SERVER}.key", secret=False)
        assert secret is not None
        return cls(public, secret, server_public)

    def apply(self, sock: zmq.Socket) -> None:
        sock.curve_publickey = self.public
        sock.curve_secretkey = self.secret
        sock.curve_serverkey = self.server_public


def apply_server(sock: zmq.Socket, directory: Path) -> None:
    """Make ``sock`` a CURVE server with the keypair in ``directory``."""
    public, secret = _load(directory / f"{SERVER}.key_secret", secret=True)
    sock.curve_publickey = public
    sock.curve_secretkey = secret
    sock.curve_server = True


def authorized_dir(directory: Path) -> Path:
    return directory / AUTHORIZED
