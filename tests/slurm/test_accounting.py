"""Attained service under Slurm counts from when Slurm really started a run to when it
really ended (Slurm's start and end times), not from the coordinator's Start decision; and
``tiresias status``'s history tells the same runs as slurmdbd's ``sacct``."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_until
from service.conftest import Cluster

from slurm.test_coordinator import STEP, sacct_runs, sacct_states
from tools.slurm_local import LocalSlurm

DELAY = 3  # seconds Slurm waits before starting a released job


@pytest.fixture
def slow_start(slurm: LocalSlurm, tmp_path: Path) -> Iterator[Cluster]:
    """A coordinator whose releases Slurm honours only ``DELAY`` s later: its ``scontrol
    release`` first sets the job's begin time (``StartTime=now+3``, as ``sbatch --begin``)."""
    real = shutil.which("scontrol")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "scontrol"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = release ]; then {real} update "jobid=$2" StartTime=now+{DELAY} || exit; fi\n'
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    c = Cluster(tmp_path)
    c.env["SLURM_CONF"] = str(slurm.conf)
    c.env["PATH"] = f"{bin_dir}:{c.env['PATH']}"
    yield c
    c.close()
    print(c.dump_logs())


def sacct_elapsed(slurm: LocalSlurm, key: str) -> list[int]:
    """Slurm's elapsed seconds of each run of the Slurm job of the Tiresias job ``key``."""
    out = slurm.run("sacct", "-c", "-n", "-P", "-o", "jobname,elapsed")
    runs = [e for name, e in (line.split("|") for line in out.split()) if key in name]
    return [sum(int(x) * 60**i for i, x in enumerate(reversed(e.split(":")))) for e in runs]


def test_service_is_slurms_elapsed_time_not_the_decision_to_exit(
    slow_start: Cluster, slurm: LocalSlurm
) -> None:
    cluster = slow_start
    cluster.start_coordinator("--executor", "slurm", "--slurm-partition", "tiresias")
    cluster.wait_nodes("n1", "n2")
    job = cluster.submit("--steps", "20", "--step-time", "0.1", workers=2)
    wait_until(lambda: cluster.state_of(job) == "completed", 90, "the job to complete")
    view = cluster.job(job)
    [elapsed] = sacct_elapsed(slurm, view["key"])
    decided = view["finish"] - view["first_start"]  # Start decision to the exit seen
    assert decided - view["executed"] >= DELAY - 1  # the delayed start is not served
    assert abs(view["executed"] - elapsed) <= 0.5  # Slurm's start to Slurm's end
    assert view["attained"] == pytest.approx(2 * view["executed"])


def test_a_job_slurm_has_not_started_is_not_demoted(slow_start: Cluster, slurm: LocalSlurm) -> None:
    """Slurm starts the released job ``DELAY`` s late: its service (2 GPUs, a 2 GPU-s
    threshold) crosses into the second queue 1 s after Slurm's start, not 1 s after the
    Start decision while it had not run (the run awaits its begin)."""
    cluster = slow_start
    cluster.start_coordinator(
        *("--executor", "slurm", "--slurm-partition", "tiresias", "--thresholds", "2")
    )
    cluster.wait_nodes("n1", "n2")
    job = cluster.submit("--steps", "40", "--step-time", "0.1", workers=2)
    wait_until(lambda: cluster.job(job)["queue"] == 1, 90, "the job to be demoted")
    view = cluster.job(job)
    [began] = slurm.run("squeue", "-h", "-t", "all", "-n", f"tiresias:{view['key']}",
                        "-o", "%S").split()  # fmt: skip
    [demoted] = [e["wall"] for e in view["history"] if e["kind"] == "demoted"]
    [started] = [e["wall"] for e in view["history"] if e["kind"] == "started"]
    assert demoted - started >= DELAY, (started, demoted)  # not 1 s after the decision
    assert -1 <= demoted - (wall(began) + 1) <= 2, (began, demoted)  # Slurm's whole seconds


def wall(stamp: str) -> float:
    """A time as ``sacct`` prints it (local time, whole seconds)."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def test_status_history_agrees_with_sacct(cluster: Cluster, slurm: LocalSlurm) -> None:
    """A job preempted by the policy (real clock): ``tiresias status``'s history has one
    start per run slurmdbd recorded, each within Slurm's whole second of Slurm's start, and
    the preemption where Slurm's first run ended, requeued."""
    cluster.start_coordinator(
        *("--executor", "slurm", "--slurm-partition", "one"),
        *("--policy", "tiresias-l", "--thresholds", "2", "--grace", "30"),
    )
    cluster.wait_nodes("n1")
    long = cluster.submit("--steps", "40", "--step-time", STEP, "--hold-at", "5", workers=2)
    wait_until(lambda: "holding at step 5" in cluster.logs(long), 60, "the long job to hold")
    wait_until(lambda: cluster.job(long)["queue"] == 1, 60, "the long job to be demoted")
    cluster.submit("--steps", "4", "--step-time", STEP)
    wait_until(lambda: cluster.state_of(long) == "completed", 90, "the long job to finish")
    view = cluster.job(long)
    assert sacct_states(slurm, view["key"], ["REQUEUED", "COMPLETED"]) == ["REQUEUED", "COMPLETED"]
    runs = sacct_runs(slurm, view["key"])
    history = {kind: [e["wall"] for e in view["history"] if e["kind"] == kind]
               for kind in ("started", "restarted", "preempted")}  # fmt: skip
    starts = history["started"] + history["restarted"]
    assert len(starts) == len(runs) == view["restarts"] + 1
    for decided, run in zip(starts, runs, strict=True):
        # Slurm starts a released job on its next pass (sched_interval=1) and prints whole s
        assert -1 <= wall(run["start"]) - decided <= 2, (decided, run)
    [preempted] = history["preempted"]  # the signal; the requeue once the job checkpointed
    assert -1 <= wall(runs[0]["end"]) - preempted <= 2 + 1, (preempted, runs[0])
    executed = sum(wall(r["end"]) - wall(r["start"]) for r in runs)
    assert abs(view["executed"] - executed) <= len(runs)  # Slurm's whole seconds, each run
