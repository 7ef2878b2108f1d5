"""A job of a non-root user runs under Slurm as ``sbatch`` run by that user would run it:
its uid, gid and groups, a login's HOME/USER/LOGNAME/SHELL, the job contract and the
submit's ``--env``, nothing of the coordinator's environment; and its directory, plan and
logs are private to it (another user finds nothing)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from helpers import wait_until
from service.conftest import Cluster

from coordinator.executors.slurm.waits import TRIES
from slurm.conftest import User
from tools.slurm_local import LocalSlurm

JOB = """\
import os, subprocess
print(subprocess.run(["id"], capture_output=True, text=True).stdout.strip())
for k in sorted(os.environ):
    print(f"env {k}={os.environ[k]}")
"""
SECRET = "s3cret-token-4711"


def submit_as(owner: User, cluster: Cluster, python: str, script: Path, *extra: str) -> str:
    """Start the coordinator on the Slurm partition, and submit ``script`` as ``owner``
    (``tiresias submit`` run by that user, from the script's directory); its job id."""
    cluster.start_coordinator("--executor", "slurm", "--slurm-partition", "tiresias")
    cluster.wait_nodes("n1", "n2")
    done = owner.run(python, "-m", "coordinator.cli", "submit", "--coordinator",
                     cluster.address, "--json", *extra, str(script), cwd=script.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["job_id"])


def test_job_runs_as_its_owner_with_private_files(
    slurm: LocalSlurm, open_tmp: Path, user_python: str, users: dict[str, User]
) -> None:
    owner, other = users["owner"], users["other"]
    cluster = Cluster(open_tmp)
    cluster.python = user_python
    cluster.env |= {"SLURM_CONF": str(slurm.conf), "COORDINATOR_ONLY": "not-for-jobs"}
    script = open_tmp / "job.py"
    script.write_text(JOB)
    script.chmod(0o644)
    try:
        job = submit_as(owner, cluster, user_python, script, "--env", f"API_TOKEN={SECRET}")
        wait_until(lambda: cluster.state_of(job) == "completed", 60, "the job to complete")
        log = cluster.logs(job)
    finally:
        cluster.close()
        print(cluster.dump_logs())

    lab = next(g for g in owner.groups if g != owner.gid)
    assert (
        f"uid={owner.uid}({owner.name}) gid={owner.gid}({owner.name}) "
        f"groups={owner.gid}({owner.name}),{lab}(tlab{owner.name.removeprefix('towner')})"
    ) in log
    env = dict(line[4:].split("=", 1) for line in log.splitlines() if line.startswith("env "))
    login = (env["HOME"], env["USER"], env["LOGNAME"], env["SHELL"])
    assert login == (f"/home/{owner.name}", owner.name, owner.name, "/bin/bash")
    assert env["API_TOKEN"] == SECRET and env["TIRESIAS_JOB_ID"] == job
    assert "COORDINATOR_ONLY" not in env  # nothing of the coordinator's own environment

    jobdir = next((cluster.state / "slurm").glob(f"*{job}*"))
    private = [jobdir, *jobdir.rglob("*")]
    for path in private:
        st = path.stat()
        assert st.st_uid in (owner.uid, 0), path
        want = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(st.st_mode) == want, (path, oct(st.st_mode))
    assert any(p.name.startswith("slurm-") for p in private)  # Slurm's output too
    assert any(p.name == "launch.json" for p in private)
    # the secret is there, in the plan and the log, for root and the owner, not for others
    grep = ("grep", "-rl", SECRET, str(jobdir))
    assert os.popen(" ".join(grep)).read().strip()
    assert owner.run(*grep).stdout.strip()
    for where in (jobdir, cluster.state):
        found = other.run("grep", "-rl", SECRET, str(where))
        assert found.stdout == "" and "Permission denied" in found.stderr


def test_a_start_that_cannot_execute_fails_after_bounded_tries(
    slurm: LocalSlurm, open_tmp: Path, user_python: str, users: dict[str, User]
) -> None:
    """The coordinator's Python is one the owner cannot execute (in a directory only root
    may enter): the batch step fails with exit 126 before anything runs. Tiresias submits
    it again after a backoff, TRIES times in all, then fails the job with Slurm's words;
    never a loop of restarts."""
    owner = users["owner"]
    private = open_tmp / "root-only"
    private.mkdir(mode=0o700)
    python = Path(sys.executable)
    (private / "env").symlink_to(python.parent.parent)  # the venv (or the installation)
    cluster = Cluster(open_tmp)
    cluster.python = str(private / "env" / python.parent.name / python.name)
    cluster.env["SLURM_CONF"] = str(slurm.conf)
    script = open_tmp / "job.py"
    script.write_text(JOB)
    script.chmod(0o644)
    try:
        job = submit_as(owner, cluster, user_python, script)
        wait_until(lambda: cluster.state_of(job) == "failed", 60, "the job to fail")
        view = cluster.job(job)
    finally:
        cluster.close()
        print(cluster.dump_logs())
    assert view["exit_code"] == 126 and "Permission denied" in view["log_tail"]
    assert view["restarts"] == 0  # retried below the core, as one start
    tries = slurm.run("squeue", "-h", "-t", "all", "-n", f"tiresias:{view['key']}", "-o", "%i")
    assert len(tries.split()) == TRIES
