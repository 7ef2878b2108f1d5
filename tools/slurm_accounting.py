"""Slurm's accounting storage on one machine: ``munged``, a MariaDB server and ``slurmdbd``
from Debian's packages, under one directory, serving any number of local Slurm clusters
(``tools/slurm_local.py``; each registers its ``ClusterName`` here and shares this munge
key, as a site's clusters share one slurmdbd). Needs root.

slurmdbd has no option for its configuration file: it reads ``slurmdbd.conf`` beside the
``slurm.conf`` that ``SLURM_CONF`` names, so this directory holds a small ``slurm.conf`` of
its own (what ``sacctmgr`` needs to reach slurmdbd)."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tools.local_daemons import Daemons

DAEMONS = ("mariadbd", "mariadb-install-db", "slurmdbd", "sacctmgr", "sacct")
DATABASE = "slurm_acct_db"


def missing() -> str | None:
    """Why accounting cannot run here, or None when it can."""
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return f"slurmdbd or MariaDB is not installed ({', '.join(absent)} missing; " \
               "tools/install-test-deps.sh)"  # fmt: skip
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def storage_lines(munge_socket: Path, dbd_port: int) -> str:
    """What a ``slurm.conf`` needs to send its accounting to this slurmdbd: its address, and
    the munge socket to sign with (``AccountingStoragePass`` names it for slurmdbd's
    connections; ``AuthInfo`` covers only slurmctld's and slurmd's)."""
    return f"""\
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStoragePass={munge_socket}
"""


class LocalAccounting(Daemons):
    """``with LocalAccounting(dir) as acct:`` — slurmdbd answers inside;
    ``acct.add_cluster(name)`` before that cluster's slurmctld starts."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root.resolve()
        self.munge = self.root / "munge"
        self.munge_socket = self.munge / "socket"
        self.conf = self.root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.db_port = self.dbd_port = 0

    def start(self, timeout: float = 120.0) -> None:
        r = self.root
        for sub in ("munge", "db", "log"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        self._start_munged(self.munge, timeout)
        password = self._start_mariadb(timeout)
        self.dbd_port = free_port()
        self.conf.write_text(
            "ClusterName=accounting\nSlurmctldHost=localhost(127.0.0.1)\n"
            f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
            + storage_lines(self.munge_socket, self.dbd_port)
        )
        dbd = r / "slurmdbd.conf"  # slurmdbd refuses a configuration others may read
        dbd.touch(0o600)
        dbd.write_text(f"""\
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
PidFile={r}/slurmdbd.pid
LogFile={r}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=slurm
StoragePass={password}
StorageLoc={DATABASE}
""")
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        self._wait(lambda: self.sacctmgr("-n", "list", "cluster", check=False) is not None,
                   timeout, "slurmdbd to answer")  # fmt: skip

    def _start_mariadb(self, timeout: float) -> str:
        """A MariaDB server on a free loopback port, with a database and a user for
        slurmdbd; that user's password."""
        db, sock = self.root / "db", self.root / "mysql.sock"
        install = ["mariadb-install-db", "--no-defaults", f"--datadir={db}", "--user=root"]
        subprocess.run([*install, "--skip-test-db"], capture_output=True, check=True,
                       timeout=timeout)  # fmt: skip
        self.db_port = free_port()
        self._spawn("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={db}", "--user=root",
                                 "--bind-address=127.0.0.1", f"--port={self.db_port}",
                                 f"--socket={sock}", f"--pid-file={self.root}/mysql.pid",
                                 "--innodb-buffer-pool-size=64M",
                                 f"--log-error={self.root}/log/mariadb.log"])  # fmt: skip
        self._wait(sock.exists, timeout, "MariaDB's socket")
        password = secrets.token_hex(16)
        grants = "".join(
            f"CREATE USER 'slurm'@'{host}' IDENTIFIED BY '{password}';"
            f"GRANT ALL ON {DATABASE}.* TO 'slurm'@'{host}';"
            for host in ("127.0.0.1", "localhost")
        )
        for _ in range(int(timeout / 0.1)):  # the socket exists a moment before it accepts
            done = subprocess.run(["mariadb", "--no-defaults", f"--socket={sock}", "-uroot",
                                   "-e", grants], capture_output=True, text=True)  # fmt: skip
            if done.returncode == 0:
                return password
            if "Can't connect" not in done.stderr:
                raise RuntimeError(f"MariaDB: {done.stderr.strip()}")
            time.sleep(0.1)
        raise RuntimeError(f"MariaDB did not accept connections; see {self.root}/log")

    def sacctmgr(self, *args: str, check: bool = True) -> str | None:
        """``sacctmgr`` against this slurmdbd; its stdout, or None when it failed and
        ``check`` is False."""
        done = subprocess.run(["sacctmgr", *args], env=self.env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        if done.returncode != 0:
            if check:
                raise RuntimeError(f"sacctmgr {' '.join(args)}: {done.stderr.strip()}")
            return None
        return done.stdout

    def add_cluster(self, name: str) -> None:
        """Register a cluster, as an admin does before its slurmctld first starts."""
        known = self.sacctmgr("-n", "-P", "list", "cluster", "format=cluster") or ""
        if name not in known.split():
            self.sacctmgr("-i", "add", "cluster", name)
