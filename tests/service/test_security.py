"""Identity and ownership on one machine: a second OS user (made here with ``useradd``, and
reused by later runs) talks to the coordinator's Unix socket, which knows it by its uid. It
may look at root's job but not cancel it, read its logs or its environment, nor pose as an
agent; its own job runs with its uid; state and logs are private files."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from coordinator import protocol
from coordinator.service.client import Client, RequestError
from coordinator.service.coordinator import Options

from .conftest import FAKE_JOB, Cluster, in_process_coordinator, wait_until
from .test_reconcile import ScriptedAgent

pytestmark = pytest.mark.slow  # starts real processes

OTHER = "tiresias-test-other"
#: A job as a user writes one: it says who it runs as.
WHOAMI = 'import os\nprint(f"running as uid={os.getuid()} gid={os.getgid()}")\n'


@pytest.fixture(scope="module")
def other() -> pwd.struct_passwd:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make a second OS user")
    try:
        return pwd.getpwnam(OTHER)
    except KeyError:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER],
            capture_output=True,
            text=True,
        )
        try:  # a concurrent run may have made it first
            return pwd.getpwnam(OTHER)
        except KeyError:
            pytest.fail(f"useradd {OTHER} failed: {made.stderr}")


@pytest.fixture
def shared_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster in a directory every user may enter (pytest's own is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="tiresias-sec-"))
    base.chmod(0o755)
    cluster = Cluster(base)
    try:
        yield cluster
    finally:
        cluster.close()
        if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
            print(cluster.dump_logs())
        shutil.rmtree(base, ignore_errors=True)


def reachable_python(base: Path) -> list[str]:
    """A command prefix under which other users may run this interpreter (the agent starts
    their jobs with it). It often lives under a home directory closed to them (``/root`` is
    0700): then the agent runs in a mount namespace of its own, where that directory is
    0711 and holds only the interpreter's tree."""
    path = Path(os.path.realpath(sys.executable))
    closed = [d for d in path.parents if not d.stat().st_mode & 0o001]
    if not closed:
        return []
    if len(closed) > 1 or shutil.which("unshare") is None:
        pytest.skip(f"other users cannot run {path}")
    top = closed[0]
    child = path.relative_to(top).parts[0]
    view = base / "interpreter-view"
    (view / child).mkdir(parents=True)
    view.chmod(0o711)
    mounts = f"mount --bind {top / child} {view / child} && mount --rbind {view} {top}"
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$@"', "-"]


def as_user(user: pwd.struct_passwd, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": "/nonexistent"},
    )


def tiresias(cluster: Cluster, user: pwd.struct_passwd, *args: str) -> subprocess.CompletedProcess:
    command, *rest = args
    cli = [sys.executable, "-m", "coordinator.cli", command, "--coordinator", cluster.address]
    return as_user(user, *cli, *rest)


def test_a_second_user_cannot_touch_roots_job_and_runs_as_itself(
    shared_cluster: Cluster, other: pwd.struct_passwd
) -> None:
    cluster = shared_cluster
    cluster.start_coordinator()
    cluster.start_agent("a", 2, prefix=reachable_python(cluster.tmp))
    cluster.wait_nodes("a")
    out = cluster.cli(
        "submit",
        "--json",
        "--env",
        "SECRET=hunter2",
        str(FAKE_JOB),
        "--steps",
        "100000",
        "--step-time",
        "0.05",
    )
    victim = json.loads(out.stdout)["job_id"]
    logs = cluster.tmp / "agents" / "a" / "logs"  # per job key: <job id>-<state instance>
    log = wait_until(lambda: next(logs.glob(f"{victim}-*/chief-0.log"), None), 30, "a log")
    wait_until(lambda: "step 2" in log.read_text(), 30, "root's job to run")

    cancel = tiresias(cluster, other, "cancel", victim)
    assert cancel.returncode == 1 and "belongs to 'root'" in cancel.stderr, cancel.stderr
    logs = tiresias(cluster, other, "logs", victim)
    assert logs.returncode == 1 and "only its owner or an admin" in logs.stderr, logs.stderr
    status = tiresias(cluster, other, "status", "--json", victim)
    assert status.returncode == 0 and json.loads(status.stdout)["owner"] == "root"
    assert "hunter2" not in status.stdout
    # a failed job's log tail is log content too
    failed = cluster.submit("--steps", "5", "--step-time", "0.01", "--fail-at", "1")
    wait_until(lambda: cluster.state_of(failed) == "failed", 60, "root's job to fail")
    assert "failing at step 1" in cluster.job(failed)["log_tail"]
    status = tiresias(cluster, other, "status", "--json", failed)
    assert json.loads(status.stdout)["log_tail"] is None, status.stdout
    # refused in every state: a waiting job (no logs yet), a cancelled one, a failed one
    waiting = cluster.submit("--steps", "5", workers=2)  # 1 of the 2 GPUs is free
    assert cluster.state_of(waiting) == "waiting"
    for job in (waiting, failed):
        refused = tiresias(cluster, other, "logs", job)
        assert refused.returncode == 1, refused
        assert refused.stderr.startswith("tiresias logs: job ") and "only its owner" in (
            refused.stderr
        )
    cluster.client.request("cancel", job_id=waiting)
    refused = tiresias(cluster, other, "logs", waiting)
    assert refused.returncode == 1 and "only its owner" in refused.stderr, refused
    # nor around the coordinator: the journal (which holds the environment) and the logs
    # are root's files, and the socket will not take it for an agent
    probe = as_user(
        other,
        sys.executable,
        "-c",
        "import sys\n"
        "from coordinator.service.client import Client, RequestError\n"
        "for path in sys.argv[2:]:\n"
        "    try:\n"
        "        open(path, 'rb').read()\n"
        "        print('READ', path)\n"
        "    except PermissionError:\n"
        "        print('denied', path)\n"
        "try:\n"
        "    Client(sys.argv[1], timeout=10).request(\n"
        "        'register', node='evil', gpus=[{'index': 0}], running=[])\n"
        "    print('REGISTERED')\n"
        "except RequestError as e:\n"
        "    print('refused:', e)\n",
        cluster.address,
        str(cluster.state / "coordinator.sqlite"),
        str(log),
    )
    assert "READ" not in probe.stdout and probe.stdout.count("denied") == 2, probe
    assert "refused: register: user 'tiresias-test-other' may not speak for node" in probe.stdout
    assert cluster.state_of(victim) == "running"

    # its own job runs with its uid, and it reads its own logs
    script = cluster.tmp / "whoami_job.py"
    script.write_text(WHOAMI)
    submit = tiresias(cluster, other, "submit", "--json", str(script))
    assert submit.returncode == 0, submit.stderr
    mine = json.loads(submit.stdout)["job_id"]
    wait_until(lambda: cluster.job(mine)["finish"] is not None, 60, "the other user's job")
    assert cluster.state_of(mine) == "completed", cluster.job(mine)["log_tail"]
    own_logs = tiresias(cluster, other, "logs", mine)
    assert own_logs.returncode == 0, own_logs.stderr
    assert f"running as uid={other.pw_uid} gid={other.pw_gid}" in own_logs.stdout
    assert cluster.job(mine)["owner"] == OTHER
    # and its runtime, running as it, reports progress
    submit = tiresias(cluster, other, "submit", "--json", str(FAKE_JOB), "--steps", "3")
    reporting = json.loads(submit.stdout)["job_id"]
    wait_until(
        lambda: cluster.job(reporting)["progress"].get("iterations"),
        60,
        "a report from the runtime of the other user's job",
    )
    (checkpoints,) = (cluster.state / "checkpoints").glob(f"{mine}-*")
    assert checkpoints.stat().st_uid == other.pw_uid

    # what is on disk is private
    mode = lambda p: p.stat().st_mode & 0o777  # noqa: E731
    assert mode(cluster.state) == 0o711  # passable to checkpoints/JOB, not listable
    for db in cluster.state.glob("coordinator.sqlite*"):
        assert mode(db) == 0o600, db
    assert mode(cluster.tmp / "agents" / "a") == 0o700
    assert mode(log) == 0o600

    # an admin may act on any job: root cancels the other user's one
    assert cluster.client.request("cancel", job_id=victim)["state"] in ("preempting", "cancelled")


def test_jobs_are_refused_as_root_unless_allowed(tmp_path: Path) -> None:
    opts = Options(bind=f"ipc://{tmp_path}/c.sock", state=tmp_path / "state")
    with in_process_coordinator(opts) as coord, Client(coord.address, timeout=5) as client:
        client.request("register", node="n", gpus=[{"index": 0}], running=[])
        if os.geteuid() == 0:
            with pytest.raises(RequestError, match="jobs do not run as root"):
                client.request("submit", argv=["x.py"], workers=1)
        else:
            assert client.request("submit", argv=["x.py"], workers=1)["job_id"] == "j1"


def test_a_user_runs_tiresias_run_with_no_setup(other: pwd.struct_passwd) -> None:
    """The README's first command, as an unprivileged user: no keys, no socket to share."""
    base = Path(tempfile.mkdtemp(prefix="tiresias-sec-"))
    try:
        base.chmod(0o755)
        work = base / "work"
        work.mkdir()
        os.chown(work, other.pw_uid, other.pw_gid)
        run = subprocess.run(
            [
                *reachable_python(base),
                "setpriv",
                f"--reuid={other.pw_uid}",
                f"--regid={other.pw_gid}",
                "--init-groups",
                sys.executable,
                "-m",
                "coordinator.run",
                str(FAKE_JOB),
                "--steps",
                "2",
                "--step-time",
                "0.01",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=work,
            env={**os.environ, "HOME": str(work)},
        )
        assert run.returncode == 0, run.stderr
        assert "done after 2 steps" in run.stdout
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_admin_may_act_on_any_job(other: pwd.struct_passwd) -> None:
    base = Path(tempfile.mkdtemp(prefix="tiresias-sec-"))
    base.chmod(0o755)
    opts = Options(
        bind=f"ipc://{base}/c.sock",
        state=base / "state",
        allow_root_jobs=True,
        admins=frozenset({OTHER}),
    )
    try:
        with in_process_coordinator(opts) as coord, Client(coord.address, timeout=5) as client:
            ScriptedAgent(coord.address, "n", 1).close()
            job = client.request("submit", argv=["x.py"], workers=1)["job_id"]
            cli = [sys.executable, "-m", "coordinator.cli", "cancel", job]
            cancel = as_user(other, *cli, "--coordinator", coord.address)
            assert cancel.returncode == 0, cancel.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_log_data_counts_only_from_the_nodes_asked(tmp_path: Path) -> None:
    """A node that never ran a job cannot slip lines into its logs."""
    opts = Options(bind=f"ipc://{tmp_path}/c.sock", state=tmp_path / "s", allow_root_jobs=True)
    with in_process_coordinator(opts) as coord, Client(coord.address, timeout=5) as client:
        runner = ScriptedAgent(coord.address, "runner", 1)
        job = client.request("submit", argv=["x.py"], workers=1)["job_id"]
        assert runner.command("launch")["job_id"] == job
        bystander = ScriptedAgent(coord.address, "bystander", 1)
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(coord.address)
        sock.send(protocol.encode("logs", id=7, job_id=job))
        req = runner.command("fetch_logs")["req"]
        forged = {"chief-0.log": {"offset": 5, "size": 5, "data": "owned"}}
        bystander.sock.send(protocol.encode("log_data", node="bystander", req=req, files=forged))
        assert bystander.request("heartbeat", node="bystander")["type"] == "ok"  # handled it
        real = {"chief-0.log": {"offset": 2, "size": 2, "data": "ok"}}
        runner.sock.send(protocol.encode("log_data", node="runner", req=req, files=real))
        assert sock.poll(5000)
        reply = protocol.decode(sock.recv())
        sock.close()
        assert reply["files"] == {"runner/chief-0.log": real["chief-0.log"]}
