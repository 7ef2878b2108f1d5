"""Who a Tiresias job runs as under Slurm, and the files only that user may read.

A job's batch step and tasks run as the job's owner with what ``sbatch`` run by that user
would give them: its uid, gid and supplementary groups (``--uid``, ``--gid``; slurmstepd sets
the groups from the node's group database), a login's ``HOME``, ``USER``, ``LOGNAME``,
``SHELL`` and ``PATH`` (``--export`` names exactly these: nothing of the coordinator's own
environment reaches the job), and then the job contract's variables and the submit's
``--env`` from its plan. The job's directory is the owner's, mode 0700; its plan, exit
records and logs are 0600.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterable
from pathlib import Path

from coordinator.executors.node import RunAs, run_as

#: A login's PATH on Debian (``/etc/login.defs``); Slurm's own directory is added when
#: ``srun`` lives elsewhere, since the batch step runs it.
LOGIN_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Slurm creates the batch step's output file with the submitter's umask (``SLURM_UMASK``).
PRIVATE_UMASK = "0077"


def job_user(owner: str) -> RunAs:
    """The user ``owner``'s processes run as: theirs, or the coordinator's own when the job
    is the coordinator user's (or names nobody). ValueError when this coordinator cannot run
    them so."""
    user = run_as(owner) if owner else None
    if user is not None:
        return user
    pw = pwd.getpwuid(os.geteuid())
    groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
    return RunAs(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir, pw.pw_shell or "/bin/sh")


def identity_args(user: RunAs) -> list[str]:
    """``sbatch`` options that run a job as ``user`` with a login's environment only."""
    srun = shutil.which("srun")
    path = LOGIN_PATH
    if srun and os.path.dirname(srun) not in path.split(":"):
        path += f":{os.path.dirname(srun)}"
    login = {"HOME": user.home, "USER": user.name, "LOGNAME": user.name,
             "SHELL": user.shell, "PATH": path}  # fmt: skip
    export = ",".join(f"{k}={v}" for k, v in login.items())
    ids = [f"--uid={user.uid}", f"--gid={user.gid}"] if user.uid != os.geteuid() else []
    return [f"--export={export}", *ids]


def private_dirs(user: RunAs, directories: Iterable[Path]) -> None:
    """Make each directory (and its missing parents) and leave it ``user``'s, mode 0700."""
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        os.chown(directory, user.uid, user.gid)
