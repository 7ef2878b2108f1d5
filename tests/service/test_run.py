"""``tiresias-run``: embedded coordinator + local agent, the job's exit code, Ctrl-C cancels."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FAKE_JOB, Cluster, wait_until

pytestmark = pytest.mark.slow  # starts real processes


def run(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "coordinator.run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def test_embedded_run_streams_logs_and_exits_with_the_job_code(tmp_path: Path) -> None:
    ok = run("--workers", "2", str(FAKE_JOB), "--steps", "3", "--step-time", "0.01", cwd=tmp_path)
    out, err = ok.communicate(timeout=60)
    assert ok.returncode == 0, err
    assert "[local/chief-0.log] done after 3 steps" in out
    assert "[local/worker-1.log] done after 3 steps" in out
    assert err.count("completed") == 1 and "j1 completed (restarts 0, preemptions 0)" in err

    bad = run(str(FAKE_JOB), "--steps", "5", "--step-time", "0.01", "--fail-at", "2", cwd=tmp_path)
    out, err = bad.communicate(timeout=60)
    assert bad.returncode == 3, err
    assert "failing at step 2" in out and "exit code 3" in err


def test_missing_script_is_refused_before_anything_starts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for script in ("no_such_train.py", str(tmp_path / "no_such_train.py")):
        proc = run("--state", str(state), script, cwd=tmp_path)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and err == f"tiresias-run: no such script: {script}" + (
            f" (in {tmp_path})\n" if script == "no_such_train.py" else "\n"
        )
    assert not state.exists()


def test_ctrl_c_cancels_the_job(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = run(
        "--state",
        str(state),
        str(FAKE_JOB),
        "--steps",
        "10000",
        "--step-time",
        "0.02",
        cwd=tmp_path,
    )
    logs = state / "agent" / "logs"  # per job key: <job id>-<state's instance id>
    wait_until(
        lambda: any("step 3" in p.read_text() for p in logs.glob("j1-*/chief-0.log")),
        30,
        "the job to run",
    )
    [log] = logs.glob("j1-*/chief-0.log")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "cancelling j1" in err and "cancelled" in err
    assert "done after" not in log.read_text()


def test_run_against_a_running_cluster(cluster: Cluster) -> None:
    cluster.start_coordinator()
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    proc = run(
        "--coordinator",
        cluster.address,
        str(FAKE_JOB),
        "--steps",
        "2",
        "--step-time",
        "0.01",
        cwd=cluster.tmp,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "done after 2 steps" in out
    assert cluster.state_of("j1") == "completed"


def test_run_says_why_its_job_waits(cluster: Cluster) -> None:
    cluster.start_coordinator()
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    blocker = cluster.submit("--steps", "1000000", "--step-time", "0.05")
    wait_until(lambda: cluster.state_of(blocker) == "running", 30, "the first job to start")
    proc = run("--coordinator", cluster.address, str(FAKE_JOB), "--steps", "2", cwd=cluster.tmp)
    assert proc.stderr is not None
    said = proc.stderr.readline()  # the job id it submitted, or the first state line
    while " waiting" not in said:
        said = proc.stderr.readline()
        assert said, "tiresias-run ended without saying its job waits"
    assert said.rstrip().endswith(
        "j2 waiting: waiting for 1 GPU (0 free): the 1 job ahead of it (Q1: 1) holds or needs "
        "1 of 1"
    ), said
    cluster.cli("cancel", blocker)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "done after 2 steps" in out
