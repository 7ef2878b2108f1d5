"""Upgrading the coordinator of a Slurm partition: the state directory an older version wrote
(before starts awaited Slurm's real begin) restarts, keeps its running job, and goes on."""

from __future__ import annotations

from helpers import wait_until
from service.conftest import Cluster
from service.test_state_versions import written_before

from coordinator.service.store import Store
from tools.slurm_local import LocalSlurm

from .test_coordinator import sacct_states

STEP = "0.05"


def test_a_state_from_before_await_begin_restarts(cluster: Cluster, slurm: LocalSlurm) -> None:
    cluster.start_coordinator("--executor", "slurm", "--slurm-partition", "tiresias")
    cluster.wait_nodes("n1", "n2")
    old = cluster.submit("--steps", "60", "--step-time", STEP)
    wait_until(lambda: "step 5\n" in cluster.logs(old), 60, "the job to get going")
    cluster.kill_coordinator()
    written_before(cluster.state, "await_begin")
    cluster.start_coordinator()  # refused, it would not answer
    new = cluster.submit("--steps", "3", "--step-time", STEP)
    for job in (old, new):
        wait_until(lambda j=job: cluster.state_of(j) == "completed", 60, f"{job} to complete")
    assert cluster.job(old)["restarts"] == 0  # the run it had started ran on
    assert cluster.logs(old).count(f"=== {old} restart 0 on") == 1
    assert sacct_states(slurm, cluster.job(old)["key"], ["COMPLETED"]) == ["COMPLETED"]
    store = Store(cluster.state)
    assert store.get_meta("core_options")["await_begin"] is True
    store.close()
