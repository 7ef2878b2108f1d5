"""A real Slurm (slurmctld, two slurmd with 2 fake GPUs each) for the Slurm executor's tests,
with real accounting (munged, MariaDB and slurmdbd, shared by every cluster of the session),
started once per session under a temporary directory and stopped afterwards; each test starts
from an idle cluster. Without root or Slurm's packages the tests skip, saying why."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import REPO
from service.conftest import Cluster

from tools.slurm_accounting import LocalAccounting
from tools.slurm_local import LocalSlurm, missing

NODES = {"n1": 2, "n2": 2}
#: "one": a single 2-GPU node, where a job must be preempted to make room for another.
PARTITIONS = {"tiresias": ["n1", "n2"], "one": ["n1"]}
#: Partitions whose plain sbatch jobs the job_submit/lua plugin holds at submission ("one";
#: "tiresias" takes the tests' own srun and sbatch jobs of the local Slurm itself).
HELD = ("one",)


@pytest.fixture(autouse=True)
def _in_a_temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Slurm test (and each ``sbatch``/``srun`` it runs) works in a directory of its
    own: Slurm writes a job's default output file where it was submitted."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def accounting() -> Iterator[LocalAccounting]:
    """One slurmdbd on one MariaDB for the session; every local cluster records its jobs
    there under a name of its own."""
    why = missing(accounting=True)
    if why:
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="tiresias-slurmdbd-"))
    root.chmod(0o755)
    try:
        with LocalAccounting(root) as acct:
            yield acct
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster(accounting: LocalAccounting) -> Iterator[LocalSlurm]:
    """Under a directory of its own that every user may traverse: slurmd runs each job's
    script as its user from its spool directory."""
    root = Path(tempfile.mkdtemp(prefix="tiresias-slurm-cluster-"))
    root.chmod(0o755)
    try:
        with LocalSlurm(root, NODES, PARTITIONS, held=HELD, accounting=accounting) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cluster: LocalSlurm) -> Iterator[LocalSlurm]:
    """The session's cluster, idle, with no jobs; whatever a test left is cancelled after it."""
    slurm_cluster.cancel_all()
    yield slurm_cluster
    slurm_cluster.cancel_all()


@contextmanager
def beside(slurm: LocalSlurm, tmp_path: Path) -> Iterator[Cluster]:
    """A coordinator (``--executor slurm`` where a test starts it so) beside ``slurm``, with
    the CLI's environment pointing at that Slurm; closed, and its logs printed, after."""
    c = Cluster(tmp_path)
    c.env["SLURM_CONF"] = str(slurm.conf)
    try:
        yield c
    finally:
        c.close()
        print(c.dump_logs())


@pytest.fixture
def cluster(slurm: LocalSlurm, tmp_path: Path) -> Iterator[Cluster]:
    """A coordinator beside the session's Slurm."""
    with beside(slurm, tmp_path) as c:
        yield c


@pytest.fixture
def failing(tmp_path: Path, accounting: LocalAccounting) -> Iterator[tuple[Cluster, LocalSlurm]]:
    """A Slurm of its own that declares a silent node down after 10 s (recording its jobs in
    the session's slurmdbd), and a coordinator."""
    nodes = {"n1": 2, "n2": 2}
    with (
        LocalSlurm(tmp_path / "slurm", nodes, slurmd_timeout=10, accounting=accounting) as slurm,
        beside(slurm, tmp_path) as c,
    ):
        yield c, slurm


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A directory every Slurm node sees (here: the one machine's file system)."""
    return tmp_path


@pytest.fixture(scope="session")
def user_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Python every local user may run, with this project importable: a venv of the
    system's ``/usr/bin/python3`` (this one may sit in a home only root can read), seeing
    this interpreter's packages and this checkout; made once per session."""
    system = Path("/usr/bin/python3")
    if not system.exists():
        pytest.skip("no /usr/bin/python3 to make a venv other users can run")
    version = subprocess.run([system, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    if version != str(sys.version_info[:2]):
        pytest.skip(f"/usr/bin/python3 is {version}, not this {sys.version_info[:2]}")
    root = Path(tempfile.mkdtemp(prefix="tiresias-user-python-"))
    root.chmod(0o755)
    subprocess.run([system, "-m", "venv", "--without-pip", root / "venv"], check=True)
    purelib = Path(root / "venv/lib").glob("python3*/site-packages")
    (next(purelib) / "tiresias-test.pth").write_text(
        "\n".join([str(REPO), *{sysconfig.get_path(k) for k in ("purelib", "platlib")}]) + "\n"
    )
    yield str(root / "venv" / "bin" / "python")
    shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    groups: list[int]

    def run(self, *cmd: str, **kw: object) -> subprocess.CompletedProcess[str]:
        """A command as this user, with a login's environment."""
        pw = pwd.getpwuid(self.uid)
        env = {"HOME": pw.pw_dir, "USER": self.name, "LOGNAME": self.name, "PATH": "/usr/bin:/bin",
               **kw.pop("env", {})}  # type: ignore[dict-item]  # fmt: skip
        return subprocess.run(cmd, user=self.uid, group=self.gid, extra_groups=self.groups,
                              env=env, capture_output=True, text=True, timeout=60,
                              **kw)  # type: ignore[call-overload]  # fmt: skip


@pytest.fixture(scope="session")
def users() -> Iterator[dict[str, User]]:
    """Two local users made for the session and removed after it: ``owner`` (also in the
    group ``tiresias-lab``) and ``other``."""
    if os.geteuid() != 0:
        pytest.skip("making OS users needs root")
    tag = os.getpid()
    lab = f"tlab{tag}"
    names = {"owner": f"towner{tag}", "other": f"tother{tag}"}
    subprocess.run(["groupadd", lab], check=True)
    made: dict[str, User] = {}
    try:
        for role, name in names.items():
            extra = ["-G", lab] if role == "owner" else []
            subprocess.run(["useradd", "-M", "-d", f"/home/{name}", "-s", "/bin/bash", *extra,
                            name], check=True)  # fmt: skip
            pw = pwd.getpwnam(name)
            made[role] = User(name, pw.pw_uid, pw.pw_gid, os.getgrouplist(name, pw.pw_gid))
        yield made
    finally:
        for name in names.values():
            subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", lab], capture_output=True)


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary directory other users may traverse (pytest's own is root's, mode 0700)."""
    root = Path(tempfile.mkdtemp(prefix="tiresias-slurm-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)
