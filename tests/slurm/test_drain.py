"""Nodes Slurm takes out of service without ending their jobs (drained by an admin, or by
Slurm after a prolog failure): the jobs running there go on, the core places nothing new
there, and a start Slurm could not launch there runs elsewhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_until
from service.conftest import Cluster

from slurm.conftest import beside
from slurm.test_coordinator import running, slurm_times
from tools.slurm_accounting import LocalAccounting
from tools.slurm_local import LocalSlurm

STEP = "0.05"


def coordinator_says(cluster: Cluster, text: str) -> bool:
    return text in (cluster.tmp / "coordinator.log").read_text(errors="replace")


def node_states(cluster: Cluster) -> dict[str, str]:
    """``tiresias nodes``' STATE column, checked against its ``--json`` view."""
    views = json.loads(cluster.cli("nodes", "--json").stdout)
    rows = [line.split() for line in cluster.cli("nodes").stdout.splitlines()[1:]]
    states = {row[0]: row[2] for row in rows}
    assert {v["name"]: v["drained"] for v in views} == {
        n: s == "drained" for n, s in states.items()
    }
    return states


def test_a_drained_node_keeps_its_job_and_takes_no_new_one(
    cluster: Cluster, slurm: LocalSlurm
) -> None:
    """A 1-GPU job runs on a 2-GPU node; an admin drains that node. The job runs on (same
    run, same Slurm job), and the next 1-GPU job goes to the other node, though the drained
    one, with one GPU free, fits it best."""
    cluster.start_coordinator("--executor", "slurm", "--slurm-partition", "tiresias")
    cluster.wait_nodes("n1", "n2")
    first = cluster.submit("--steps", "100000", "--step-time", STEP)
    wait_until(lambda: "step 10\n" in cluster.logs(first), 60, "the first job to get going")
    [(node, _)] = cluster.job(first)["placement"].items()
    other = ({"n1", "n2"} - {node}).pop()
    try:
        slurm.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=tiresias-test")
        wait_until(lambda: coordinator_says(cluster, f"node {node} takes no new jobs"), 60,
                   "the coordinator to see the drain")  # fmt: skip
        assert node_states(cluster) == {node: "drained", other: "up"}
        second = cluster.submit("--steps", "100000", "--step-time", STEP)
        wait_until(lambda: running(cluster, second, 0), 60, "the second job to start")
        assert list(cluster.job(second)["placement"]) == [other]
        assert running(cluster, first, 0)  # not lost, not restarted
        assert len(slurm_times(slurm, cluster.job(first)["key"])) == 1
        steps = cluster.job(first)["progress"]["step"]
        wait_until(lambda: cluster.job(first)["progress"]["step"] > steps + 10, 60, "it runs on")
    finally:
        slurm.run("scontrol", "update", f"nodename={node}", "state=resume")
    wait_until(lambda: coordinator_says(cluster, f"node {node} takes jobs again"), 60,
               "the coordinator to see the resume")  # fmt: skip
    assert node_states(cluster) == {node: "up", other: "up"}


@pytest.fixture
def bad_prolog(tmp_path: Path, accounting: LocalAccounting) -> Iterator[tuple[Cluster, LocalSlurm]]:
    """A Slurm whose prolog fails on n1 only, and a coordinator."""
    tmp_path.chmod(0o755)
    prolog = tmp_path / "prolog.sh"
    prolog.write_text('#!/bin/sh\n[ "$SLURMD_NODENAME" != n1 ] || exit 1\n')
    prolog.chmod(0o755)
    with LocalSlurm(tmp_path / "slurm", {"n1": 2, "n2": 2}, accounting=accounting,
                    prolog=prolog) as slurm:  # fmt: skip
        with beside(slurm, tmp_path) as c:
            yield c, slurm
        slurm.run("scontrol", "update", "nodename=n1", "state=resume", check=False)


def test_a_failing_prolog_drains_its_node_and_the_job_runs_elsewhere(
    bad_prolog: tuple[Cluster, LocalSlurm],
) -> None:
    """The core places a job on n1, whose prolog fails: Slurm drains n1 and requeues the job
    held. The coordinator sees n1 take no new jobs, the start lost as never started there,
    and the job starts again on n2 (Slurm's same job, released there) and completes."""
    cluster, slurm = bad_prolog
    cluster.start_coordinator("--executor", "slurm", "--slurm-partition", "tiresias")
    cluster.wait_nodes("n1", "n2")
    job = cluster.submit("--steps", "20", "--step-time", STEP, workers=2)
    wait_until(lambda: cluster.state_of(job) == "completed", 90, "the job to complete")
    view = cluster.job(job)
    texts = [e["text"] for e in view["history"]]
    print(texts)
    assert "drain" in slurm.states()["n1"]
    assert any("its processes could not be started on n1" in t for t in texts), texts
    assert view["restarts"] == 1 and any(t.startswith("restarted on n2") for t in texts), texts
    assert coordinator_says(cluster, "node n1 takes no new jobs")
    assert "done after 20 steps" in cluster.logs(job)
