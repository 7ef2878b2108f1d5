"""Retention: a finished job's checkpoints are removed after ``--keep-finished`` by the
coordinator, and a job's logs by its node's agent once nothing was written in them for as
long; an active job's files are never touched."""

from __future__ import annotations

import os
import time
from pathlib import Path

from coordinator.service.retention import sweep_logs

from .conftest import Cluster, wait_until


def test_a_finished_jobs_checkpoints_go_an_active_ones_stay(cluster: Cluster) -> None:
    cluster.start_coordinator("--keep-finished", "0.001")
    cluster.start_agent("a", gpus=1)
    cluster.wait_nodes("a")
    done = cluster.submit("--steps", "2", "--step-time", "0.01")
    wait_until(lambda: cluster.state_of(done) == "completed", 60, "the first job to complete")
    active = cluster.submit("--steps", "1000000", "--step-time", "0.05")
    directories = []
    for job in (done, active):
        directory = cluster.state / "checkpoints" / cluster.job(job)["key"]
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "weights").write_bytes(b"\0" * 1024)
        directories.append(directory)
    cluster.kill_coordinator()
    cluster.start_coordinator()  # it sweeps at start, then hourly
    wait_until(lambda: not directories[0].exists(), 60, "the finished job's checkpoints to go")
    assert (directories[1] / "weights").exists()
    assert "removed " in (cluster.tmp / "coordinator.log").read_text()


def test_log_directories_nothing_was_written_in_go(tmp_path: Path) -> None:
    now = time.time()
    old, fresh = tmp_path / "j1-x", tmp_path / "j2-x"
    for directory, age in ((old, 100.0), (fresh, 1.0)):
        directory.mkdir()
        log = directory / "chief-0.log"
        log.write_text("step 1\n")
        for path in (log, directory):
            os.utime(path, (now - age, now - age))
    # a log written recently keeps its whole directory, however old the rest
    (tmp_path / "j3-x").mkdir()
    (tmp_path / "j3-x" / "worker-1.log").write_text("")
    os.utime(tmp_path / "j3-x", (now - 100.0, now - 100.0))
    assert sweep_logs(tmp_path, 50.0, now) == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j2-x", "j3-x"]
    assert sweep_logs(tmp_path / "none", 50.0, now) == []
