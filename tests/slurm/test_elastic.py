"""Elastic gangs under ``--executor slurm``: a resize is a checkpointed stop and a new held
Slurm job on the nodes the core chose, with the same requeue rules as any restart."""

from __future__ import annotations

import json

from helpers import FAKE_JOB, wait_until
from service.conftest import Cluster

from slurm.test_coordinator import STEP, sacct_runs, sacct_states
from tools.slurm_local import LocalSlurm


def test_an_elastic_job_grows_onto_a_new_held_slurm_job(
    cluster: Cluster, slurm: LocalSlurm
) -> None:
    """Two Slurm nodes of 2 GPUs, one taken by a rigid job: a ``--workers 2:4`` job starts
    on the other (one Slurm job on one node), holding at step 10. The rigid job ends; the
    elastic one checkpoints there (its Slurm job requeued held, as any preemption's), and
    its run on 4 GPUs is a new Slurm job across both nodes (the held one cancelled), which
    resumes at step 10 and completes."""
    cluster.start_coordinator("--executor", "slurm", "--slurm-partition", "tiresias")
    cluster.wait_nodes("n1", "n2")
    rigid = cluster.submit("--steps", "1000000", "--step-time", STEP, workers=2)
    wait_until(lambda: "step 1\n" in cluster.logs(rigid), 60, "the rigid job to run")
    args = ("--steps", "40", "--step-time", STEP, "--hold-at", "10")
    out = cluster.cli("submit", "--json", "--workers", "2:4", str(FAKE_JOB), *args)
    elastic = json.loads(out.stdout)["job_id"]
    wait_until(lambda: "holding at step 10" in cluster.logs(elastic), 60, "the small run")
    small = cluster.job(elastic)
    assert sum(map(len, small["placement"].values())) == 2 and len(small["placement"]) == 1
    [line] = [x for x in cluster.cli("queue").stdout.splitlines() if x.startswith(elastic)]
    assert line.split()[1:5] == ["running", "2", "of", "2:4"], line
    key = small["key"]
    # slurmdbd records a run a moment after Slurm starts it
    wait_until(lambda: len(sacct_runs(slurm, key)) == 1, 30, "slurmdbd to record the run")
    [first] = sacct_runs(slurm, key)

    cluster.cli("cancel", rigid)  # its GPUs free up
    wait_until(lambda: cluster.state_of(elastic) == "completed", 90, "the elastic job")
    done = cluster.job(elastic)
    assert (done["restarts"], done["exit_code"], done["progress"]["step"]) == (1, 0, 40)
    logs = cluster.logs(elastic)
    assert "checkpointed at step 10" in logs and "start at step 10 (restart 1" in logs
    assert logs.count(f"=== {elastic} restart 1 on") == 4  # four ranks in the grown run
    assert any(e["text"].startswith("grew to 4") for e in done["history"]), done["history"]
    # the small run's Slurm job, requeued held at its checkpoint as any preemption's (and
    # cancelled, unrun, for the grown run); the grown run: a new Slurm job, completed
    states = sacct_states(slurm, key, ["REQUEUED", "COMPLETED"])
    assert states == ["REQUEUED", "COMPLETED"], states
    runs = sacct_runs(slurm, key)
    assert runs[0]["jobid"] == first["jobid"] != runs[1]["jobid"]
    last = slurm.run("sacct", "-X", "-n", "-P", "-j", first["jobid"], "-o", "state")
    assert last.startswith("CANCELLED"), last  # nothing of the small run is left in Slurm
