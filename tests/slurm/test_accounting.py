"""Attained service under Slurm counts from when Slurm really started a run to when it
really ended (Slurm's start and end times), not from the coordinator's Start decision."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_until
from service.conftest import Cluster

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
